//! A recording [`Transport`] for unit tests of [`RemoteEnvironment`](super::RemoteEnvironment),
//! after youki's recording syscall fake: it records every run it is asked for (session, argv,
//! stdin, pty) and answers what the test scripted.
//!
//! Commands take the scripted [`Answer`]s in order; a run with nothing scripted is an error, so
//! an unexpected run shows up in the test. Kill runs (the kill script with a run id) are
//! recorded like any run and answered by [`FakeTransport::answer_kills`] (exit 0 unless
//! scripted otherwise); a kill that reaches the target ends the hanging runs of its run id, as
//! the target would.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

use super::{ClientArgv, ExitFuture, OutputSink, TargetRun, Transport, script};
use crate::{BackendError, BackendFuture, Result};

/// What the fake target does with one run.
#[derive(Debug, Clone)]
pub(crate) enum Answer {
    /// Prints `output` and exits with `status`.
    Exit { status: i32, output: String },
    /// Prints `output`, then runs until a kill for its run id reaches the target; exits 143
    /// (TERM) then.
    UntilKilled { output: String },
    /// Waits `delay`, then answers `then`.
    After { delay: Duration, then: Box<Answer> },
    /// The target cannot be reached ([`BackendError::Unavailable`] with `reason`).
    Unavailable { reason: String },
}

impl Answer {
    pub(crate) fn exit(status: i32, output: &str) -> Self {
        Self::Exit {
            status,
            output: output.to_owned(),
        }
    }
}

/// What one run was, read from its argv.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum RunKind {
    /// The session wrapper (`env PADDOCK_RUN=ID bash -c COMMAND_SCRIPT ...`).
    Command {
        run_id: String,
    },
    /// The kill script for a run id.
    Kill {
        run_id: String,
    },
    Other,
}

/// One run the fake was asked for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SeenRun {
    pub session: String,
    pub argv: Vec<String>,
    pub stdin: Option<Vec<u8>>,
    pub pty: bool,
}

impl SeenRun {
    pub(crate) fn kind(&self) -> RunKind {
        if let Some(wrapper) = script::wrapper_run(&self.argv) {
            return RunKind::Command {
                run_id: wrapper.run_id,
            };
        }
        match self.argv.as_slice() {
            [bash, dash_c, body, name, run_id]
                if bash == "bash"
                    && dash_c == "-c"
                    && *body == script::kill_script()
                    && name == "paddock" =>
            {
                RunKind::Kill {
                    run_id: run_id.clone(),
                }
            }
            _ => RunKind::Other,
        }
    }
}

/// A transport whose target is a script.
pub(crate) struct FakeTransport {
    state_root: String,
    home: String,
    env: BTreeMap<String, String>,
    answers: Mutex<VecDeque<Answer>>,
    kill_answer: Mutex<Answer>,
    runs: Mutex<Vec<SeenRun>>,
    /// Run ids whose future was dropped before it answered (the engine gave up on the client).
    abandoned: Mutex<Vec<String>>,
    ensured: Mutex<Vec<String>>,
    /// Run ids a kill has reached.
    killed: tokio::sync::watch::Sender<Vec<String>>,
}

impl FakeTransport {
    /// Kind `fake`, name `fake1`, state root `.paddock-state`, home `/home/agent`, no policy env.
    pub(crate) fn new() -> Self {
        Self {
            state_root: ".paddock-state".into(),
            home: "/home/agent".into(),
            env: BTreeMap::new(),
            answers: Mutex::new(VecDeque::new()),
            kill_answer: Mutex::new(Answer::exit(0, "")),
            runs: Mutex::new(Vec::new()),
            abandoned: Mutex::new(Vec::new()),
            ensured: Mutex::new(Vec::new()),
            killed: tokio::sync::watch::Sender::new(Vec::new()),
        }
    }

    /// The policy's `env`, given to every command.
    pub(crate) fn with_env(mut self, env: &[(&str, &str)]) -> Self {
        self.env = env
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        self
    }

    /// Scripts the answer to the next command not answered yet.
    pub(crate) fn answer(self, answer: Answer) -> Self {
        self.answers.lock().unwrap().push_back(answer);
        self
    }

    /// Scripts the answer to every kill run.
    pub(crate) fn answer_kills(self, answer: Answer) -> Self {
        *self.kill_answer.lock().unwrap() = answer;
        self
    }

    /// Every run so far, in the order they were asked for.
    pub(crate) fn runs(&self) -> Vec<SeenRun> {
        self.runs.lock().unwrap().clone()
    }

    /// What every run so far was, in order.
    pub(crate) fn kinds(&self) -> Vec<RunKind> {
        self.runs().iter().map(SeenRun::kind).collect()
    }

