//! The environment's end of the egress proxy (`serve --egress-port PORT`, for backends with
//! `network = "proxy"`): a listener on `127.0.0.1:PORT` in the environment's own network
//! namespace, which has no other way out, carrying each connection to the engine's proxy
//! through `egress.sock` beside the agent's socket (a directory the host shares with the
//! environment). Commands find it through `HTTP_PROXY` and its twins.
//!
//! Each carried connection starts with one line naming the client's port
//! (`paddock-egress port=PORT`): for a refusal's log line the proxy asks the agent which run
//! owns that connection ([`crate::protocol::Request::ConnectionOwner`], answered by
//! [`run_of_port`]). The lookup reads `/proc/net/tcp`, which costs milliseconds on a busy
//! machine (the kernel walks every socket), so it is done only when asked, never on the way of
//! an allowed request.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};

/// The name of the proxy's socket beside the agent's.
pub const EGRESS_SOCKET: &str = "egress.sock";
/// Beside it when the proxy terminates TLS for some hosts (an `https://` host with a
/// credential): the system's roots and the proxy's CA, named by `SSL_CERT_FILE` and its twins.
pub const CA_BUNDLE: &str = "egress-ca.pem";
/// The proxy's CA alone (for `NODE_EXTRA_CA_CERTS`, which adds to Node's own roots).
pub const CA_CERT: &str = "egress-ca.crt";

