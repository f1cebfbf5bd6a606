//! One program run for one connection: spawned with pipes or a terminal, its output streamed as
//! frames, stdin fed from frames, its whole tree ended when the connection drops early.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::AgentError;
use crate::live_shell::{Ended, LiveJob, LiveShells};
use crate::protocol::{FrameKind, Reply, RunRequest, read_frame, write_message};
use crate::spare::{SparePool, spawn_merged};

/// After the program exits, how long its output may take to drain (a grandchild that kept the
/// pipe open is not waited for longer).
pub(crate) const DRAIN_AFTER_EXIT: Duration = Duration::from_millis(1000);
/// Between TERM and KILL when a run is ended early.
const KILL_GRACE: Duration = Duration::from_millis(500);
/// The terminal size every PTY run starts with (the local backend's).
pub(crate) const PTY_ROWS: u16 = 40;
pub(crate) const PTY_COLS: u16 = 120;

/// The writing half of a connection, shared by the output pump and the final reply.
type SharedWriter = Arc<Mutex<UnixStream>>;

fn send(writer: &SharedWriter, kind: FrameKind, payload: &[u8]) -> Result<(), AgentError> {
    let mut stream = writer.lock().map_err(|_| AgentError::Poisoned)?;
    crate::protocol::write_frame(&mut *stream, kind, payload)?;
    Ok(())
}

/// Where the program's input goes.
enum Input {
    Pipe(std::process::ChildStdin),
    Terminal(Arc<pty_process::blocking::Pty>),
}

/// Runs `request` for the connection `stream` (whose stdin frames, if any, come next) and answers
/// `Exit`. Returns when the reply is sent or the connection is gone.
///
/// Answers the connection back when the run asked to keep it and could (see
/// [`RunRequest::keep_connection`]): the caller reads its next request from it.
pub fn serve_run(
    stream: UnixStream,
    request: RunRequest,
    spares: &Arc<SparePool>,
    live: &Arc<LiveShells>,
) -> Result<Option<UnixStream>, AgentError> {
    if let Some(job) = live.take(&request) {
        return serve_live(stream, &request, job);
    }
    let Some((program, args)) = request.argv.split_first() else {
        let mut stream = stream;
        write_message(
            &mut stream,
            &Reply::Error {
                message: "empty argv".into(),
            },
        )?;
        return Ok(None);
    };
    let writer: SharedWriter = Arc::new(Mutex::new(stream.try_clone()?));
    let finished = Arc::new(AtomicBool::new(false));
    let timed_out = Arc::new(AtomicBool::new(false));
    // The run's threads start before its program does: a program that fills its session's
    // process ceiling at once (a fork bomb; pids counts threads) would otherwise leave the run
    // without its output pump, its input or its deadline, and the engine waiting forever.
    let helpers = match start_helpers(&stream, &writer, &request, &finished, &timed_out) {
        Ok(helpers) => helpers,
        Err(err) => {
            let mut stream = stream;
            write_message(
                &mut stream,
                &Reply::Error {
                    message: format!(
                        "cannot start a thread for the run ({err}): the session is at its \
                         process ceiling or the machine at its limit"
                    ),
                },
            )?;
            return Ok(None);
        }
    };
    // A spare shell when one waits (its boot file goes when `_boot` does, after the run).
    let mut _boot = None;
    let spawned = if let Some((spare, boot)) = spares.take(&request) {
        _boot = Some(boot);
        let mut output: Outputs = vec![(FrameKind::Output, Box::new(spare.output))];
        if let Some(stderr) = spare.stderr {
            output.push((FrameKind::Stderr, Box::new(stderr)));
        }
        match spare.stdin {
            Some(stdin) => Ok((spare.child, output, Input::Pipe(stdin))),
            None => Err(std::io::Error::other("the spare shell has no stdin")),
        }
    } else if request.pty {
        spawn_terminal(program, args, &request)
    } else {
        spawn_pipes(program, args, &request)
    };
    let (mut child, output, input) = match spawned {
        Ok(parts) => parts,
        Err(err) => {
            // Dropping the helpers' channels ends their threads.
            drop(helpers);
            let mut stream = stream;
            write_message(
                &mut stream,
                &Reply::Error {
                    message: format!("cannot start {program}: {err}"),
                },
            )?;
            return Ok(None);
        }
    };
    let pgid = child.id();
    // `_deadline` lives until the run is answered: its drop ends the deadline's thread.
    let (drained_rx, _deadline) = helpers.go(pgid, output, input);
    let status = child.wait()?;
    // What the program left behind goes with it: its group, and daemons that left the group
    // but carry the run id (unless the run keeps those for the session).
    end_leftovers(pgid, request.run_id.as_deref(), request.keep_detached);
    // The session's state: merged with what overlapping runs saved meanwhile.
    for problem in commit_renames(&request.renames) {
        let _ = send(
            &writer,
            FrameKind::Output,
            format!("paddock-agent: {problem}\n").as_bytes(),
        );
    }
    let _ = drained_rx.recv_timeout(DRAIN_AFTER_EXIT);
    finished.store(true, Ordering::SeqCst);
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let mut stream = writer.lock().map_err(|_| AgentError::Poisoned)?;
    write_message(
        &mut *stream,
        &Reply::Exit {
            code,
            timed_out: timed_out.load(Ordering::SeqCst),
            // The run's helper threads hold clones of this connection: it is never reused.
            kept: false,
        },
    )?;
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(None)
}

