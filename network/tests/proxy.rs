//! The proxy core against real servers on loopback: an HTTP origin (a names pinned to it), plain
//! requests and CONNECT tunnels through the proxy, with raw sockets as the client so that what
//! crosses the wire is what a curl or pip would send.
// clippy.toml allows unwrap/expect in `#[test]` functions only; the origin and the client
// helpers are test code too.
#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed fixture step should panic the test"
)]

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use paddock_network::proxy::{Attempt, HostApprover, Observer, Proxy};
use paddock_network::{EgressPolicy, Unknown};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An origin answering every request with its path, on loopback.
async fn origin() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (mut stream, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let n = stream.read(&mut buf).await.unwrap_or(0);
                let head = String::from_utf8_lossy(&buf[..n]).into_owned();
                let line = head.lines().next().unwrap_or_default().to_owned();
                let host = head
                    .lines()
                    .find_map(|l| {
                        l.strip_prefix("host: ")
                            .or_else(|| l.strip_prefix("Host: "))
                    })
                    .unwrap_or_default()
                    .to_owned();
                let body = format!("origin saw [{line}] host [{host}]");
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
            });
        }
    });
    addr
}

#[derive(Default)]
struct Log(Mutex<Vec<Attempt>>);

impl Observer for Log {
    fn attempt(&self, attempt: &Attempt) {
        self.0.lock().unwrap().push(attempt.clone());
    }
}

struct Answer(bool);

impl HostApprover for Answer {
    fn approve<'a>(
        &'a self,
        _: &'a str,
        _: u16,
        _: Option<&'a str>,
    ) -> Pin<Box<dyn Future<Output = bool> + Send + 'a>> {
        Box::pin(async move { self.0 })
    }
}

async fn proxy(
    allow: &[&str],
    deny: &[&str],
    unknown: Unknown,
    approver: Option<bool>,
) -> (SocketAddr, Arc<Log>) {
    let pins = BTreeMap::from([("origin.test".to_owned(), "127.0.0.1".to_owned())]);
    let owned = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
    let policy = EgressPolicy::new(&owned(allow), &owned(deny), unknown, false, &pins).unwrap();
    let log = Arc::new(Log::default());
    let mut proxy = Proxy::new(policy).with_observer(log.clone());
    if let Some(yes) = approver {
        proxy = proxy.with_approver(Arc::new(Answer(yes)));
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(Arc::new(proxy).serve(listener));
    (addr, log)
}

/// Sends `request` to the proxy and answers everything it sent back.
async fn exchange(proxy: SocketAddr, request: String) -> String {
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out).await;
    String::from_utf8_lossy(&out).into_owned()
}

fn get(url: &str) -> String {
    format!("GET {url} HTTP/1.1\r\nHost: ignored.example\r\nConnection: close\r\n\r\n")
}

#[tokio::test]
async fn an_allowed_pinned_name_is_reached_in_origin_form() {
    let origin = origin().await;
    let (proxy, log) = proxy(&["origin.test"], &[], Unknown::Deny, None).await;
    let port = origin.port();
    let reply = exchange(
        proxy,
        format!("GET http://origin.test:{port}/simple/pkg?x=1 HTTP/1.1\r\nHost: origin.test:{port}\r\nProxy-Connection: keep-alive\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(
        reply.contains(&format!(
            "origin saw [GET /simple/pkg?x=1 HTTP/1.1] host [origin.test:{port}]"
        )),
        "{reply}"
    );
    let attempts = log.0.lock().unwrap().clone();
    assert_eq!(attempts.len(), 1);
    assert_eq!(attempts[0].decision, "allow");
    assert_eq!(attempts[0].rule, "network.allow: origin.test");
}

#[tokio::test]
async fn refusals_answer_403_naming_host_and_rule() {
    let origin = origin().await;
    let port = origin.port();
    let (proxy, log) = proxy(&["*.test", "*"], &["origin.test"], Unknown::Deny, None).await;
    // deny wins over allow.
    let reply = exchange(proxy, get(&format!("http://origin.test:{port}/"))).await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(
        reply.contains("origin.test:") && reply.contains("network.deny: origin.test"),
        "{reply}"
    );
    // Allowed by name, but a literal loopback address however spelled, or a name that
    // resolves to loopback without a pin.
    for url in [
        format!("http://127.0.0.1:{port}/"),
        format!("http://0x7f.1:{port}/"),
        format!("http://2130706433:{port}/"),
        format!("http://[::ffff:127.0.0.1]:{port}/"),
        format!("http://localhost:{port}/"),
        "http://169.254.169.254/latest/meta-data/".to_owned(),
    ] {
        let reply = exchange(proxy, get(&url)).await;
        assert!(reply.starts_with("HTTP/1.1 403"), "{url}: {reply}");
        assert!(reply.contains("network.allow_private"), "{url}: {reply}");
    }
    let attempts = log.0.lock().unwrap().clone();
    assert!(
        attempts.iter().all(|a| a.decision == "deny"),
        "{attempts:?}"
    );
}

#[tokio::test]
async fn a_connect_tunnel_opens_to_an_allowed_name_for_tls_only_and_not_to_a_denied_one() {
    let origin = origin().await;
    let port = origin.port();
    let (proxy, log) = proxy(&["origin.test"], &[], Unknown::Deny, None).await;
    let mut stream = TcpStream::connect(proxy).await.unwrap();
    stream
        .write_all(
            format!("CONNECT origin.test:{port} HTTP/1.1\r\nHost: origin.test:{port}\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
    let mut buf = vec![0u8; 1024];
    let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf))
        .await
        .expect("the proxy answers CONNECT")
        .unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    // Through the tunnel, anything but a TLS ClientHello naming origin.test is cut off
    // before the origin sees a byte (TLS itself through the tunnel: tests/suite/network_proxy).
    stream
        .write_all(b"GET /inside HTTP/1.1\r\nHost: origin.test\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        stream.read_to_end(&mut out),
    )
    .await;
    let reply = String::from_utf8_lossy(&out);
    assert!(reply.is_empty(), "{reply}");
    let reply = exchange(proxy, "CONNECT elsewhere.test:443 HTTP/1.1\r\n\r\n".into()).await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
    assert!(reply.contains("network.unknown"), "{reply}");
    let decisions: Vec<(String, String, &str)> = log
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|a| (a.method.clone(), a.rule.clone(), a.decision))
        .collect();
    assert_eq!(
        decisions,
        [
            (
                "CONNECT".into(),
                "network.allow: origin.test".into(),
                "allow"
            ),
            ("CONNECT".into(), "network.tls".into(), "deny"),
            ("CONNECT".into(), "network.unknown".into(), "deny"),
        ]
    );
}

#[tokio::test]
async fn unknown_hosts_ask_and_nobody_to_ask_is_a_no() {
    let origin = origin().await;
    let port = origin.port();
    let url = format!("http://origin.test:{port}/");
    let (yes, _) = proxy(&[], &[], Unknown::Ask, Some(true)).await;
    let reply = exchange(yes, get(&url)).await;
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let (no, _) = proxy(&[], &[], Unknown::Ask, Some(false)).await;
    let reply = exchange(no, get(&url)).await;
    assert!(
        reply.starts_with("HTTP/1.1 403") && reply.contains("nobody approved"),
        "{reply}"
    );
    let (nobody, _) = proxy(&[], &[], Unknown::Ask, None).await;
    let reply = exchange(nobody, get(&url)).await;
    assert!(reply.starts_with("HTTP/1.1 403"), "{reply}");
}
