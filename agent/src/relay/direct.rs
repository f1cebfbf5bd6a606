//! The direct data path (`relay = "tcp"`): each agent connection is its own TCP connection from
//! the engine's machine to a listener of the node's agent, opened with a per-session token; the
//! holder step's standard input and output only carry the token, the listener's port and the
//! step's life.
//!
//! Why not every byte through srun's I/O: slurmstepd and srun talk over TCP without
//! `TCP_NODELAY`, so a message that follows another within a round trip waits for the first
//! one's delayed acknowledgement: measured 44 ms per such message (a command's output then its
//! exit status), against ~0.1 ms on a connection of our own with `TCP_NODELAY`.
//!
//! A connection that does not present the token within [`TOKEN_WAIT`] is refused and logged
//! (the holder step's standard error: the engine's `holder.log`). Past the token, bytes go to the
//! agent's Unix socket and nowhere else.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::mux::tracing_line;

/// How long a new connection may take to present its token.
pub const TOKEN_WAIT: Duration = Duration::from_secs(5);
/// How long the engine's end waits for the node to accept.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// A carried connection whose far end falls silent (a node that crashed or was cut off sends
/// no reset) is probed after this long without traffic...
const KEEPALIVE_IDLE: Duration = Duration::from_secs(10);
/// ...every this long...
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(3);
/// ...and given up after this many unanswered probes (or as long without an acknowledgement
/// of data sent): ended within [`SILENCE_LIMIT`], so that a command in flight on a lost node
/// fails then instead of waiting for its own timeout.
const KEEPALIVE_PROBES: u32 = 5;
/// How long a carried connection survives a far end that answers nothing.
pub const SILENCE_LIMIT: Duration = Duration::from_secs(
    KEEPALIVE_IDLE.as_secs() + KEEPALIVE_INTERVAL.as_secs() * KEEPALIVE_PROBES as u64,
);

/// A fresh token: 128 random bits, hex.
pub fn new_token() -> io::Result<String> {
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Compares without stopping at the first difference.
fn same_token(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given
            .iter()
            .zip(expected)
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
}

/// A stream whose writing side can be shut and which can be cloned for a second thread.
trait Duplex: Read + Write + Send + Sized + 'static {
    fn twin(&self) -> io::Result<Self>;
    fn shut_write(&self);
}

impl Duplex for TcpStream {
    fn twin(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shut_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

impl Duplex for UnixStream {
    fn twin(&self) -> io::Result<Self> {
        self.try_clone()
    }
    fn shut_write(&self) {
        let _ = self.shutdown(Shutdown::Write);
    }
}

/// Ends `conn` once its far end has answered nothing for [`SILENCE_LIMIT`]: TCP keepalive
/// probes while it is idle (a command that prints nothing for minutes is fine: the far
/// kernel answers them), and the same limit on data sent and not acknowledged.
fn end_when_silent(conn: &TcpStream) -> io::Result<()> {
    use rustix::net::sockopt;
    sockopt::set_socket_keepalive(conn, true)?;
    sockopt::set_tcp_keepidle(conn, KEEPALIVE_IDLE)?;
    sockopt::set_tcp_keepintvl(conn, KEEPALIVE_INTERVAL)?;
    sockopt::set_tcp_keepcnt(conn, KEEPALIVE_PROBES)?;
    let limit_ms = u32::try_from(SILENCE_LIMIT.as_millis()).unwrap_or(u32::MAX);
    sockopt::set_tcp_user_timeout(conn, limit_ms)?;
    Ok(())
}

/// Copies both ways until both sides ended, each end's close passed on as a half close.
fn splice<A: Duplex, B: Duplex>(a: A, b: B) -> io::Result<()> {
    let (mut a_read, mut b_write) = (a.twin()?, b.twin()?);
    let forward = std::thread::Builder::new()
        .name("relay-direct".into())
        .spawn(move || {
            let _ = io::copy(&mut a_read, &mut b_write);
            b_write.shut_write();
        })?;
    let (mut b_read, mut a_write) = (b, a);
    let _ = io::copy(&mut b_read, &mut a_write);
    a_write.shut_write();
    let _ = forward.join();
    Ok(())
}

/// The node's side: listens on every address of the node, on a port the kernel picks, and
/// carries each connection that presents `token` to `agent_socket`. Answers the port.
pub fn listen_on_node(token: String, agent_socket: PathBuf) -> io::Result<u16> {
    let listener = TcpListener::bind(("0.0.0.0", 0))?;
    let port = listener.local_addr()?.port();
    std::thread::Builder::new()
        .name("relay-direct-accept".into())
        .spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let token = token.clone();
                let agent_socket = agent_socket.clone();
                let _ = std::thread::Builder::new()
                    .name("relay-direct-conn".into())
                    .spawn(move || carry_on_node(conn, &token, &agent_socket));
            }
        })?;
    Ok(port)
}