/// Runs `request` as `job` of the session's live shell, answering on `stream`: in this thread
/// alone (the job's [`LiveJob::run`] polls its output, its end, the engine and the deadline),
/// with what a spawned run does around it: the deadline and a hang-up end the job's tree, the
/// leftovers of a finished job are ended, its state is committed before `Exit` is answered.
fn serve_live(
    stream: UnixStream,
    request: &RunRequest,
    mut job: Box<LiveJob>,
) -> Result<Option<UnixStream>, AgentError> {
    let pgid = job.pid();
    let run_id = request.run_id.as_deref();
    let deadline = request
        .timeout_ms
        .map(|ms| Instant::now() + Duration::from_millis(ms));
    let mut engine_gone = false;
    let mut to_engine = |kind: FrameKind, data: &[u8]| {
        engine_gone =
            engine_gone || crate::protocol::write_frame(&mut &stream, kind, data).is_err();
        !engine_gone
    };
    let mut timed_out = false;
    let mut watching = true;
    let code = loop {
        let watched = watching.then_some(&stream);
        match job.run(watched, deadline.filter(|_| !timed_out), &mut to_engine) {
            Ended::Exited(code) => break code,
            Ended::Deadline => {
                timed_out = true;
                end_run(pgid, run_id);
            }
            Ended::HungUp => {
                watching = false;
                end_run(pgid, run_id);
            }
        }
    };
    end_leftovers(
        pgid,
        run_id,
        request.keep_detached && !timed_out && watching,
    );
    job.drain(Instant::now() + DRAIN_AFTER_EXIT, &mut to_engine);
    let problems = job.finish();
    if !watching || engine_gone {
        // Nobody to answer.
        return Ok(None);
    }
    let mut stream = stream;
    for problem in problems {
        crate::protocol::write_frame(
            &mut stream,
            FrameKind::Output,
            format!("paddock-agent: {problem}\n").as_bytes(),
        )?;
    }
    // This thread alone used the connection, and the run's frames are all written: it can
    // carry the caller's next request.
    let kept = request.keep_connection;
    write_message(
        &mut stream,
        &Reply::Exit {
            code,
            timed_out,
            kept,
        },
    )?;
    if kept {
        return Ok(Some(stream));
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
    Ok(None)
}

/// Commits the files a wrapper run saved under run-tagged names; answers what failed.
fn commit_renames(renames: &[(String, String)]) -> Vec<String> {
    let _lock = renames
        .first()
        .and_then(|(_, to)| std::path::Path::new(to).parent())
        .and_then(crate::shell_state::lock_dir);
    renames
        .iter()
        .filter_map(|(from, to)| {
            crate::shell_state::commit_file(std::path::Path::new(from), std::path::Path::new(to))
                .err()
                .map(|e| format!("cannot commit {from} to {to}: {e}"))
        })
        .collect()
}

/// What a program's output is read from: one reader per frame kind (stdout, or both streams
/// merged, as `Output`; stderr apart as `Stderr` when the run split them).
type Outputs = Vec<(FrameKind, Box<dyn Read + Send>)>;

/// The threads of one run, waiting for its program: the output pump, the input (stdin frames
/// and the engine's hang-up) and the deadline.
struct Helpers {
    output: mpsc::Sender<Outputs>,
    input: mpsc::Sender<(Input, u32)>,
    deadline: Option<mpsc::Sender<u32>>,
    drained: mpsc::Receiver<()>,
}

impl Helpers {
    /// Hands the started program's parts to the threads; answers the channel that says when
    /// its output is drained, and the deadline's sender, whose drop tells the deadline's
    /// thread that the run is over.
    fn go(
        self,
        pgid: u32,
        output: Outputs,
        input: Input,
    ) -> (mpsc::Receiver<()>, Option<mpsc::Sender<u32>>) {
        let _ = self.output.send(output);
        let _ = self.input.send((input, pgid));
        if let Some(deadline) = &self.deadline {
            let _ = deadline.send(pgid);
        }
        (self.drained, self.deadline)
    }
}

/// Starts the run's threads; each waits for the program's parts and ends quietly when they
/// never come.
fn start_helpers(
    stream: &UnixStream,
    writer: &SharedWriter,
    request: &RunRequest,
    finished: &Arc<AtomicBool>,
    timed_out: &Arc<AtomicBool>,
) -> std::io::Result<Helpers> {
    // Output: frames until the program and everything holding its output are gone. A split
    // run's stderr gets a thread of its own, started with the program (a thread started
    // before it would count against a session at its ceiling for every run).
    let (output_tx, output_rx) = mpsc::channel::<Outputs>();
    let (drained_tx, drained_rx) = mpsc::channel::<()>();
    let pump_writer = writer.clone();
    std::thread::Builder::new()
        .name("run-output".into())
        .spawn(move || {
            let Ok(outputs) = output_rx.recv() else {
                return;
            };
            let mut outputs = outputs.into_iter();
            let Some((kind, first)) = outputs.next() else {
                let _ = drained_tx.send(());
                return;
            };
            let others: Vec<_> = outputs
                .filter_map(|(kind, reader)| {
                    let writer = pump_writer.clone();
                    std::thread::Builder::new()
                        .name("run-stderr".into())
                        .spawn(move || pump(reader, kind, &writer))
                        .ok()
                })
                .collect();
            pump(first, kind, &pump_writer);
            for other in others {
                let _ = other.join();
            }
            let _ = drained_tx.send(());
        })?;

    // Input and the connection's end: stdin frames first, then any end of the connection
    // before the run finished means the caller gave up: end the run's tree.
    let (input_tx, input_rx) = mpsc::channel::<(Input, u32)>();
    let mut reader = stream.try_clone()?;
    let watch_finished = finished.clone();
    let run_id = request.run_id.clone();
    let stdin_follows = request.stdin;
    std::thread::Builder::new()
        .name("run-input".into())
        .spawn(move || {
            let Ok((input, pgid)) = input_rx.recv() else {
                return;
            };
            let mut input = Some(input);
            if stdin_follows {
                loop {
                    match read_frame(&mut reader) {
                        Ok(Some((FrameKind::Stdin, data))) if data.is_empty() => break,
                        Ok(Some((FrameKind::Stdin, data))) => {
                            if let Some(target) = input.as_mut() {
                                let written = match target {
                                    Input::Pipe(pipe) => pipe.write_all(&data),
                                    Input::Terminal(pty) => (&**pty).write_all(&data),
                                };
                                if written.is_err() {
                                    // The program stopped reading; keep draining frames.
                                    input = None;
                                }
                            }
                        }
                        Ok(Some(_)) => break,
                        Ok(None) | Err(_) => {
                            if !watch_finished.load(Ordering::SeqCst) {
                                end_run(pgid, run_id.as_deref());
                            }
                            return;
                        }
                    }
                }
            }
            // Pipes: end of input. A terminal stays open (it is also the output).
            if let Some(Input::Pipe(pipe)) = input.take() {
                drop(pipe);
            }
            let mut byte = [0u8; 1];
            // Nothing more is expected from the engine: a read returns only when it hangs up.
            let _ = reader.read(&mut byte);
            if !watch_finished.load(Ordering::SeqCst) {
                end_run(pgid, run_id.as_deref());
            }
        })?;

    // The deadline: a timer thread ends the tree; the program's wait then returns.
    let deadline = match request.timeout_ms {
        Some(ms) => {
            let (deadline_tx, deadline_rx) = mpsc::channel::<u32>();
            let finished = finished.clone();
            let timed_out = timed_out.clone();
            let run_id = request.run_id.clone();
            std::thread::Builder::new()
                .name("run-deadline".into())
                .spawn(move || {
                    let Ok(pgid) = deadline_rx.recv() else {
                        return;
                    };
                    // Until the timeout, or until the run is over (its sender dropped): a
                    // thread that slept out every finished run's whole timeout would count
                    // against the session's process ceiling.
                    let ended = deadline_rx.recv_timeout(Duration::from_millis(ms));
                    if matches!(ended, Err(mpsc::RecvTimeoutError::Timeout))
                        && !finished.load(Ordering::SeqCst)
                    {
                        timed_out.store(true, Ordering::SeqCst);
                        end_run(pgid, run_id.as_deref());
                    }
                })?;
            Some(deadline_tx)
        }
        None => None,
    };
    Ok(Helpers {
        output: output_tx,
        input: input_tx,
        deadline,
        drained: drained_rx,
    })
}

/// Sends what `reader` gives as `kind` frames until its end (or the engine's).
fn pump(mut reader: Box<dyn Read + Send>, kind: FrameKind, writer: &SharedWriter) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if send(writer, kind, &buf[..n]).is_err() {
                    break;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            // A terminal answers EIO once its last writer is gone.
            Err(_) => break,
        }
    }
}