/// What a command reads when the proxy is not there.
fn no_proxy_answer() -> String {
    let body = "paddock: the egress proxy is not running; the next paddock command in this \
                session starts it\n";
    format!(
        "HTTP/1.1 502 Bad Gateway\r\ncontent-type: text/plain\r\nconnection: close\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Starts the listener; its thread serves until the agent exits.
pub fn start(port: u16, agent_socket: &Path) -> std::io::Result<()> {
    let proxy = agent_socket
        .parent()
        .unwrap_or(Path::new("/"))
        .join(EGRESS_SOCKET);
    listen(port, proxy, None)
}

/// `egress-forward`: the listener for one program in a network namespace of its own (a
/// background command of the sandboxed local backend, which runs outside the session agent's
/// sandbox), then the program; returns its exit status. Every connection is the run's.
pub fn forward_for(
    port: u16,
    proxy: PathBuf,
    run: Option<String>,
    argv: &[String],
) -> std::io::Result<i32> {
    let Some((program, args)) = argv.split_first() else {
        return Err(std::io::Error::other("egress-forward: no program to run"));
    };
    let listener = TcpListener::bind(("127.0.0.1", port))?;
    run_forwarded(listener, proxy, run, program, args)
}

/// The program of [`forward_for`] with its listener already bound.
fn run_forwarded(
    listener: TcpListener,
    proxy: PathBuf,
    run: Option<String>,
    program: &str,
    args: &[String],
) -> std::io::Result<i32> {
    serve(listener, proxy, run)?;
    let status = std::process::Command::new(program).args(args).status()?;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// Serves `127.0.0.1:port` from a thread: each connection carried to `proxy`. `run` names the
/// run of every connection (one program's listener); without it the proxy asks the agent.
fn listen(port: u16, proxy: PathBuf, run: Option<String>) -> std::io::Result<()> {
    serve(TcpListener::bind(("127.0.0.1", port))?, proxy, run)
}

/// Serves an already bound listener from a thread (tests bind port 0 themselves: a port
/// probed and released can be taken by any client's connection before it is bound again).
fn serve(listener: TcpListener, proxy: PathBuf, run: Option<String>) -> std::io::Result<()> {
    std::thread::Builder::new()
        .name("egress".into())
        .spawn(move || {
            for client in listener.incoming().flatten() {
                let proxy = proxy.clone();
                let run = run.clone();
                let _ = std::thread::Builder::new()
                    .name("egress-conn".into())
                    .spawn(move || carry(client, &proxy, run.as_deref()));
            }
        })?;
    Ok(())
}

/// One connection: the preamble, then bytes both ways until each side is done.
fn carry(mut client: TcpStream, proxy: &PathBuf, run: Option<&str>) {
    let _ = client.set_nodelay(true);
    let port = client.peer_addr().map_or(0, |peer| peer.port());
    let mut upstream = match UnixStream::connect(proxy) {
        Ok(upstream) => upstream,
        Err(_) => {
            let _ = client.write_all(no_proxy_answer().as_bytes());
            return;
        }
    };
    let preamble = match run {
        Some(run) => format!("paddock-egress port={port} run={run}\n"),
        None => format!("paddock-egress port={port}\n"),
    };
    if upstream.write_all(preamble.as_bytes()).is_err() {
        return;
    }
    let (Ok(mut client_in), Ok(mut upstream_out)) = (client.try_clone(), upstream.try_clone())
    else {
        return;
    };
    let up = std::thread::spawn(move || {
        let _ = pump(&mut client_in, &mut upstream_out);
        let _ = upstream_out.shutdown(Shutdown::Write);
    });
    let _ = pump(&mut upstream, &mut client);
    let _ = client.shutdown(Shutdown::Write);
    let _ = up.join();
}

/// Bytes from one side to the other in large reads (a download is a few system calls per
/// megabyte, not a few hundred).
fn pump(from: &mut impl Read, to: &mut impl Write) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut total = 0;
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        to.write_all(&buf[..n])?;
        total += n as u64;
    }
}

/// The run (`PADDOCK_RUN`) of the process that owns the client end of a connection from
/// `127.0.0.1:port`: its socket's inode in `/proc/net/tcp`, the process holding that inode,
/// its environment. `None` when any step does not find it.
pub fn run_of_port(port: u16) -> Option<String> {
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    let wanted = format!("0100007F:{port:04X}");
    let inode = table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        (fields.get(1) == Some(&wanted.as_str()))
            .then(|| fields.get(9).map(|s| (*s).to_owned()))
            .flatten()
    })?;
    let target = format!("socket:[{inode}]");
    let own = std::process::id().to_string();
    for entry in std::fs::read_dir("/proc").ok()?.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|p| p.bytes().all(|b| b.is_ascii_digit()))
        else {
            continue;
        };
        if pid == own {
            continue;
        }
        let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
            continue;
        };
        let holds = fds.flatten().any(|fd| {
            std::fs::read_link(fd.path()).is_ok_and(|l| l.as_os_str() == target.as_str())
        });
        if holds {
            let environ = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
            return environ
                .split(|&b| b == 0)
                .find_map(|v| v.strip_prefix(b"PADDOCK_RUN="))
                .and_then(|id| std::str::from_utf8(id).ok())
                .map(str::to_owned);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_connection_is_carried_with_its_preamble_and_both_directions() {
        let dir = tempfile::tempdir().unwrap();
        let agent_socket = dir.path().join("agent.sock");
        let proxy_path = agent_socket.with_file_name(EGRESS_SOCKET);
        let proxy = std::os::unix::net::UnixListener::bind(&proxy_path).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        serve(listener, proxy_path, None).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        client.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
        client.shutdown(Shutdown::Write).unwrap();
        let (mut carried, _) = proxy.accept().unwrap();
        let mut seen = String::new();
        carried.read_to_string(&mut seen).unwrap();
        let port = client.local_addr().unwrap().port();
        assert_eq!(
            seen,
            format!("paddock-egress port={port}\nGET / HTTP/1.1\r\n\r\n")
        );
        // This test process has no PADDOCK_RUN: its connection belongs to no run.
        assert_eq!(run_of_port(port), None);
        carried.write_all(b"HTTP/1.1 200 OK\r\n\r\nhi").unwrap();
        drop(carried);
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert_eq!(answer, "HTTP/1.1 200 OK\r\n\r\nhi");
    }

    #[test]
    fn a_forwarded_program_s_connections_name_its_run_and_its_status_is_returned() {
        let dir = tempfile::tempdir().unwrap();
        let proxy_path = dir.path().join(EGRESS_SOCKET);
        let proxy = std::os::unix::net::UnixListener::bind(&proxy_path).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let program = format!("exec 3<>/dev/tcp/127.0.0.1/{port}; echo hi >&3; exit 3");
        let args: Vec<String> = ["-c", &program].map(String::from).to_vec();
        let forwarded = std::thread::spawn(move || {
            run_forwarded(listener, proxy_path, Some("p-7".into()), "bash", &args)
        });
        let (mut carried, _) = proxy.accept().unwrap();
        let mut seen = String::new();
        carried.read_to_string(&mut seen).unwrap();
        let (preamble, rest) = seen.split_once('\n').unwrap();
        assert!(
            preamble.starts_with("paddock-egress port=") && preamble.ends_with(" run=p-7"),
            "{preamble}"
        );
        assert_eq!(rest, "hi\n");
        assert_eq!(forwarded.join().unwrap().unwrap(), 3);
    }

    #[test]
    fn without_the_proxy_a_command_reads_why() {
        let dir = tempfile::tempdir().unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        serve(listener, dir.path().join(EGRESS_SOCKET), None).unwrap();
        let mut client = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(answer.ends_with("starts it\n"), "{answer}");
        let declared: usize = answer
            .split("content-length: ")
            .nth(1)
            .and_then(|r| r.split("\r\n").next())
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(declared, answer.split("\r\n\r\n").nth(1).unwrap().len());
    }
}
