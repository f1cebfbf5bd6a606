//! `network`: the egress proxy (`network = "proxy"`). A 10 MiB download, 100 small requests
//! each on a new connection, and 100 on one kept connection, from the sandboxed local backend
//! and from each docker backend of `--backends` (its agent carrying connections to the proxy),
//! beside the same from this machine straight to the origin. One Python program (stdlib
//! `http.client`) measures every place, so the client's own cost is the same on both sides;
//! the origin is a small keep-alive HTTP/1.1 server on 127.0.0.1 in this process.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use paddock_engine::engine::Engine;
use paddock_engine::policy::Policy;
use serde_json::{Value, json};

use super::terminal::Scratch;
use crate::error::{BenchError, Result};
use crate::harness::Bench;
use crate::report::{Better, Outcome, Role, ScenarioReport};

const SESSION: &str = "bench-network";
/// The download's size.
const BIG_BYTES: usize = 10 * 1024 * 1024;
/// Requests per sample for the two latency measures.
const REQUESTS: usize = 100;

/// The client, run in every place: `HOST PORT direct|proxy N` prints one JSON line.
const CLIENT: &str = r#"
import http.client, json, sys, time
host, port, mode, n = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def conn():
    return http.client.HTTPConnection("127.0.0.1", 3128 if mode == "proxy" else port)
def target(path):
    return "http://%s:%d%s" % (host, port, path) if mode == "proxy" else path
headers = {"Host": "%s:%d" % (host, port)}
def get(c, path):
    c.request("GET", target(path), headers=headers)
    r = c.getresponse()
    size = 0
    while True:
        chunk = r.read(1 << 16)
        if not chunk:
            break
        size += len(chunk)
    if r.status != 200:
        raise SystemExit("status %d for %s" % (r.status, path))
    return size
t = time.perf_counter()
c = conn()
size = get(c, "/big")
c.close()
download = time.perf_counter() - t
t = time.perf_counter()
for _ in range(n):
    c = conn()
    get(c, "/small")
    c.close()
new = (time.perf_counter() - t) / n
c = conn()
get(c, "/small")
t = time.perf_counter()
for _ in range(n):
    get(c, "/small")
kept = (time.perf_counter() - t) / n
c.close()
print(json.dumps({"bytes": size, "download_ms": download * 1e3, "new_ms": new * 1e3, "kept_ms": kept * 1e3}))
"#;

/// Serves `/big` ([`BIG_BYTES`]) and `/small` with keep-alive until the process ends.
fn origin() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").map_err(BenchError::io("origin"))?;
    let port = listener
        .local_addr()
        .map_err(BenchError::io("origin"))?
        .port();
    let big: Arc<Vec<u8>> = Arc::new(vec![b'x'; BIG_BYTES]);
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let big = big.clone();
            std::thread::spawn(move || serve(stream, &big));
        }
    });
    Ok(port)
}

fn serve(mut stream: TcpStream, big: &[u8]) {
    let _ = stream.set_nodelay(true);
    let mut pending = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let end = loop {
            if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            match stream.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => pending.extend_from_slice(&buf[..n]),
            }
        };
        let head = String::from_utf8_lossy(&pending[..end]).into_owned();
        pending.drain(..end);
        let body: &[u8] = if head.starts_with("GET /big ") {
            big
        } else {
            b"ok\n"
        };
        let header = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
        if stream.write_all(header.as_bytes()).is_err() || stream.write_all(body).is_err() {
            return;
        }
    }
}

/// One place's answer.
#[derive(Debug, Clone, Copy)]
struct Sample {
    download_ms: f64,
    new_ms: f64,
    kept_ms: f64,
}

fn sample_of(text: &str, place: &str) -> Result<Sample> {
    let line = text
        .lines()
        .rev()
        .find(|l| l.starts_with('{'))
        .unwrap_or("");
    let v: Value = serde_json::from_str(line).map_err(|_| {
        BenchError::unexpected(format!("network: {place}"), &json!({"output": text}))
    })?;
    if v["bytes"].as_u64() != Some(BIG_BYTES as u64) {
        return Err(BenchError::unexpected(
            format!("network: {place}: the download"),
            &v,
        ));
    }
    let f = |k: &str| v[k].as_f64().unwrap_or(f64::NAN);
    Ok(Sample {
        download_ms: f("download_ms"),
        new_ms: f("new_ms"),
        kept_ms: f("kept_ms"),
    })
}

/// A proxied place: an engine whose backend `backend` runs the client through the proxy.
struct Place {
    name: String,
    engine: Engine,
    backend: String,
    /// Where the client program lies, as the environment sees it.
    client: String,
    python: String,
}

impl Place {
    async fn run(&self, port: u16) -> Result<Sample> {
        let command = format!(
            "{} {} origin.test {port} proxy {REQUESTS}",
            self.python, self.client
        );
        let out = self
            .engine
            .call_tool("terminal", json!({"command": command, "timeout": 300}))
            .await
            .map_err(BenchError::tool(format!("network: {}", self.name)))?;
        sample_of(out["output"].as_str().unwrap_or_default(), &self.name)
    }
}

fn host_python() -> String {
    std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".into())
}

const NETWORK: &str =
    "[network]\nallow = [\"origin.test\"]\n[network.resolve]\n\"origin.test\" = \"127.0.0.1\"\n";

fn engine(b: &Bench, policy: Policy, backend: &str) -> Result<Engine> {
    super::session_engine(b, policy, SESSION, Some(backend))
}