type Spawned = (Child, Outputs, Input);

fn spawn_pipes(program: &str, args: &[String], request: &RunRequest) -> std::io::Result<Spawned> {
    let mut command = Command::new(program);
    if request.clear_env {
        command.env_clear();
    }
    if let Some(cwd) = &request.cwd {
        command.current_dir(cwd);
    }
    command.args(args).envs(&request.env);
    if request.split_stderr {
        let (child, stdin, stdout, stderr) = spawn_split(command)?;
        return Ok((
            child,
            vec![
                (FrameKind::Output, Box::new(stdout)),
                (FrameKind::Stderr, Box::new(stderr)),
            ],
            Input::Pipe(stdin),
        ));
    }
    // One pipe for stdout and stderr: the caller gets them merged, in order.
    let (child, stdin, reader) = spawn_merged(command, "the program")?;
    Ok((
        child,
        vec![(FrameKind::Output, Box::new(reader))],
        Input::Pipe(stdin),
    ))
}

/// `command` with a pipe for each of stdout and stderr, in a process group of its own.
fn spawn_split(
    mut command: Command,
) -> std::io::Result<(
    Child,
    std::process::ChildStdin,
    std::process::ChildStdout,
    std::process::ChildStderr,
)> {
    use std::os::unix::process::CommandExt;
    use std::process::Stdio;
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = command.spawn()?;
    let piped = || std::io::Error::other("the program's pipes were not made");
    let stdin = child.stdin.take().ok_or_else(piped)?;
    let stdout = child.stdout.take().ok_or_else(piped)?;
    let stderr = child.stderr.take().ok_or_else(piped)?;
    Ok((child, stdin, stdout, stderr))
}

