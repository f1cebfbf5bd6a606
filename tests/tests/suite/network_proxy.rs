//! `network = "proxy"` end to end, through the real binary: commands in the default-style
//! sandbox (and in docker with `--network none`) reach origins on this machine's loopback only
//! through the engine's egress proxy, under `[network]`; everything else fails. Origins are
//! real servers (a plain HTTP one here, an HTTPS one with a test certificate and a package
//! index in Python), their names pinned to 127.0.0.1 in `[network.resolve]`. No traffic leaves
//! loopback: refused destinations are refused before any connection is made.

use std::io::{Read, Write};
use std::net::{TcpListener, UdpSocket};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use paddock_tests::{Run, backend_skipped, paddock_at, services_policy};
use serde_json::{Value, json};

/// A plain HTTP origin on 127.0.0.1: answers `origin saw <request line>`, counts connections.
struct Origin {
    port: u16,
    connections: Arc<AtomicUsize>,
}

fn origin() -> Origin {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = connections.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            counted.fetch_add(1, Ordering::SeqCst);
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&seen);
                let line = text.lines().next().unwrap_or_default().to_owned();
                let auth = text
                    .lines()
                    .find(|l| l.to_ascii_lowercase().starts_with("authorization:"))
                    .map_or(String::new(), |l| {
                        format!(" with {}", l.to_ascii_lowercase())
                    });
                let body = format!("origin saw {line}{auth}\n");
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    Origin { port, connections }
}

/// Servers written in Python: an HTTPS origin (`tls CERT KEY`) and a package index with one
/// small wheel (`index DIR`). Each prints its port, then serves.
const HELPER: &str = r#"
import http.server, os, ssl, sys, zipfile

class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

class Hello(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        auth = self.headers.get("Authorization")
        body = ("tls origin saw " + self.path + (" with " + auth if auth else "") + "\n").encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass

if sys.argv[1] == "tls":
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hello)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(sys.argv[2], sys.argv[3])
    server.socket = context.wrap_socket(server.socket, server_side=True)
else:
    root = sys.argv[2]
    wheel = "paddock_probe-1.0-py3-none-any.whl"
    os.makedirs(os.path.join(root, "simple", "paddock-probe"), exist_ok=True)
    os.makedirs(os.path.join(root, "packages"), exist_ok=True)
    with zipfile.ZipFile(os.path.join(root, "packages", wheel), "w") as z:
        z.writestr("paddock_probe.py", "VALUE = 42\n")
        info = "paddock_probe-1.0.dist-info/"
        z.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: paddock-probe\nVersion: 1.0\n")
        z.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: paddock-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(info + "RECORD", "paddock_probe.py,,\n" + info + "METADATA,,\n" + info + "WHEEL,,\n" + info + "RECORD,,\n")
    with open(os.path.join(root, "simple", "paddock-probe", "index.html"), "w") as f:
        f.write('<html><body><a href="../../packages/%s">%s</a></body></html>\n' % (wheel, wheel))
    os.chdir(root)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
print(server.server_address[1], flush=True)
server.serve_forever()
"#;

/// A Python server of [`HELPER`], ended when dropped.
struct PythonServer {
    child: Child,
    port: u16,
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python_server(dir: &Path, args: &[&str]) -> PythonServer {
    let helper = dir.join("servers.py");
    std::fs::write(&helper, HELPER).unwrap();
    let mut child = Command::new("python3")
        .arg(&helper)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("python3 for the test servers: {e}"));
    let mut line = String::new();
    let mut stdout = child.stdout.take().unwrap();
    let mut byte = [0u8; 1];
    while stdout.read(&mut byte).unwrap_or(0) == 1 && byte[0] != b'\n' {
        line.push(byte[0] as char);
    }
    let port = line
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("no port from {args:?}: {line:?}"));
    PythonServer { child, port }
}

