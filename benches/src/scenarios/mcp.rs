//! An MCP round trip over stdio: `paddock serve` spawned as an MCP client would spawn it, the
//! initialize handshake done by hand, then `tools/call current_datetime` timed again and again,
//! beside the same call made in this process (what the transport adds).

use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout};

use crate::error::{BenchError, Result};
use crate::harness::{Bench, ms};
use crate::report::{Better, Outcome, Role, ScenarioReport};

const TOOL: &str = "current_datetime";
/// How long one answer may take before the scenario gives up.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(20);

/// A `paddock serve` over stdio, newline-delimited JSON-RPC.
struct Server {
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Server {
    async fn spawn(b: &Bench) -> Result<Self> {
        let mut child = tokio::process::Command::new(&b.exe)
            .arg("serve")
            .env_remove("PADDOCK_POLICY")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            // Not read: a server that logs a lot must not block on a full pipe.
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .map_err(BenchError::io("spawning paddock serve"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(BenchError::Mcp("paddock serve has no stdio pipes".into()));
        };
        Ok(Self {
            child,
            stdin,
            lines: BufReader::new(stdout).lines(),
        })
    }

    async fn send(&mut self, message: &Value) -> Result<()> {
        let mut line = message.to_string();
        line.push('\n');
        self.stdin
            .write_all(line.as_bytes())
            .await
            .map_err(BenchError::io("writing to paddock serve"))?;
        self.stdin
            .flush()
            .await
            .map_err(BenchError::io("writing to paddock serve"))
    }

    /// The response to request `id` (notifications and other messages before it are skipped).
    async fn response(&mut self, id: u64) -> Result<Value> {
        let read = async {
            loop {
                let line = self
                    .lines
                    .next_line()
                    .await
                    .map_err(BenchError::io("reading from paddock serve"))?
                    .ok_or_else(|| BenchError::Mcp("paddock serve closed its stdout".into()))?;
                let Ok(message) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if message.get("id") == Some(&json!(id)) {
                    return Ok(message);
                }
            }
        };
        tokio::time::timeout(ANSWER_TIMEOUT, read)
            .await
            .map_err(|_| BenchError::Timeout {
                what: format!("paddock serve, response {id}"),
                seconds: ANSWER_TIMEOUT.as_secs(),
            })?
    }

    async fn call(&mut self, id: u64) -> Result<f64> {
        let t = Instant::now();
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                          "params": {"name": TOOL, "arguments": {}}}))
            .await?;
        let response = self.response(id).await?;
        let elapsed = ms(t.elapsed());
        if response.get("result").is_none() || response["result"]["isError"] == json!(true) {
            return Err(BenchError::unexpected("mcp tools/call", &response));
        }
        Ok(elapsed)
    }
}

/// Whether this binary has `serve` (it is a newer subcommand than the bench).
async fn serve_available(b: &Bench) -> bool {
    tokio::process::Command::new(&b.exe)
        .args(["serve", "--help"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .await
        .is_ok_and(|s| s.success())
}

pub async fn mcp(b: &Bench) -> Result<ScenarioReport> {
    let mut r = ScenarioReport::new(
        "mcp",
        "MCP `tools/call` round trip over stdio (`current_datetime`)",
        "ms",
        Better::Lower,
    );
    if !serve_available(b).await {
        r.skipped = Some("paddock serve not available (`paddock serve --help` failed)".into());
        return Ok(r);
    }
    let mut server = Server::spawn(b).await?;
    server
        .send(
            &json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {},
            "clientInfo": {"name": "bench", "version": "0"}}}),
        )
        .await?;
    let init = server.response(1).await?;
    if init.get("result").is_none() {
        return Err(BenchError::unexpected("mcp initialize", &init));
    }
    server
        .send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
        .await?;
    let mut id = 1;
    for _ in 0..20 {
        id += 1;
        server.call(id).await?;
    }
    let n = b.pick(60, 300);
    let (mut over_mcp, mut in_process) = (Vec::with_capacity(n), Vec::with_capacity(n));
    for _ in 0..n {
        id += 1;
        over_mcp.push(server.call(id).await?);
        let t = Instant::now();
        b.engine
            .call_tool(TOOL, json!({}))
            .await
            .map_err(BenchError::tool(TOOL))?;
        in_process.push(ms(t.elapsed()));
    }
    drop(server.stdin);
    let _ = tokio::time::timeout(Duration::from_secs(5), server.child.wait()).await;
    r.push(
        "paddock serve (stdio)",
        Role::Paddock,
        None,
        Outcome::measured(
            format!(
                "`paddock serve` spawned with piped stdio, `initialize` (protocol 2025-11-25) \
                 and `notifications/initialized` written by hand, 20 warm-up calls, then \
                 `tools/call {TOOL}` with {{}}: time from writing the request line to reading \
                 its response line."
            ),
            None,
            over_mcp,
        ),
    );
    r.push(
        "in-process call_tool",
        Role::Variant,
        None,
        Outcome::measured(
            format!(
                "Engine::call_tool(\"{TOOL}\", {{}}) in this process, alternating with the MCP \
                 calls: the tool's own cost, without the transport."
            ),
            None,
            in_process,
        ),
    );
    r.note("No peer: this measures what the MCP transport adds to a call.");
    Ok(r)
}