fn spawn_terminal(
    program: &str,
    args: &[String],
    request: &RunRequest,
) -> std::io::Result<Spawned> {
    let (pty, pts) = pty_process::blocking::open().map_err(std::io::Error::other)?;
    pty.resize(pty_process::Size::new(PTY_ROWS, PTY_COLS))
        .map_err(std::io::Error::other)?;
    // The child becomes a session leader with this terminal as its controlling terminal.
    let mut command = pty_process::blocking::Command::new(program);
    if request.clear_env {
        command = command.env_clear();
    }
    if let Some(cwd) = &request.cwd {
        command = command.current_dir(cwd);
    }
    let child = command
        .args(args)
        .envs(&request.env)
        .env("TERM", "xterm-256color")
        .spawn(pts)
        .map_err(std::io::Error::other)?;
    let pty = Arc::new(pty);
    let output = TerminalReader(pty.clone());
    Ok((
        child,
        vec![(FrameKind::Output, Box::new(output))],
        Input::Terminal(pty),
    ))
}

struct TerminalReader(Arc<pty_process::blocking::Pty>);

impl Read for TerminalReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        (&*self.0).read(buf)
    }
}

/// Ends a run's whole tree: its process group, and every process that carries its run id
/// (daemons that left the group), TERM then KILL.
pub fn end_run(pgid: u32, run_id: Option<&str>) {
    signal_run(pgid, run_id, rustix::process::Signal::TERM);
    std::thread::sleep(KILL_GRACE);
    kill_leftovers(pgid, run_id);
}