    pub(crate) fn abandoned(&self) -> Vec<String> {
        self.abandoned.lock().unwrap().clone()
    }

    pub(crate) fn ensured(&self) -> Vec<String> {
        self.ensured.lock().unwrap().clone()
    }

    /// Waits (up to 5 s) until `count` runs were asked for; returns every run so far.
    pub(crate) async fn wait_for_runs(&self, count: usize) -> Vec<SeenRun> {
        let until = tokio::time::Instant::now() + Duration::from_secs(5);
        while self.runs.lock().unwrap().len() < count && tokio::time::Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.runs()
    }

    fn unavailable(reason: &str) -> BackendError {
        BackendError::Unavailable {
            kind: "fake".into(),
            name: "fake1".into(),
            reason: reason.to_owned(),
        }
    }

    async fn play(&self, answer: Answer, run_id: Option<String>, sink: &OutputSink) -> Result<i32> {
        let mut answer = answer;
        loop {
            match answer {
                Answer::Exit { status, output } => {
                    sink.push(output.as_bytes());
                    return Ok(status);
                }
                Answer::UntilKilled { output } => {
                    sink.push(output.as_bytes());
                    let mut killed = self.killed.subscribe();
                    match run_id {
                        Some(id) => {
                            let _ = killed.wait_for(|ids| ids.contains(&id)).await;
                        }
                        // Nothing can name this run in a kill: it runs forever.
                        None => std::future::pending::<()>().await,
                    }
                    return Ok(143);
                }
                Answer::After { delay, then } => {
                    tokio::time::sleep(delay).await;
                    answer = *then;
                }
                Answer::Unavailable { reason } => return Err(Self::unavailable(&reason)),
            }
        }
    }
}

/// Notes the run as abandoned when its future is dropped before it answered.
struct Pending<'a> {
    fake: &'a FakeTransport,
    run_id: Option<String>,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if let Some(id) = self.run_id.take() {
            self.fake.abandoned.lock().unwrap().push(id);
        }
    }
}

impl Transport for FakeTransport {
    fn kind(&self) -> &'static str {
        "fake"
    }

    fn name(&self) -> &str {
        "fake1"
    }

    fn state_root(&self) -> &str {
        &self.state_root
    }

    fn home(&self) -> &str {
        &self.home
    }

    fn env(&self) -> &BTreeMap<String, String> {
        &self.env
    }

    fn ensure<'a>(&'a self, session: &'a str) -> BackendFuture<'a, ()> {
        self.ensured.lock().unwrap().push(session.to_owned());
        Box::pin(async { Ok(()) })
    }

    fn run<'a>(&'a self, session: &'a str, run: TargetRun, sink: OutputSink) -> ExitFuture<'a> {
        // Recorded when asked, before the future is first polled.
        let seen = SeenRun {
            session: session.to_owned(),
            argv: run.argv,
            stdin: run.stdin,
            pty: run.pty,
        };
        let kind = seen.kind();
        self.runs.lock().unwrap().push(seen);
        let answer = match &kind {
            RunKind::Kill { .. } => Some(self.kill_answer.lock().unwrap().clone()),
            RunKind::Command { .. } | RunKind::Other => self.answers.lock().unwrap().pop_front(),
        };
        Box::pin(async move {
            let Some(answer) = answer else {
                return Err(Self::unavailable("no answer scripted for this run"));
            };
            if let RunKind::Kill { run_id } = &kind {
                let status = self.play(answer, None, &sink).await?;
                // The kill reached the target: the run's processes end.
                self.killed.send_modify(|ids| ids.push(run_id.clone()));
                return Ok(status);
            }
            let run_id = match kind {
                RunKind::Command { run_id } => Some(run_id),
                RunKind::Kill { .. } | RunKind::Other => None,
            };
            let mut pending = Pending {
                fake: self,
                run_id: run_id.clone(),
            };
            let status = self.play(answer, run_id, &sink).await;
            pending.run_id = None;
            status
        })
    }

    fn attach_argv(&self, session: &str, argv: &[String], pty: bool) -> Result<ClientArgv> {
        let mut client = vec!["fake-client".to_owned(), session.to_owned()];
        if pty {
            client.push("-t".to_owned());
        }
        client.extend(argv.iter().cloned());
        Ok((client, false))
    }

    fn health(&self) -> BackendFuture<'_, ()> {
        Box::pin(async { Ok(()) })
    }

    fn close_session<'a>(&'a self, _session: &'a str) -> BackendFuture<'a, ()> {
        Box::pin(async { Ok(()) })
    }
}