/// The sandboxed local backend, and each docker backend of `--backends` made proxied.
async fn places(b: &Bench, scratch: &Scratch, python: &str) -> Result<Vec<Place>> {
    let client = scratch.0.join("client.py");
    std::fs::write(&client, CLIENT).map_err(BenchError::io("network: the client"))?;
    let sandboxed = Policy::parse(
        &format!(
            "[backends.sandboxed]\nkind = \"local\"\nsandbox = \"workspace-write\"\n\
             workspace = {}\nnetwork = \"proxy\"\n\n{NETWORK}",
            Value::String(scratch.0.display().to_string())
        ),
        "<bench network: sandboxed>",
    )?;
    let mut out = vec![Place {
        name: "sandboxed".into(),
        engine: engine(b, sandboxed, "sandboxed")?,
        backend: "sandboxed".into(),
        client: client.display().to_string(),
        python: python.to_owned(),
    }];
    for (name, keys) in super::docker_keys(b)? {
        let policy = Policy::parse(
            &format!(
                "[backends.{name}]\nkind = \"docker\"\n{keys}network = \"proxy\"\n\
                 memory_mb = 512\n\n{NETWORK}"
            ),
            "<bench network: docker>",
        )?;
        let engine = engine(b, policy, &name)?;
        let inside = "/tmp/paddock-bench-client.py";
        engine
            .call_tool("write_file", json!({"path": inside, "content": CLIENT}))
            .await
            .map_err(BenchError::tool(format!("network: {name}: write_file")))?;
        out.push(Place {
            name: name.clone(),
            engine,
            backend: name.clone(),
            client: inside.into(),
            python: "python3".into(),
        });
    }
    Ok(out)
}

/// Straight from this machine to the origin.
async fn direct(python: &str, client: &std::path::Path, port: u16) -> Result<Sample> {
    let out = tokio::process::Command::new(python)
        .arg(client)
        .args([
            "127.0.0.1",
            &port.to_string(),
            "direct",
            &REQUESTS.to_string(),
        ])
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .output()
        .await
        .map_err(BenchError::io("network: the direct client"))?;
    sample_of(&String::from_utf8_lossy(&out.stdout), "direct")
}

pub async fn network(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("network")?;
    let port = origin()?;
    let python = host_python();
    let places = places(b, &scratch, &python).await?;
    let client = scratch.0.join("client.py");
    // Warm-up: the proxy started, the agents and containers up, the origin's pages cached.
    direct(&python, &client, port).await?;
    for place in &places {
        place.run(port).await?;
    }
    let rounds = b.pick(3, 10);
    let mut samples: Vec<Vec<Sample>> = vec![Vec::new(); places.len() + 1];
    for _ in 0..rounds {
        samples[0].push(direct(&python, &client, port).await?);
        for (i, place) in places.iter().enumerate() {
            samples[i + 1].push(place.run(port).await?);
        }
    }
    let names: Vec<String> = std::iter::once("direct".to_owned())
        .chain(
            places
                .iter()
                .map(|p| format!("{} through the proxy", p.name)),
        )
        .collect();
    let method = |i: usize| {
        if i == 0 {
            "Python http.client on this machine straight to the origin on 127.0.0.1".to_owned()
        } else {
            format!(
                "the same program in backend `{}` (network = \"proxy\"): 127.0.0.1:3128, the \
                 agent, the egress proxy, the origin",
                places[i - 1].backend
            )
        }
    };
    let report =
        |id: &str, title: &str, unit: &str, better: Better, value: &dyn Fn(&Sample) -> f64| {
            let mut r = ScenarioReport::new(id, title, unit, better);
            for (i, list) in samples.iter().enumerate() {
                let role = if i == 0 { Role::Peer } else { Role::Paddock };
                r.push(
                    &names[i],
                    role,
                    None,
                    Outcome::measured(method(i), None, list.iter().map(value).collect()),
                );
            }
            r.note(
            "The places alternate round by round in one loop; the origin is in the bench process.",
        );
            r
        };
    let mb = BIG_BYTES as f64 / (1024.0 * 1024.0);
    let mut out = vec![
        report(
            "network_download",
            "a 10 MiB download through the egress proxy",
            "MiB/s",
            Better::Higher,
            &|s| mb / (s.download_ms / 1e3),
        ),
        report(
            "network_new_connection",
            "one small request on a new connection",
            "ms",
            Better::Lower,
            &|s| s.new_ms,
        ),
        report(
            "network_kept_connection",
            "one small request on a kept connection",
            "ms",
            Better::Lower,
            &|s| s.kept_ms,
        ),
    ];
    for place in &places {
        if let Err(err) = place.engine.close_session(SESSION).await {
            tracing::warn!(place = %place.name, %err, "bench: closing the network session");
        }
    }
    // Figures the issue's targets are about: median ratios and differences, said in a note.
    let median = |list: &[Sample], f: &dyn Fn(&Sample) -> f64| {
        let mut v: Vec<f64> = list.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for (i, name) in names.iter().enumerate().skip(1) {
        let (d, p) = (&samples[0], &samples[i]);
        let speed = median(d, &|s| s.download_ms) / median(p, &|s| s.download_ms);
        let added_new = median(p, &|s| s.new_ms) - median(d, &|s| s.new_ms);
        let added_kept = median(p, &|s| s.kept_ms) - median(d, &|s| s.kept_ms);
        out[0].note(format!(
            "{name}: {speed:.2}x the direct throughput (target >= 0.8x)"
        ));
        out[1].note(format!(
            "{name}: +{added_new:.3} ms per new connection (target <= 2 ms)"
        ));
        out[2].note(format!(
            "{name}: +{added_kept:.3} ms per request on a kept connection (target <= 0.3 ms)"
        ));
    }
    Ok(out)
}