/// Ends every process that carries `run_id`, for a caller outside the agent (the engine, when
/// the agent itself did not answer): TERM, then KILL until none is left (bounded).
pub fn end_tagged(run_id: &str) {
    signal_run(0, Some(run_id), rustix::process::Signal::TERM);
    std::thread::sleep(KILL_GRACE);
    kill_leftovers(0, Some(run_id));
}

/// What a finished run leaves behind ends: its group at once, and the processes that left the
/// group (found by the run id) with it, or, when the run keeps them, with the agent
/// ([`end_kept_detached`]): a session's own processes, like its background commands.
fn end_leftovers(pgid: u32, run_id: Option<&str>, keep_detached: bool) {
    match run_id.filter(|_| keep_detached) {
        Some(run_id) => {
            signal_run(pgid, None, rustix::process::Signal::KILL);
            if !processes_of_run(run_id).is_empty() {
                keep_run(run_id);
            }
        }
        None => kill_leftovers(pgid, run_id),
    }
}

/// At this many kept run ids, those with no process left are dropped before another is added.
const KEPT_DETACHED_PRUNE_AT: usize = 32;

/// Run ids whose detached processes were kept past their run: ended with the agent.
static KEPT_DETACHED: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Remembers that `run_id` left processes for the agent to end. Runs whose kept processes have
/// all ended since need no ending: they are dropped first once the set is large, so that it
/// stays as small as what a session keeps running.
fn keep_run(run_id: &str) {
    if let Ok(mut kept) = KEPT_DETACHED.lock() {
        if kept.len() >= KEPT_DETACHED_PRUNE_AT {
            kept.retain(|kept_run| !processes_of_run(kept_run).is_empty());
        }
        kept.insert(run_id.to_owned());
    }
}

/// Ends the detached processes runs kept (see [`RunRequest::keep_detached`]): called as the
/// agent exits, so that they end with the session even where no namespace or container would
/// take them along (a remote host).
pub fn end_kept_detached() {
    let kept = match KEPT_DETACHED.lock() {
        Ok(mut kept) => std::mem::take(&mut *kept),
        Err(_) => return,
    };
    for run_id in kept {
        kill_leftovers(0, Some(&run_id));
    }
}