/// The host's Python itself (not a pyenv shim, which may want to write under its root).
fn host_python() -> String {
    let out = Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A test CA and a certificate it signed for `name` (rustls wants a real chain: a
/// self-signed CA certificate is no server certificate): (CA, certificate, key) files in `dir`.
fn test_certificate(
    dir: &Path,
    name: &str,
) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    let path = |f: &str| dir.join(f);
    let openssl = |args: &[&str]| {
        let status = Command::new("openssl")
            .args(args)
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap_or_else(|e| panic!("openssl: {e}"));
        assert!(status.success(), "openssl {args:?}");
    };
    openssl(&[
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-subj",
        "/CN=paddock test CA",
    ]);
    openssl(&[
        "req",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-keyout",
        "key.pem",
        "-out",
        "leaf.csr",
        "-subj",
        &format!("/CN={name}"),
    ]);
    std::fs::write(
        path("leaf.ext"),
        format!(
            "subjectAltName=DNS:{name}\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
        ),
    )
    .unwrap();
    openssl(&[
        "x509",
        "-req",
        "-in",
        "leaf.csr",
        "-CA",
        "ca.pem",
        "-CAkey",
        "ca.key",
        "-CAcreateserial",
        "-days",
        "1",
        "-out",
        "cert.pem",
        "-extfile",
        "leaf.ext",
    ]);
    (path("ca.pem"), path("cert.pem"), path("key.pem"))
}

/// A state directory, a workspace and a policy whose `sandboxed` local backend (and `docker`,
/// when asked) is proxied under `network`.
struct Setup {
    dir: tempfile::TempDir,
    policy: String,
    /// More of the engine's environment (a credential's value, the roots it trusts).
    env: Vec<(String, String)>,
}

impl Setup {
    fn new(network: &str, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("ws")).unwrap();
        let policy = dir.path().join("policy.toml");
        std::fs::write(
            &policy,
            format!(
                "[backends.sandboxed]\nkind = \"local\"\nsandbox = \"workspace-write\"\n\
                 workspace = \"{ws}\"\nnetwork = \"proxy\"\n\n{extra}\n{network}\n",
                ws = dir.path().join("ws").display()
            ),
        )
        .unwrap();
        Setup {
            policy: policy.display().to_string(),
            dir,
            env: Vec::new(),
        }
    }

    fn home(&self) -> String {
        self.dir.path().join("home").display().to_string()
    }

    fn paddock(&self, args: &[&str]) -> Run {
        let home = self.home();
        let mut all = args.to_vec();
        all.extend(["--policy", &self.policy]);
        let mut env = vec![("PADDOCK_HOME", home.as_str())];
        env.extend(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        paddock_at(
            Some(&self.dir.path().join("ws")),
            &all,
            &env,
            None,
            Duration::from_secs(180),
        )
    }

    /// One command on `backend` in `session`; its output (a failure to run is a test failure).
    fn sh(&self, backend: &str, session: &str, command: &str) -> String {
        let args = json!({ "command": command }).to_string();
        let run = self.paddock(&[
            "call",
            "terminal",
            "--backend",
            backend,
            "--session",
            session,
            "--args",
            &args,
        ]);
        let v: Value = run.json();
        assert!(
            v.get("output").is_some(),
            "{backend}: {command}: {v}\n{}",
            run.stderr
        );
        v["output"].as_str().unwrap_or_default().to_owned()
    }

    /// Any tool in `session` on the sandboxed backend; its JSON result.
    fn call(&self, session: &str, tool: &str, args: Value) -> Value {
        let args = args.to_string();
        let run = self.paddock(&[
            "call",
            tool,
            "--backend",
            "sandboxed",
            "--session",
            session,
            "--args",
            &args,
        ]);
        run.json()
    }

    fn refusals(&self) -> Vec<Value> {
        std::fs::read_to_string(Path::new(&self.home()).join("logs/network.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn close(&self, session: &str) {
        let run = self.paddock(&["sessions", "close", session]);
        assert_eq!(run.code, 0, "close {session}: {}{}", run.stdout, run.stderr);
    }
}

fn pins(names: &[&str]) -> String {
    let mut out = String::from("[network.resolve]\n");
    for name in names {
        out.push_str(&format!("\"{name}\" = \"127.0.0.1\"\n"));
    }
    out
}

#[test]
fn the_sandbox_reaches_allowed_names_only_and_each_refusal_is_logged() {
    let o = origin();
    let network = format!(
        "[network]\nallow = [\"*.allowed.test\", \"origin.test\"]\ndeny = [\"blocked.allowed.test\"]\n{}",
        pins(&[
            "origin.test",
            "api.allowed.test",
            "blocked.allowed.test",
            "other.test"
        ])
    );
    let s = Setup::new(&network, "");
    let p = o.port;
    let out = s.sh(
        "sandboxed",
        "n1",
        &format!(
            "curl -sS http://origin.test:{p}/a; curl -sS http://api.allowed.test:{p}/b; \
             curl -sS http://blocked.allowed.test:{p}/c; curl -sS http://other.test:{p}/d"
        ),
    );
    assert!(out.contains("origin saw GET /a HTTP/1.1\n"), "{out}");
    // The origin sees origin-form, and never the proxy's own headers.
    assert!(out.contains("origin saw GET /b HTTP/1.1\n"), "{out}");
    assert!(
        out.contains(&format!(
            "paddock proxy: blocked.allowed.test:{p} refused by network.deny: blocked.allowed.test"
        )),
        "deny wins over allow: {out}"
    );
    assert!(
        out.contains(&format!(
            "paddock proxy: other.test:{p} refused by network.unknown"
        )),
        "{out}"
    );
    assert_eq!(
        o.connections.load(Ordering::SeqCst),
        2,
        "only the allowed two"
    );
    let refusals = s.refusals();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    let hosts: Vec<&str> = refusals
        .iter()
        .map(|r| r["host"].as_str().unwrap())
        .collect();
    assert_eq!(hosts, ["blocked.allowed.test", "other.test"]);
    for r in &refusals {
        assert_eq!(r["session"], "n1", "{r}");
        assert_eq!(r["backend"], "sandboxed", "{r}");
        assert_eq!(r["port"], p, "{r}");
        assert_eq!(r["method"], "GET", "{r}");
        assert_eq!(r["decision"], "deny", "{r}");
        assert!(r["timestamp_ms"].as_u64().unwrap() > 0, "{r}");
        // The command that made the request, found by the agent from the connection.
        assert!(r["run_id"].as_str().is_some_and(|id| !id.is_empty()), "{r}");
    }
    assert_eq!(refusals[0]["rule"], "network.deny: blocked.allowed.test");
    assert_eq!(refusals[1]["rule"], "network.unknown");
    // The session's traffic is counted.
    let list = s.paddock(&["sessions", "list"]);
    let line = list
        .json_lines()
        .into_iter()
        .find(|l| l["id"] == "n1")
        .unwrap_or_else(|| panic!("{}", list.stdout));
    assert_eq!(line["network"]["requests"], 4, "{line}");
    assert_eq!(line["network"]["refused"], 2, "{line}");
    assert!(
        line["network"]["bytes_down"].as_u64().unwrap() > 100,
        "{line}"
    );
    s.close("n1");
}

#[test]
fn terminal_and_background_commands_in_the_sandbox_reach_the_proxy_too() {
    let o = origin();
    let network = format!(
        "[network]\nallow = [\"origin.test\"]\n{}",
        pins(&["origin.test", "other.test"])
    );
    let s = Setup::new(&network, "");
    let p = o.port;
    // On a terminal: the session agent's own, in the session's sandbox.
    let v = s.call(
        "n3",
        "terminal",
        json!({"command": format!("test -t 1 && echo on-a-tty; curl -sS http://origin.test:{p}/pty"), "pty": true}),
    );
    let out = v["output"].as_str().unwrap_or_else(|| panic!("{v}"));
    assert!(out.contains("on-a-tty"), "{out}");
    assert!(out.contains("origin saw GET /pty HTTP/1.1"), "{out}");
    // In the background: a sandbox of its own, with a listener of its own on the port.
    let v = s.call(
        "n3",
        "terminal",
        json!({"command": format!(
            "curl -sS http://origin.test:{p}/bg; curl -sS http://other.test:{p}/x; echo bg-done"
        ), "background": true}),
    );
    let id = v["session_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no session_id: {v}"))
        .to_owned();
    let mut log = String::new();
    for _ in 0..150 {
        let v = s.call("n3", "process", json!({"action": "log", "session_id": id}));
        log = v["lines"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("\n");
        if log.contains("bg-done") {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(log.contains("origin saw GET /bg HTTP/1.1"), "{log}");
    assert!(
        log.contains(&format!(
            "paddock proxy: other.test:{p} refused by network.unknown"
        )),
        "{log}"
    );
    assert_eq!(o.connections.load(Ordering::SeqCst), 2, "the two allowed");
    // The refusal names the background process as the run that made it.
    let refusals = s.refusals();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["host"], "other.test");
    assert_eq!(refusals[0]["run_id"], json!(id), "{:?}", refusals[0]);
    s.close("n3");
}

#[test]
fn nothing_leaves_the_sandbox_around_the_proxy() {
    let o = origin();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let u = udp.local_addr().unwrap().port();
    let network = format!("[network]\nallow = [\"*\"]\n{}", pins(&["origin.test"]));
    let s = Setup::new(&network, "");
    let p = o.port;
    let py = host_python();
    let out = s.sh(
        "sandboxed",
        "n2",
        &format!(
            "curl -sS --max-time 5 --noproxy '*' http://127.0.0.1:{p}/bypass; echo curl=$?; \
             {py} -c 'import socket; s=socket.socket(); s.settimeout(3); print(\"tcp\", s.connect_ex((\"127.0.0.1\", {p})))'; \
             {py} -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"x\", (\"127.0.0.1\", {u})); print(\"udp sent\")'; \
             {py} -c 'import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b\"\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01\", (\"127.0.0.1\", {u})); print(\"dns sent\")'; \
             getent hosts origin.test; echo getent=$?"
        ),
    );
    assert!(
        out.contains("curl=7"),
        "curl --noproxy cannot connect: {out}"
    );
    assert!(
        out.contains("tcp 111") || out.contains("tcp 13"),
        "a raw TCP connection is refused: {out}"
    );
    // A datagram sent to "127.0.0.1" stays in the sandbox's own loopback.
    let mut buf = [0u8; 512];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram left the sandbox: {out}"
    );
    // The pin is the proxy's, not a resolver the sandbox can use.
    assert!(out.contains("getent=2"), "{out}");
    assert_eq!(o.connections.load(Ordering::SeqCst), 0, "{out}");
    s.close("n2");
}

#[test]
fn private_literals_and_names_resolving_to_loopback_are_refused_unless_pinned() {
    let o = origin();
    let network = "[network]\nallow = [\"*\"]\n";
    let s = Setup::new(network, "");
    let p = o.port;
    let py = host_python();
    // `--noproxy ''`: the proxy for every name, loopback ones too (NO_PROXY would send those
    // straight to the sandbox's own loopback, where nothing listens).
    let out = s.sh(
        "sandboxed",
        "n3",
        &format!(
            "for u in http://localhost:{p}/ http://2130706433:{p}/ http://0x7f.1:{p}/ \
             http://10.1.2.3:{p}/ http://169.254.169.254/latest/meta-data/ http://[::1]:{p}/; \
             do curl -sS --max-time 5 --noproxy '' \"$u\"; done; \
             for h in 2130706433 0x7f.1 0177.0.0.1; do {py} -c 'import socket, sys; s=socket.create_connection((\"127.0.0.1\", 3128)); s.sendall(sys.argv[1].encode()); print(s.recv(4096).decode().split(\"\\r\\n\\r\\n\")[1])' \"GET http://$h:{p}/ HTTP/1.1\r\nHost: $h:{p}\r\n\r\n\"; done"
        ),
    );
    // curl writes 2130706433 and 0x7f.1 as 127.0.0.1; the raw requests keep their spelling.
    for host in [
        "localhost",
        "127.0.0.1",
        "10.1.2.3",
        "169.254.169.254",
        "[::1]",
        "2130706433",
        "0x7f.1",
        "0177.0.0.1",
    ] {
        assert!(
            out.lines()
                .any(|l| l.starts_with(&format!("paddock proxy: {host}:")) && l.contains("refused")),
            "{host} must be refused: {out}"
        );
    }
    assert_eq!(o.connections.load(Ordering::SeqCst), 0, "{out}");
    s.close("n3");
}

#[test]
fn https_goes_through_a_connect_tunnel_untouched() {
    let network = "[network]\nallow = [\"secure.test\"]\n[network.resolve]\n\
                   \"secure.test\" = \"127.0.0.1\"\n\"elsewhere.test\" = \"127.0.0.1\"\n";
    let s = Setup::new(network, "");
    // In the workspace: the sandbox has a /tmp of its own.
    let dir = s.dir.path().join("ws");
    let (ca, cert, key) = test_certificate(&dir, "secure.test");
    let tls = python_server(
        s.dir.path(),
        &[
            "tls",
            &cert.display().to_string(),
            &key.display().to_string(),
        ],
    );
    let p = tls.port;
    let py = host_python();
    let c = ca.display();
    let out = s.sh(
        "sandboxed",
        "n4",
        &format!(
            "curl -sS --cacert {c} https://secure.test:{p}/curl; \
             SSL_CERT_FILE={c} {py} -c 'import urllib.request; print(urllib.request.urlopen(\"https://secure.test:{p}/python\").read().decode())'; \
             curl -sS --cacert {c} https://elsewhere.test:{p}/no; echo curl=$?; \
             curl -sS --cacert {c} --connect-to fronted.test:443:secure.test:{p} https://fronted.test/; echo fronted=$?"
        ),
    );
    // A tunnel to an allowed name whose ClientHello names another (domain fronting) is cut.
    assert!(out.contains("fronted=35"), "{out}");
    assert!(!out.contains("tls origin saw /\n"), "{out}");
    assert!(out.contains("tls origin saw /curl\n"), "{out}");
    assert!(out.contains("tls origin saw /python\n"), "{out}");
    // curl reports a refused CONNECT as the proxy's status.
    assert!(out.contains("curl=56"), "{out}");
    let refusals = s.refusals();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert_eq!(refusals[0]["method"], "CONNECT");
    assert_eq!(refusals[0]["host"], "elsewhere.test");
    assert_eq!(refusals[1]["host"], "secure.test");
    assert_eq!(refusals[1]["rule"], "network.sni");
    s.close("n4");
}

#[test]
fn credentials_reach_the_origin_and_never_the_environment() {
    let o = origin();
    let p = o.port;
    let network = format!(
        "[network]\nallow = [\"origin.test\", \"tls.test\", \"plain-tls.test\"]\n{}\n\
         [[network.credentials]]\nhost = \"origin.test\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{PADDOCK_TEST_EGRESS_TOKEN}}\"\n\
         [[network.credentials]]\nhost = \"tls.test\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{PADDOCK_TEST_EGRESS_TOKEN}}\"\n",
        pins(&["origin.test", "tls.test", "plain-tls.test"])
    );
    let s = Setup::new(&network, "");
    // An HTTPS origin with a certificate of a test CA the engine trusts, as it would a public
    // one (plain-tls.test, not named in it, is fetched with -k to see whose certificate came).
    let (ca, cert, key) = test_certificate(s.dir.path(), "tls.test");
    let tls = python_server(
        s.dir.path(),
        &[
            "tls",
            &cert.display().to_string(),
            &key.display().to_string(),
        ],
    );
    let t = tls.port;
    let token = "sekrit-7f3a9c";
    // A pattern for the token that is not the token itself (grep's own command line).
    let pattern = "'sekrit-7f3a[9]c'";
    let py = host_python();
    let args = json!({
        "command": format!(
            "curl -sS -H 'Authorization: Bearer forged' http://origin.test:{p}/c; \
             env | grep -c {pattern}; grep -rl {pattern} /proc/*/environ /proc/*/cmdline . 2>/dev/null | wc -l; \
             curl -sS https://tls.test:{t}/curl; echo; \
             {py} -c 'import urllib.request; print(urllib.request.urlopen(\"https://tls.test:{t}/python\").read().decode())'; \
             curl -sSv https://tls.test:{t}/issuer 2>&1 | grep -i 'issuer:'; \
             curl -sSvk https://plain-tls.test:{t}/untouched 2>&1 | grep -i -e 'issuer:' -e 'origin saw'; \
             grep -c 'PRIVATE KEY' \"$SSL_CERT_FILE\" \"$NODE_EXTRA_CA_CERTS\"; \
             echo vars=$REQUESTS_CA_BUNDLE,$CURL_CA_BUNDLE"
        )
    })
    .to_string();
    let home = s.home();
    let run = paddock_at(
        Some(&s.dir.path().join("ws")),
        &[
            "call",
            "terminal",
            "--backend",
            "sandboxed",
            "--session",
            "cred",
            "--args",
            &args,
            "--policy",
            &s.policy,
        ],
        &[
            ("PADDOCK_HOME", home.as_str()),
            ("PADDOCK_TEST_EGRESS_TOKEN", token),
            ("SSL_CERT_FILE", &ca.display().to_string()),
        ],
        None,
        Duration::from_secs(120),
    );
    let out = run.json()["output"].as_str().unwrap_or_default().to_owned();
    // The operator's value replaces the one the command tried.
    assert!(
        out.contains(&format!(
            "origin saw GET /c HTTP/1.1 with authorization: bearer {token}"
        )),
        "{out}\n{}",
        run.stderr
    );
    let counts: Vec<&str> = out.lines().skip(1).take(2).collect();
    assert_eq!(
        counts,
        ["0", "0"],
        "the token is nowhere in the sandbox: {out}"
    );
    // Over HTTPS the proxy terminates TLS with the home's CA, which curl and Python trust
    // through the variables set for commands, and adds the credential inside.
    assert!(
        out.contains(&format!("tls origin saw /curl with Bearer {token}\n")),
        "{out}\n{}",
        run.stderr
    );
    assert!(
        out.contains(&format!("tls origin saw /python with Bearer {token}\n")),
        "{out}"
    );
    assert!(
        out.contains("issuer: O=Paddock; CN=Paddock egress proxy CA")
            || out.contains("issuer: O=Paddock, CN=Paddock egress proxy CA"),
        "{out}"
    );
    // A host without a credential is tunnelled end to end: the origin's own certificate.
    assert!(out.contains("issuer: CN=paddock test CA"), "{out}");
    assert!(out.contains("tls origin saw /untouched\n"), "{out}");
    // What the environment gets is certificates, never the CA's key.
    assert!(out.contains(":0\n") && !out.contains(":1\n"), "{out}");
    assert!(out.contains("/egress-ca.pem,"), "{out}");

    // http_request goes through the same terminated tunnel.
    let fetched = paddock_at(
        None,
        &[
            "call",
            "http_request",
            "--session",
            "cred",
            "--args",
            &json!({ "url": format!("https://tls.test:{t}/web") }).to_string(),
            "--policy",
            &s.policy,
        ],
        &[
            ("PADDOCK_HOME", home.as_str()),
            ("PADDOCK_TEST_EGRESS_TOKEN", token),
            ("SSL_CERT_FILE", &ca.display().to_string()),
        ],
        None,
        Duration::from_secs(60),
    )
    .json();
    assert_eq!(
        fetched["content"],
        format!("tls origin saw /web with Bearer {token}\n"),
        "{fetched}"
    );
    // Nothing secret in the log, nor in what the sandbox was given.
    let log =
        std::fs::read_to_string(Path::new(&home).join("logs/network.jsonl")).unwrap_or_default();
    assert!(!log.contains(token));
    s.close("cred");
}

#[test]
fn http_request_goes_through_the_same_policy_and_renders_what_it_fetches() {
    let network_dir = tempfile::tempdir().unwrap();
    let www = network_dir.path().join("www");
    std::fs::create_dir_all(&www).unwrap();
    std::fs::write(
        www.join("page.html"),
        "<html><head><title>T</title><script>steal()</script></head><body><h2>Docs</h2>\
         <p>See <a href=\"/next.html\">next</a>.</p><ul><li>x</li></ul></body></html>",
    )
    .unwrap();
    std::fs::write(www.join("data.json"), "{\"n\": 12345678901234567890}").unwrap();
    std::fs::write(www.join("pic.png"), [0x89, b'P', b'N', b'G']).unwrap();
    std::fs::write(www.join("long.txt"), "y".repeat(5000)).unwrap();
    let server = python_server(network_dir.path(), &["index", &www.display().to_string()]);
    let p = server.port;
    let network = format!(
        "[network]\nallow = [\"web.test\"]\n{}",
        pins(&["web.test", "other.test"])
    );
    let s = Setup::new(&network, "");
    let call = |args: Value| {
        let run = s.paddock(&[
            "call",
            "http_request",
            "--session",
            "w",
            "--args",
            &args.to_string(),
        ]);
        run.json()
    };
    let page = call(json!({"url": format!("http://web.test:{p}/page.html")}));
    assert_eq!(page["status"], 200, "{page}");
    assert_eq!(
        page["content"],
        format!("Title: T\n\n## Docs\n\nSee [next](http://web.test:{p}/next.html).\n- x\n"),
        "{page}"
    );
    let data = call(json!({"url": format!("http://web.test:{p}/data.json")}));
    assert_eq!(data["content"], "{\"n\": 12345678901234567890}", "{data}");
    let pic = call(json!({"url": format!("http://web.test:{p}/pic.png")}));
    assert_eq!(pic["error_code"], "tool:failed", "{pic}");
    assert!(
        pic["error"].as_str().unwrap().contains("of type image/png"),
        "{pic}"
    );
    let long = call(json!({"url": format!("http://web.test:{p}/long.txt"), "max_bytes": 100}));
    assert_eq!(long["truncated"], true, "{long}");
    assert!(
        long["content"]
            .as_str()
            .unwrap()
            .ends_with("[truncated: the first 100 bytes of 5000; raise max_bytes for more]"),
        "{long}"
    );
    let refused = call(json!({"url": format!("http://other.test:{p}/page.html")}));
    assert_eq!(refused["error_code"], "tool_approval:denied", "{refused}");
    assert!(
        refused["error"].as_str().unwrap().contains(&format!(
            "paddock proxy: other.test:{p} refused by network.unknown"
        )),
        "{refused}"
    );
    let logged = s.refusals();
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert_eq!(logged[0]["backend"], "http_request");
    assert_eq!(logged[0]["session"], "w");
    s.close("w");
}

#[test]
fn http_request_speaks_https_through_a_tunnel_and_verifies_the_certificate() {
    let network = "[network]\nallow = [\"secure.test\"]\n[network.resolve]\n\
                   \"secure.test\" = \"127.0.0.1\"\n";
    let s = Setup::new(network, "");
    let dir = s.dir.path().to_path_buf();
    let (ca, cert, key) = test_certificate(&dir, "secure.test");
    let tls = python_server(
        &dir,
        &[
            "tls",
            &cert.display().to_string(),
            &key.display().to_string(),
        ],
    );
    let url = format!("https://secure.test:{}/hello", tls.port);
    let args = json!({ "url": url }).to_string();
    let home = s.home();
    let call = |trust: Option<&Path>| {
        let mut env = vec![("PADDOCK_HOME", home.clone())];
        if let Some(cert) = trust {
            env.push(("SSL_CERT_FILE", cert.display().to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        paddock_at(
            None,
            &[
                "call",
                "http_request",
                "--session",
                "h",
                "--args",
                &args,
                "--policy",
                &s.policy,
            ],
            &env,
            None,
            Duration::from_secs(60),
        )
        .json()
    };
    let trusted = call(Some(&ca));
    assert_eq!(trusted["content"], "tls origin saw /hello\n", "{trusted}");
    // The same test certificate, not trusted: the request fails, saying why.
    let untrusted = call(None);
    assert_eq!(untrusted["error_code"], "tool:failed", "{untrusted}");
    assert!(
        untrusted["error"]
            .as_str()
            .unwrap()
            .contains("TLS with secure.test"),
        "{untrusted}"
    );
    s.close("h");
}

/// An approver program answering `decision`, noting each host it was asked about.
fn approver(dir: &Path, decision: &str) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(format!("approver-{decision}.sh"));
    std::fs::write(
        &path,
        format!(
            "#!/bin/sh\ncat >> \"$(dirname \"$0\")/asked.jsonl\"\necho '{{\"decision\": \"{decision}\"}}'\n"
        ),
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn unknown_hosts_are_asked_and_nobody_to_ask_is_a_no() {
    let o = origin();
    let p = o.port;
    for (decision, reached) in [("once", true), ("deny", false), ("session", true)] {
        let dir = tempfile::tempdir().unwrap();
        let program = approver(dir.path(), decision);
        let network = format!("[network]\nunknown = \"ask\"\n{}", pins(&["new.test"]));
        let s = Setup::new(
            &network,
            &format!("[approval]\napprover = \"{program}\"\ntimeout_seconds = 30\n"),
        );
        let out = s.sh(
            "sandboxed",
            "ask",
            &format!("curl -sS http://new.test:{p}/1; curl -sS http://new.test:{p}/2"),
        );
        assert_eq!(
            out.contains("origin saw GET /1"),
            reached,
            "{decision}: {out}"
        );
        let asked = std::fs::read_to_string(dir.path().join("asked.jsonl")).unwrap_or_default();
        let questions: Vec<Value> = asked
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // "session" is asked once for the whole session; "once" every time.
        let expected = if decision == "session" { 1 } else { 2 };
        assert_eq!(questions.len(), expected, "{decision}: {asked}");
        assert_eq!(questions[0]["type"], "host_approval");
        assert_eq!(questions[0]["subject"], format!("new.test:{p}"));
        assert_eq!(questions[0]["session"], "ask");
        s.close("ask");
    }
    // With nobody to ask (no approver, no terminal): denied, and said so.
    let network = format!("[network]\nunknown = \"ask\"\n{}", pins(&["new.test"]));
    let s = Setup::new(&network, "[approval]\napprover = \"none\"\n");
    let out = s.sh(
        "sandboxed",
        "nobody",
        &format!("curl -sS http://new.test:{p}/3"),
    );
    assert!(out.contains("nobody approved"), "{out}");
    s.close("nobody");
}

#[test]
fn pip_installs_from_a_pinned_index_through_the_proxy_and_not_from_a_host_not_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let index = python_server(
        dir.path(),
        &["index", &dir.path().join("www").display().to_string()],
    );
    let py = host_python();
    // Refused: an https index, as pypi.org's, whose refused CONNECT pip reports (with a retry)
    // with the status line; a refused plain-http page it logs only with -v.
    let pip = |allow: &str, scheme: &str| {
        let network = format!("[network]\nallow = [{allow}]\n{}", pins(&["pypi.test"]));
        let s = Setup::new(&network, "");
        let out = s.sh(
            "sandboxed",
            "pip",
            &format!(
                "{py} -m pip install --disable-pip-version-check --no-cache-dir --no-input \
                 --retries 1 --timeout 10 --target pkgs --index-url {scheme}://pypi.test:{p}/simple/ \
                 --trusted-host pypi.test paddock-probe 2>&1; \
                 PYTHONPATH=pkgs {py} -c 'import paddock_probe; print(\"probe\", paddock_probe.VALUE)' 2>&1",
                p = index.port
            ),
        );
        s.close("pip");
        out
    };
    let installed = pip("\"pypi.test\"", "http");
    assert!(
        installed.contains("Successfully installed paddock-probe-1.0"),
        "{installed}"
    );
    assert!(installed.contains("probe 42"), "{installed}");
    let refused = pip("\"pypi.org\"", "https");
    assert!(!refused.contains("probe 42"), "{refused}");
    assert!(
        refused.contains("Forbidden by the paddock egress proxy"),
        "pip's output names the proxy: {refused}"
    );
}

#[test]
fn closing_the_session_stops_serving_it_and_the_proxy_then_exits() {
    let o = origin();
    let network = format!(
        "[network]\nallow = [\"origin.test\"]\n{}",
        pins(&["origin.test"])
    );
    let s = Setup::new(&network, "");
    let out = s.sh(
        "sandboxed",
        "gone",
        &format!("curl -sS http://origin.test:{}/", o.port),
    );
    assert!(out.contains("origin saw GET /"), "{out}");
    let home = s.home();
    let pid_of_proxy = || {
        let out = Command::new("pgrep")
            .args(["-f", &format!("__egress-proxy --home {home}$")])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    };
    assert!(
        !pid_of_proxy().is_empty(),
        "the proxy runs while its session lives"
    );
    s.close("gone");
    let list = s.paddock(&["sessions", "list"]);
    assert!(!list.stdout.contains("\"gone\""), "{}", list.stdout);
    // Nothing outlives its session: with nothing left to serve the proxy exits (30 s after).
    let until = Instant::now() + Duration::from_secs(60);
    while !pid_of_proxy().is_empty() {
        assert!(
            Instant::now() < until,
            "the egress proxy outlived its last session"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(!Path::new(&home).join("network/proxy.sock").exists());
}

/// A backend section of the test services' policy (scripts/test-services.sh), made proxied.
fn services_section(name: &str) -> String {
    let services = services_policy();
    let text = std::fs::read_to_string(services).unwrap_or_default();
    let header = format!("[backends.{name}]");
    let lines: Vec<&str> = text
        .lines()
        .skip_while(|l| *l != header)
        .take_while(|l| !l.is_empty())
        .collect();
    assert!(!lines.is_empty(), "no {header} in the services policy");
    format!("{}\nnetwork = \"proxy\"\n", lines.join("\n"))
}

#[test]
fn docker_with_the_proxy_reaches_allowed_names_only() {
    if backend_skipped("docker") {
        return;
    }
    a_container_reaches_allowed_names_only(
        "docker",
        "[backends.docker]\nkind = \"docker\"\nimage = \"paddock-test:latest\"\nnetwork = \"proxy\"\n\
         memory_mb = 512\npids_limit = 256\n",
    );
}

#[test]
fn apptainer_with_the_proxy_reaches_allowed_names_only() {
    if backend_skipped("apptainer") {
        return;
    }
    a_container_reaches_allowed_names_only("apptainer", &services_section("apptainer"));
}

#[test]
fn slurm_with_an_image_and_the_proxy_reaches_allowed_names_only() {
    if backend_skipped("slurm") || backend_skipped("apptainer") {
        return;
    }
    a_container_reaches_allowed_names_only("slurm_apptainer", &services_section("slurm_apptainer"));
}

/// Allowed, denied and unknown names, and a raw connection around the proxy, from a container
/// or instance made with no network (`section` declares `backend` with `network = "proxy"`).
fn a_container_reaches_allowed_names_only(backend: &str, section: &str) {
    let o = origin();
    let p = o.port;
    let network = format!(
        "[network]\nallow = [\"origin.test\", \"tls.test\"]\ndeny = [\"evil.test\"]\n{}\n\
         [[network.credentials]]\nhost = \"tls.test\"\nheader = \"Authorization\"\n\
         value = \"Bearer ${{PADDOCK_TEST_EGRESS_TOKEN}}\"\n",
        pins(&["origin.test", "evil.test", "other.test", "tls.test"])
    );
    let mut s = Setup::new(&network, section);
    // An HTTPS origin with a credential: the proxy terminates its TLS with the home's CA,
    // which the container trusts through SSL_CERT_FILE (the bundle in its agent's directory).
    let (ca, cert, key) = test_certificate(s.dir.path(), "tls.test");
    let tls = python_server(
        s.dir.path(),
        &[
            "tls",
            &cert.display().to_string(),
            &key.display().to_string(),
        ],
    );
    s.env
        .push(("SSL_CERT_FILE".into(), ca.display().to_string()));
    s.env.push((
        "PADDOCK_TEST_EGRESS_TOKEN".into(),
        "tok-in-container".into(),
    ));
    let fetch = |url: String| {
        format!(
            "python3 -c 'import urllib.request, urllib.error\ntry:\n    print(urllib.request.urlopen(\"{url}\", timeout=10).read().decode().strip())\nexcept urllib.error.HTTPError as e:\n    print(e.code, e.read().decode().strip())'"
        )
    };
    let out = s.sh(
        backend,
        "d1",
        &format!(
            "{}; {}; {}; python3 -c 'import socket; s=socket.socket(); s.settimeout(3); print(\"tcp\", s.connect_ex((\"127.0.0.1\", {p})))'",
            fetch(format!("http://origin.test:{p}/in-docker")),
            fetch(format!("http://evil.test:{p}/")),
            fetch(format!("http://other.test:{p}/")),
        ),
    );
    let https = s.sh(
        backend,
        "d1",
        &fetch(format!("https://tls.test:{}/in-{backend}", tls.port)),
    );
    assert!(
        https.contains(&format!(
            "tls origin saw /in-{backend} with Bearer tok-in-container"
        )),
        "{https}"
    );
    assert!(out.contains("origin saw GET /in-docker HTTP/1.1"), "{out}");
    assert!(out.contains("403 paddock proxy: evil.test"), "{out}");
    assert!(out.contains("403 paddock proxy: other.test"), "{out}");
    assert!(out.contains("tcp 111"), "no way around the proxy: {out}");
    assert_eq!(o.connections.load(Ordering::SeqCst), 1, "{out}");
    let refusals = s.refusals();
    assert_eq!(refusals.len(), 2, "{refusals:?}");
    assert!(
        refusals
            .iter()
            .all(|r| r["backend"] == backend && r["session"] == "d1"),
        "{refusals:?}"
    );
    s.close("d1");
}

#[test]
fn policy_check_refuses_the_proxy_where_the_route_cannot_be_taken_away() {
    let dir = tempfile::tempdir().unwrap();
    for (section, expected) in [
        (
            "[backends.remote]\nkind = \"ssh\"\nhost = \"127.0.0.1\"\nnetwork = \"proxy\"\n",
            "backends.remote.network: \"proxy\" cannot be had here: an ssh host keeps its own network",
        ),
        (
            "[backends.hpc]\nkind = \"slurm\"\nnetwork = \"proxy\"\n",
            "backends.hpc.network: \"proxy\" cannot be had here: a bare slurm job",
        ),
        (
            "[backends.open]\nkind = \"local\"\nsandbox = \"none\"\nnetwork = \"proxy\"\n",
            "backends.open.network: \"proxy\" cannot be had here: with sandbox = \"none\"",
        ),
        (
            "[backends.box]\nkind = \"docker\"\nimage = \"x\"\nagent = false\nnetwork = \"proxy\"\n",
            "backends.box.network: \"proxy\" cannot be had here: the proxy is reached through the agent",
        ),
    ] {
        let file = dir.path().join("p.toml");
        std::fs::write(&file, section).unwrap();
        let run = paddock_at(
            None,
            &["policy", "check", &file.display().to_string()],
            &[],
            None,
            Duration::from_secs(30),
        );
        assert_eq!(run.code, 2, "{section}: {}", run.stderr);
        assert!(run.stderr.contains(expected), "{section}: {}", run.stderr);
        assert!(run.stdout.is_empty());
    }
}
