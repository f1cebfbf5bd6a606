//! Progress of slow environment work (a Slurm job waiting in the queue): the tool call that
//! caused it says where its progress goes (an MCP progress notification, a line on the CLI's
//! stderr) by running the backend's future inside [`scope`]; a backend calls [`report`] without
//! knowing who listens. Outside any scope a report goes to the process's default sink (the
//! CLI's stderr, see [`set_default`]), else it is an `info` trace.

use std::future::Future;
use std::sync::Arc;

/// Receives one human-readable progress line.
pub type ProgressFn = Arc<dyn Fn(String) + Send + Sync>;

tokio::task_local! {
    static SINK: ProgressFn;
}

/// Where reports outside any [`scope`] go (tasks spawned by a tool call lose its scope).
static DEFAULT: std::sync::OnceLock<ProgressFn> = std::sync::OnceLock::new();

/// Sets where reports outside any scope go, once per process (the CLI: a line on stderr).
pub fn set_default(sink: ProgressFn) {
    let _ = DEFAULT.set(sink);
}

/// Runs `work` with its reports going to `sink` (none: they become traces).
pub async fn scope<F: Future>(sink: Option<ProgressFn>, work: F) -> F::Output {
    match sink {
        Some(sink) => SINK.scope(sink, work).await,
        None => work.await,
    }
}

/// The sink of the current scope, to carry into a task the work spawns.
pub fn current() -> Option<ProgressFn> {
    SINK.try_with(Arc::clone).ok()
}

/// Reports `message` to the current call's progress sink.
pub fn report(message: String) {
    if SINK.try_with(|sink| sink(message.clone())).is_ok() {
        return;
    }
    match DEFAULT.get() {
        Some(sink) => sink(message),
        None => tracing::info!("{message}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    #[tokio::test]
    async fn reports_reach_the_sink_of_their_scope_only() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let into = seen.clone();
        let sink: ProgressFn = Arc::new(move |m| into.lock().unwrap().push(m));
        scope(Some(sink), async { report("queued".into()) }).await;
        // No default sink in this test process: outside a scope a report is a trace.
        report("outside".into());
        scope(None, async { report("no sink".into()) }).await;
        assert_eq!(*seen.lock().unwrap(), vec!["queued".to_owned()]);
    }
}