/// KILLs a run's leftovers until none is left. The group goes at once (the kernel signals a
/// group as one, forks in flight included). Processes that left the group, found by their run
/// id, are stopped first, scan after scan, until a scan finds no new one: a stopped process
/// cannot fork, and a stopped fork bomb at its session's process ceiling frees no slot for
/// another fork, so the set stops growing; then they are killed. Killing them one by one
/// instead frees a slot per kill that a running sibling fills at once: a bomb that escaped its
/// group (`timeout` makes a group of its own) outran the scans and held the run for minutes.
/// Bounded: a run cannot keep the agent here.
fn kill_leftovers(pgid: u32, run_id: Option<&str>) {
    use rustix::process::Signal;
    signal_run(pgid, None, Signal::KILL);
    let Some(run_id) = run_id else {
        return;
    };
    if stop_until_settled(|| processes_of_run(run_id)).is_empty() {
        return;
    }
    for _ in 0..LEFTOVER_ROUNDS {
        let found = processes_of_run(run_id);
        if found.is_empty() {
            return;
        }
        for pid in found {
            signal_pid(pid, Signal::KILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Scans of a finished run's leftovers before giving up.
const LEFTOVER_ROUNDS: usize = 50;

fn signal_run(pgid: u32, run_id: Option<&str>, signal: rustix::process::Signal) {
    if let Some(group) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(group, signal);
    }
    if let Some(run_id) = run_id {
        for pid in processes_of_run(run_id) {
            signal_pid(pid, signal);
        }
    }
}

fn signal_pid(pid: i32, signal: rustix::process::Signal) {
    if let Some(pid) = rustix::process::Pid::from_raw(pid) {
        let _ = rustix::process::kill_process(pid, signal);
    }
}

/// Stops every process `find` answers, scan after scan until a scan finds no new one (a
/// process forking as it is found leaves children the next scan catches; a stopped one cannot
/// fork), bounded by [`LEFTOVER_ROUNDS`] scans. Answers those it stopped. Also the engine's,
/// for `paddock sessions pause` of a local session.
pub fn stop_until_settled(find: impl Fn() -> HashSet<i32>) -> HashSet<i32> {
    let mut stopped = HashSet::new();
    for _ in 0..LEFTOVER_ROUNDS {
        let found = find();
        if found.is_empty() {
            break;
        }
        let running: Vec<i32> = found.difference(&stopped).copied().collect();
        if running.is_empty() {
            break;
        }
        for pid in running {
            signal_pid(pid, rustix::process::Signal::STOP);
            stopped.insert(pid);
        }
    }
    stopped
}

/// PIDs whose environment holds `PADDOCK_RUN=<run_id>` (never the agent itself).
pub fn processes_of_run(run_id: &str) -> HashSet<i32> {
    processes_with_env(&format!("PADDOCK_RUN={run_id}"))
}

/// PIDs whose environment holds `entry` (`NAME=value`), this process excepted.
pub fn processes_with_env(entry: &str) -> HashSet<i32> {
    let own = std::process::id() as i32;
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return HashSet::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != own)
        .filter(|pid| {
            read_proc_file(&format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|&b| b == 0).any(|v| v == entry.as_bytes()))
        })
        .collect()
}

/// A /proc file whole. `std::fs::read` sizes its buffer by the file's length, which /proc
/// gives as 0, and so read an environment in eight growing reads; one of 16 KiB takes most
/// whole. Every finished command scans its namespace this way.
fn read_proc_file(path: &str) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut contents = Vec::with_capacity(16 * 1024);
    std::fs::File::open(path)?.read_to_end(&mut contents)?;
    Ok(contents)
}

/// The stdin frames of a connection that will not run anything (an error reply was sent).
pub fn discard_stdin(stream: &mut UnixStream) {
    while let Ok(Some((FrameKind::Stdin, data))) = read_frame(stream) {
        if data.is_empty() {
            break;
        }
    }
}

/// Writes an error reply.
pub fn reply_error(stream: &mut UnixStream, message: String) -> Result<(), AgentError> {
    write_message(stream, &Reply::Error { message })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_runs_whose_processes_ended_are_dropped_once_the_set_is_large() {
        // No process carries these ids: as if their kept daemons had all exited.
        for n in 0..KEPT_DETACHED_PRUNE_AT {
            keep_run(&format!("t-ended-{n}-{}", std::process::id()));
        }
        let newest = format!("t-newest-{}", std::process::id());
        keep_run(&newest);
        let kept = KEPT_DETACHED.lock().map(|k| k.clone()).unwrap_or_default();
        assert_eq!(kept, [newest].into_iter().collect());
    }
}
