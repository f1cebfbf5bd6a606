//! Talking to a real `paddock-agent` over its socket, as the engine does: the suites that drive
//! one (live_shell, process_ceiling, relay) include this module.

use std::io::Write;
use std::os::unix::net::UnixStream;

use paddock_agent::protocol::{
    PROTOCOL_VERSION, Reply, Request, RunRequest, read_message, write_message,
};

/// Says hello on a fresh connection; the agent must answer with its own hello.
pub fn greet(stream: &mut UnixStream) {
    write_message(
        stream,
        &Request::Hello {
            version: PROTOCOL_VERSION,
        },
    )
    .unwrap();
    let hello: Reply = read_message(stream, "hello").unwrap();
    assert!(matches!(hello, Reply::Hello { .. }), "{hello:?}");
}

/// Asks for `request` on a greeted connection; its frames come back on the same connection.
pub fn start_run(stream: &mut UnixStream, request: RunRequest) {
    write_message(stream, &Request::Run(request)).unwrap();
    stream.flush().unwrap();
}

/// A run of `argv` with nothing else asked for: the agent's own environment and directory, no
/// renames, no run id, no terminal, no input; killed after `timeout_ms` when given.
pub fn plain_run(argv: Vec<String>, timeout_ms: Option<u64>) -> RunRequest {
    RunRequest {
        argv,
        env: Default::default(),
        clear_env: false,
        cwd: None,
        timeout_ms,
        renames: Vec::new(),
        run_id: None,
        pty: false,
        stdin: false,
        split_stderr: false,
        keep_detached: false,
        keep_connection: false,
    }
}
