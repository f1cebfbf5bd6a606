//! `paddock-sandbox-exec PROFILE_JSON PROGRAM [ARGS...]`: the local backend's command sandbox
//! as a small program of its own. The same code as `paddock __sandbox-exec`; without the
//! interpreter linked in, it starts about 1.5 ms sooner, on every sandboxed command.

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let status = paddock_sandbox_worker::confine::shell::main(&args);
    std::process::ExitCode::from(u8::try_from(status).unwrap_or(125))
}