fn carry_on_node(mut conn: TcpStream, token: &str, agent_socket: &Path) {
    let peer = conn
        .peer_addr()
        .map_or_else(|_| "an unknown address".to_owned(), |a| a.to_string());
    let _ = conn.set_nodelay(true);
    if let Err(err) = end_when_silent(&conn) {
        tracing_line(&format!(
            "cannot watch a connection from {peer} for silence: {err}"
        ));
    }
    let _ = conn.set_read_timeout(Some(TOKEN_WAIT));
    let given = read_token_line(&mut conn);
    let accepted = given
        .as_deref()
        .is_some_and(|given| same_token(given.as_bytes(), token.as_bytes()));
    if !accepted {
        tracing_line(&format!(
            "refused a connection from {peer}: {}",
            match given {
                None => "no token within 5 s",
                Some(_) => "wrong token",
            }
        ));
        let _ = conn.shutdown(Shutdown::Both);
        return;
    }
    let _ = conn.set_read_timeout(None);
    match UnixStream::connect(agent_socket) {
        Ok(agent) => {
            let _ = splice(conn, agent);
        }
        Err(err) => tracing_line(&format!("the agent's socket does not answer: {err}")),
    }
}

/// The first line, up to 128 bytes, read a byte at a time (nothing past it is consumed).
fn read_token_line(conn: &mut TcpStream) -> Option<String> {
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    while line.len() < 128 {
        match conn.read(&mut byte) {
            Ok(1) if byte[0] == b'\n' => return String::from_utf8(line).ok(),
            Ok(1) => line.push(byte[0]),
            _ => return None,
        }
    }
    None
}

/// The engine's side: carries one connection to the node's listener ([`dial_node`]).
pub fn carry_to_node(conn: UnixStream, node: TcpStream) -> io::Result<()> {
    splice(conn, node)
}

/// A connection to the node's listener at `host:port`, the token presented. An error here
/// means the node's end is gone (refused, unreachable, or silent for [`CONNECT_WAIT`]): the
/// relay carries nowhere any more.
pub fn dial_node(host: &str, port: u16, token: &str) -> io::Result<TcpStream> {
    let address = (host, port)
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::other(format!("{host} has no address")))?;
    let mut node = TcpStream::connect_timeout(&address, CONNECT_WAIT)?;
    node.set_nodelay(true)?;
    end_when_silent(&node)?;
    node.write_all(format!("{token}\n").as_bytes())?;
    Ok(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::UnixListener;

    #[test]
    fn tokens_are_new_each_time_and_compared_whole() {
        let a = new_token().unwrap();
        assert_eq!(a.len(), 32);
        assert_ne!(a, new_token().unwrap());
        assert!(same_token(a.as_bytes(), a.as_bytes()));
        assert!(!same_token(&a.as_bytes()[..31], a.as_bytes()));
        assert!(!same_token(b"0000", b"0001"));
    }

    #[test]
    fn a_connection_with_the_token_reaches_the_agent_and_one_without_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let socket = dir.path().join("agent.sock");
        let agent = UnixListener::bind(&socket).unwrap();
        std::thread::spawn(move || {
            for conn in agent.incoming() {
                let mut conn = conn.unwrap();
                let mut all = Vec::new();
                conn.read_to_end(&mut all).unwrap();
                conn.write_all(&all).unwrap();
            }
        });
        let token = new_token().unwrap();
        let port = listen_on_node(token.clone(), socket).unwrap();

        let (mut ours, theirs) = UnixStream::pair().unwrap();
        let carried = {
            let token = token.clone();
            std::thread::spawn(move || carry_to_node(theirs, dial_node("127.0.0.1", port, &token)?))
        };
        ours.write_all(b"through the node").unwrap();
        ours.shutdown(Shutdown::Write).unwrap();
        let mut back = Vec::new();
        ours.read_to_end(&mut back).unwrap();
        assert_eq!(back, b"through the node");
        carried.join().unwrap().unwrap();

        for wrong in ["not-the-token\n", "\n"] {
            let mut conn = TcpStream::connect(("127.0.0.1", port)).unwrap();
            conn.write_all(wrong.as_bytes()).unwrap();
            conn.write_all(b"anything").unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut rest = Vec::new();
            let _ = conn.read_to_end(&mut rest);
            assert!(rest.is_empty(), "{wrong:?} got {rest:?}");
        }
    }
}
