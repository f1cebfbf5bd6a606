//! Live shells: one `bash` per session that has already restored the session's state (its
//! exports, functions, aliases and directory) and forks a subshell per command, so that a
//! command's critical path holds no exec, no shell start-up, no restore, no saved start state
//! and, when the command changed nothing, no file written at all.
//!
//! Only runs of the state-keeping wrapper ([`WRAPPER`]) with pipes and no stdin are served
//! (stdout and stderr merged, or apart: a job that asked for them apart sends its stderr to a
//! FIFO of its own, [`FrameKind::Stderr`]);
//! anything else, and any run while the session's live shell is busy with another, warming up
//! or out of date, takes the ordinary way (a spare shell or a spawn running the wrapper).
//!
//! A command sees what the wrapper would show it: a subshell is a copy of its parent, so what
//! it changes (`cd`, `export`, options, plain variables) dies with it unless it is part of the
//! saved state, which the subshell hands back at exit through a FIFO and the agent merges into
//! the session's files as the wrapper's own files are ([`crate::shell_state::commit_text`]).
//! Differences a command can see: `$$` is the live shell's PID (the same from command to
//! command, as in an interactive terminal) and `BASH_SUBSHELL` is 1.
//!
//! The live shell is used only while the session's state files hold exactly what it read when
//! it started; a command that changed the state, or a change by any other run, retires it and a
//! new one is warmed in the background from the new state.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use rustix::fs::{Mode, OFlags};

use crate::protocol::{FrameKind, RunRequest};
use crate::shell_state::WRAPPER;

/// `bash -c LIVE_SCRIPT paddock ENV_SNAPSHOT CWD BOOT`: restores the state as the wrapper
/// does, prints the state it started from (`export -p; declare -f; alias -p`, a NUL, `pwd -P`,
/// a NUL), then for each line read from stdin runs a subshell that sources the boot file
/// `BOOT` (rewritten for each job) as a job of its own process group (`set -m`), its output on
/// the FIFO `BOOT.out`, and prints the job's PID and then its status, a line each.
///
/// The boot file only sets the job's variables; the directory change and the `eval` stand on
/// the wrapper's own lines (4 and 25), so that what bash says about a command (`paddock: line
/// 25: foo: command not found`) is word for word what the wrapper's shell says. A job that
/// changes directory before its command saves the state it then starts from
/// (`__paddock_start_save`), as the wrapper's start save does. `wait` answers early for a job
/// that was stopped (a session pause): the loop waits on until the job is gone. A directory
/// that no longer exists ends the shell before it prints anything (the wrapper's way says so).
const LIVE_SCRIPT: &str = r#"__paddock_cwd=$2; if [ -n "$1" ]; then . "$1" </dev/null >/dev/null 2>&1; fi; if [ -n "$__paddock_cwd" ]; then builtin cd -- "$__paddock_cwd" 2>/dev/null || exit 0; fi
__paddock_save() { __paddock_status=$?; export -n PADDOCK_RUN 2>/dev/null; { export -p; declare -f; alias -p; printf '\0'; if [ -z "$__paddock_workdir" ]; then pwd -P; fi; printf '\0'; } > "$__paddock_dump" 2>/dev/null; return $__paddock_status; }; __paddock_start_save() { { export -p; declare -f; alias -p; printf '\0'; pwd -P; printf '\0'; } > "$__paddock_dump" 2>/dev/null; }; shopt -s expand_aliases; { export -p; declare -f; alias -p; printf '\0'; pwd -P; printf '\0'; }; set -m; __paddock_boot=$3; while read -r __paddock_job; do ( . "$__paddock_boot"
if [ -n "$__paddock_workdir" ]; then
    builtin cd -- "$__paddock_workdir" || { echo "paddock: cannot change into workdir $__paddock_workdir" >&2; exit 126; }; __paddock_start_save
elif [ -n "$__paddock_cwd" ] && ! [ . -ef "$__paddock_cwd" ]; then
    builtin cd -- "$__paddock_cwd" 2>/dev/null || { echo "paddock: the session's directory $__paddock_cwd no longer exists; starting in ${HOME:-/}" >&2; builtin cd -- "${HOME:-/}"; }; __paddock_start_save
fi
unset __paddock_cwd; trap __paddock_save EXIT
#
# (Lines kept so that the eval below stands on line 25, as in the wrapper.)
#
#
#
#
#
#
#
#
#
#
#
#
#
#
eval "$__paddock_cmd"
) </dev/null >"$__paddock_boot.out" 2>&1 &
    __paddock_job=$!
    printf '%s\n' "$__paddock_job"
    wait "$__paddock_job"; __paddock_status=$?
    while [ "$__paddock_status" -gt 128 ] && kill -0 "$__paddock_job" 2>/dev/null; do
        read -r -t 0.05 __paddock_nap
        wait "$__paddock_job"; __paddock_status=$?
    done
    printf '%s\n' "$__paddock_status"
done"#;

/// Sessions (keys) an agent keeps live shells for: an agent serves one session, an engine's
/// own pool a few at once.
const MAX_SHELLS: usize = 8;

/// What a live shell is good for: runs with the same program, state, start directory and
/// environment (the run id aside).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    program: String,
    state_dir: String,
    cwd: Option<String>,
    env: BTreeMap<String, String>,
    clear_env: bool,
}

/// The wrapper's arguments: `bash -c WRAPPER paddock STATE COMMAND WORKDIR TAG`.
struct WrapperArgs<'a> {
    state_dir: &'a str,
    command: &'a str,
    workdir: &'a str,
    tag: &'a str,
}

fn wrapper_args(request: &RunRequest) -> Option<WrapperArgs<'_>> {
    // Variables of one command (`PADDOCK_CALL_ENV`) are the wrapper's to set aside and put
    // back; the live shell restored the session's state once, without them.
    if request.pty
        || request.stdin
        || !request.renames.is_empty()
        || request.env.contains_key(crate::shell_state::CALL_ENV)
    {
        return None;
    }
    match request.argv.as_slice() {
        [bash, dash_c, script, name, state_dir, command, workdir, tag]
            if dash_c == "-c"
                && script == WRAPPER
                && name == "paddock"
                && Path::new(bash).file_name().is_some_and(|n| n == "bash") =>
        {
            Some(WrapperArgs {
                state_dir,
                command,
                workdir,
                tag,
            })
        }
        _ => None,
    }
}

/// The session's state files as a shell read them (`None`: absent).
#[derive(Debug, Clone, PartialEq, Eq)]
struct StateFiles {
    env: Option<Vec<u8>>,
    cwd: Option<Vec<u8>>,
}

impl StateFiles {
    fn read(state_dir: &Path) -> Self {
        Self {
            env: std::fs::read(state_dir.join("env.sh")).ok(),
            cwd: std::fs::read(state_dir.join("cwd")).ok(),
        }
    }
}

/// One warm shell.
struct LiveShell {
    child: Child,
    stdin: ChildStdin,
    control: ChildStdout,
    /// Bytes read from `control` past the last whole line.
    pending: Vec<u8>,
    /// The files it restored.
    files: StateFiles,
    /// The state it holds, as its commands' saves print it.
    base_env: String,
    base_cwd: String,
    /// Its boot file (each job's variables, written over the last job's) and the FIFOs of
    /// its jobs' output and saved state, made once: a file made on ext4 costs more than a
    /// job of a live shell otherwise does.
    boot: File,
    out: Fifo,
    /// A job's stderr when it asked for it apart (its boot file sends fd 2 there).
    err: Fifo,
    dump: Fifo,
    _boot_path: Removed,
}

impl LiveShell {
    /// Reads one line from the shell (`None`: it is gone).
    fn line(&mut self) -> Option<String> {
        loop {
            if let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.pending.drain(..=end).collect();
                return Some(String::from_utf8_lossy(&line[..end]).into_owned());
            }
            let mut buf = [0u8; 256];
            match self.control.read(&mut buf) {
                Ok(0) => return None,
                Ok(n) => self.pending.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Whether the directory the shell is in was removed (or replaced) since it went there:
    /// a job would start in a directory that is gone, where the wrapper's shell says so and
    /// starts in `$HOME`; such a session takes the wrapper's way.
    fn cwd_removed(&self) -> bool {
        std::fs::read_link(format!("/proc/{}/cwd", self.child.id())).map_or(true, |target| {
            target
                .as_os_str()
                .as_encoded_bytes()
                .ends_with(b" (deleted)")
        })
    }

    /// A status line already read, if any.
    fn status_line(&mut self) -> Option<i32> {
        while let Some(end) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=end).collect();
            if let Ok(code) = String::from_utf8_lossy(&line[..end]).trim().parse::<i32>() {
                return Some(code);
            }
        }
        None
    }

    /// Reads what the shell wrote (it is readable); `false` when it is gone.
    fn read_control(&mut self) -> bool {
        let mut buf = [0u8; 256];
        match self.control.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) => e.kind() == std::io::ErrorKind::Interrupted,
        }
    }

    fn end(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why a live shell did not start.
enum WarmFailed {
    /// Something to try again (no process or file could be made).
    Io,
    /// The shell itself ended before it was ready: the session's directory is gone. The same
    /// files would end the next one the same way; the wrapper's way says so to the user.
    Refused(StateFiles),
}

impl From<std::io::Error> for WarmFailed {
    fn from(_: std::io::Error) -> Self {
        Self::Io
    }
}

enum Slot {
    Ready(Box<LiveShell>),
    /// No live shell can restore these files: none is warmed until they change.
    Refused(StateFiles),
    /// Serving a command, or being started: the session's other runs take the ordinary way.
    Busy,
}

/// The live shells of an agent (or of the engine's unconfined local backend), by session.
pub struct LiveShells {
    slots: Mutex<HashMap<Key, Slot>>,
    /// Where snapshots, boot files and FIFOs go (a directory only this agent writes).
    dir: PathBuf,
    counter: AtomicU64,
}

impl LiveShells {
    pub fn new(dir: PathBuf) -> Arc<Self> {
        Arc::new(Self {
            slots: Mutex::new(HashMap::new()),
            dir,
            counter: AtomicU64::new(0),
        })
    }

    /// A fresh path for a live shell's file: `DIR/live-PID-N`.
    fn unique(&self) -> PathBuf {
        let n = self.counter.fetch_add(1, Ordering::Relaxed);
        self.dir.join(format!("live-{}-{n}", std::process::id()))
    }

    /// `request` started as a job of the session's live shell, or `None` (run it the ordinary
    /// way). A session without a live shell gets one warmed for its next command.
    pub fn take(self: &Arc<Self>, request: &RunRequest) -> Option<Box<LiveJob>> {
        let args = wrapper_args(request)?;
        let mut env = request.env.clone();
        let run_id = env.remove("PADDOCK_RUN");
        let key = Key {
            program: request.argv[0].clone(),
            state_dir: args.state_dir.to_owned(),
            cwd: request.cwd.clone(),
            env,
            clear_env: request.clear_env,
        };
        let shell = {
            let mut slots = self.slots.lock().ok()?;
            match slots.remove(&key) {
                Some(Slot::Ready(shell)) => {
                    slots.insert(key.clone(), Slot::Busy);
                    *shell
                }
                Some(Slot::Busy) => {
                    slots.insert(key, Slot::Busy);
                    return None;
                }
                Some(Slot::Refused(files)) => {
                    if StateFiles::read(Path::new(args.state_dir)) == files {
                        slots.insert(key, Slot::Refused(files));
                    } else {
                        slots.insert(key.clone(), Slot::Busy);
                        self.warm(key);
                    }
                    return None;
                }
                None => {
                    if slots.len() < MAX_SHELLS {
                        slots.insert(key.clone(), Slot::Busy);
                        self.warm(key);
                    }
                    return None;
                }
            }
        };
        let state_dir = Path::new(args.state_dir);
        let up_to_date = StateFiles::read(state_dir) == shell.files && !shell.cwd_removed();
        let mut shell = shell;
        if !up_to_date || !matches!(shell.child.try_wait(), Ok(None)) {
            shell.end();
            self.warm(key);
            return None;
        }
        let split = request.split_stderr;
        match LiveJob::start(self, key.clone(), shell, &args, run_id.as_deref(), split) {
            Ok(job) => Some(Box::new(job)),
            Err(shell) => {
                shell.end();
                self.warm(key);
                None
            }
        }
    }

    /// Starts a live shell for `key` in the background (its slot is `Busy` meanwhile).
    fn warm(self: &Arc<Self>, key: Key) {
        let pool = self.clone();
        let warmed = key.clone();
        let spawned = std::thread::Builder::new()
            .name("live-shell-warm".into())
            .spawn(move || {
                let key = warmed;
                let started = pool.start_shell(&key);
                let Ok(mut slots) = pool.slots.lock() else {
                    return;
                };
                match (started, slots.get(&key)) {
                    (Ok(shell), Some(Slot::Busy)) => {
                        slots.insert(key, Slot::Ready(Box::new(shell)));
                    }
                    (Ok(shell), _) => shell.end(),
                    (Err(WarmFailed::Refused(files)), Some(Slot::Busy)) => {
                        slots.insert(key, Slot::Refused(files));
                    }
                    (Err(_), _) => {
                        slots.remove(&key);
                    }
                }
            });
        if spawned.is_err()
            && let Ok(mut slots) = self.slots.lock()
        {
            slots.remove(&key);
        }
    }

    fn start_shell(&self, key: &Key) -> Result<LiveShell, WarmFailed> {
        let state_dir = Path::new(&key.state_dir);
        let files = StateFiles::read(state_dir);
        // The shell restores a private copy of what was read: the files may change while it
        // starts, and it must hold exactly what `files` says it holds.
        let snapshot = match &files.env {
            Some(text) => {
                let path = with_suffix(&self.unique(), ".env");
                std::fs::write(&path, text)?;
                Some(Removed(path))
            }
            None => None,
        };
        let cwd = files.cwd.as_deref().map_or_else(String::new, |bytes| {
            let text = String::from_utf8_lossy(bytes);
            text.split('\n').next().unwrap_or_default().to_owned()
        });
        let boot_path = self.unique();
        let boot = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&boot_path)?;
        let boot_path = Removed(boot_path);
        let out = Fifo::make(with_suffix(&boot_path.0, ".out"))?;
        let err = Fifo::make(with_suffix(&boot_path.0, ".err"))?;
        let dump = Fifo::make(with_suffix(&boot_path.0, ".dump"))?;
        let mut command = Command::new(&key.program);
        if key.clear_env {
            command.env_clear();
        }
        if let Some(dir) = &key.cwd {
            command.current_dir(dir);
        }
        command
            .args(["-c", LIVE_SCRIPT, "paddock"])
            .arg(
                snapshot
                    .as_ref()
                    .map_or_else(Default::default, |s| s.0.clone()),
            )
            .arg(&cwd)
            .arg(&boot_path.0)
            .envs(&key.env)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        let mut child = command.spawn()?;
        let (Some(stdin), Some(control)) = (child.stdin.take(), child.stdout.take()) else {
            let _ = child.kill();
            let _ = child.wait();
            // The pipes were not made.
            return Err(WarmFailed::Io);
        };
        let mut shell = LiveShell {
            child,
            stdin,
            control,
            pending: Vec::new(),
            files,
            base_env: String::new(),
            base_cwd: String::new(),
            boot,
            out,
            err,
            dump,
            _boot_path: boot_path,
        };
        match read_until_nuls(&mut shell, 2) {
            Some(mut parts) if parts.len() == 2 => {
                shell.base_cwd = parts.pop().unwrap_or_default();
                shell.base_env = parts.pop().unwrap_or_default();
                Ok(shell)
            }
            _ => {
                let files = shell.files.clone();
                shell.end();
                Err(WarmFailed::Refused(files))
            }
        }
    }

    /// Ends every live shell (the agent is leaving).
    pub fn drain(&self) {
        if let Ok(mut slots) = self.slots.lock() {
            for (_, slot) in slots.drain() {
                if let Slot::Ready(shell) = slot {
                    shell.end();
                }
            }
        }
    }

    /// Gives the shell back after a job, or retires it and warms a new one; neither when the
    /// session was closed meanwhile ([`LiveShells::end_for_state`] removed its slot).
    fn give_back(self: &Arc<Self>, key: Key, shell: Option<LiveShell>) {
        let Ok(mut slots) = self.slots.lock() else {
            if let Some(shell) = shell {
                shell.end();
            }
            return;
        };
        let open = matches!(slots.get(&key), Some(Slot::Busy));
        match shell {
            Some(shell) if open => {
                slots.insert(key, Slot::Ready(Box::new(shell)));
            }
            Some(shell) => shell.end(),
            None if open => {
                drop(slots);
                self.warm(key);
            }
            None => {}
        }
    }

    /// Ends the live shells of the session whose state lives in `state_dir` (it is being
    /// closed); a job running meanwhile ends with its shell when it is done.
    pub fn end_for_state(&self, state_dir: &Path) {
        let Ok(mut slots) = self.slots.lock() else {
            return;
        };
        let keys: Vec<Key> = slots
            .keys()
            .filter(|k| Path::new(&k.state_dir) == state_dir)
            .cloned()
            .collect();
        for key in keys {
            if let Some(Slot::Ready(shell)) = slots.remove(&key) {
                shell.end();
            }
        }
    }
}

/// `count` NUL-ended texts from the shell's output (its start state).
fn read_until_nuls(shell: &mut LiveShell, count: usize) -> Option<Vec<String>> {
    let mut parts = Vec::new();
    let mut buf = [0u8; 8192];
    while parts.len() < count {
        if let Some(end) = shell.pending.iter().position(|&b| b == 0) {
            let part: Vec<u8> = shell.pending.drain(..=end).collect();
            parts.push(String::from_utf8(part[..end].to_vec()).ok()?);
            continue;
        }
        match shell.control.read(&mut buf) {
            Ok(0) => return None,
            Ok(n) => shell.pending.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some(parts)
}

/// A file removed when dropped.
struct Removed(PathBuf);

impl Drop for Removed {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Quotes `word` for bash.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r#"'\''"#))
}

/// What the job sources: the wrapper's variables and arguments, the run id and, for a job whose
/// stderr goes apart, its redirection (nothing that could print: the live script itself changes
/// directory and runs the command).
fn boot_script(
    args: &WrapperArgs<'_>,
    run_id: Option<&str>,
    dump: &Path,
    stderr: Option<&Path>,
) -> String {
    let mut text = String::from("set +m; unset __paddock_boot __paddock_job\n");
    text.push_str(&format!(
        "__paddock_state={}; __paddock_cmd={}; __paddock_workdir={}; __paddock_tag={}; __paddock_dump={}\n",
        quote(args.state_dir),
        quote(args.command),
        quote(args.workdir),
        quote(args.tag),
        quote(&dump.display().to_string()),
    ));
    text.push_str(
        "set -- \"$__paddock_state\" \"$__paddock_cmd\" \"$__paddock_workdir\" \"$__paddock_tag\"\n",
    );
    if let Some(run_id) = run_id {
        text.push_str(&format!("export PADDOCK_RUN={}\n", quote(run_id)));
    }
    if let Some(stderr) = stderr {
        // The subshell's fd 2 was the output FIFO; from here on, the job's own.
        text.push_str(&format!(
            "exec 2>{}\n",
            quote(&stderr.display().to_string())
        ));
    }
    text
}

/// A FIFO of a live shell's jobs, its reading end held open by the agent from job to job.
/// For each job the agent also holds a writing end until the job answered, so that the reader
/// never sees the end before the job opened the FIFO, and sees it once the job and all that
/// inherited its end are gone.
struct Fifo {
    path: Removed,
    reader: File,
}

impl Fifo {
    fn make(path: PathBuf) -> std::io::Result<Self> {
        rustix::fs::mkfifoat(rustix::fs::CWD, &path, Mode::from_raw_mode(0o600))?;
        let path = Removed(path);
        let reader = rustix::fs::open(
            &path.0,
            OFlags::RDONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(Self {
            path,
            reader: File::from(reader),
        })
    }

    /// A writing end (the reader is open: this never blocks).
    fn writer(&self) -> std::io::Result<File> {
        let fd = rustix::fs::open(
            &self.path.0,
            OFlags::WRONLY | OFlags::NONBLOCK | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(File::from(fd))
    }
}

/// How [`LiveJob::run`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    Exited(i32),
    Deadline,
    /// The engine hung up (or a frame could not be sent).
    HungUp,
}

/// One command running in a live shell.
pub struct LiveJob {
    pool: Arc<LiveShells>,
    key: Key,
    shell: Option<LiveShell>,
    pid: u32,
    out_writer: Option<File>,
    /// The stderr FIFO's writing end, for a job that asked for stderr apart.
    err_writer: Option<File>,
    dump_writer: Option<File>,
    dump_text: Vec<u8>,
    /// Whether the job's stderr goes apart (to the shell's `err` FIFO).
    split: bool,
    /// Whether the job's output (and its stderr, when apart) ended: a FIFO nobody else holds
    /// can serve the next job.
    output_ended: bool,
    stderr_ended: bool,
    /// Where output is read into (one buffer for the job's whole life).
    buf: Vec<u8>,
    state_dir: PathBuf,
    tag: String,
    workdir_given: bool,
    status: Option<i32>,
    /// Whether the shell's slot was given back (by [`LiveJob::finish`], else on drop).
    given_back: bool,
}

impl LiveJob {
    /// Sends the job to `shell`. On failure, the shell, to be ended.
    fn start(
        pool: &Arc<LiveShells>,
        key: Key,
        mut shell: LiveShell,
        args: &WrapperArgs<'_>,
        run_id: Option<&str>,
        split: bool,
    ) -> Result<Self, Box<LiveShell>> {
        let prepared = (|| {
            let stderr = split.then_some(shell.err.path.0.as_path());
            let text = boot_script(args, run_id, &shell.dump.path.0, stderr);
            // Written over the last job's: a truncation to zero on ext4 forces the blocks out
            // at close (its replace-by-truncate heuristic); a shorter length does not.
            shell.boot.write_all_at(text.as_bytes(), 0)?;
            shell.boot.set_len(text.len() as u64)?;
            let err_writer = if split {
                Some(shell.err.writer()?)
            } else {
                None
            };
            Ok::<_, std::io::Error>((shell.out.writer()?, err_writer, shell.dump.writer()?))
        })();
        let Ok((out_writer, err_writer, dump_writer)) = prepared else {
            return Err(Box::new(shell));
        };
        if shell.stdin.write_all(b"\n").is_err() {
            return Err(Box::new(shell));
        }
        let Some(pid) = shell.line().and_then(|l| l.trim().parse::<u32>().ok()) else {
            return Err(Box::new(shell));
        };
        Ok(Self {
            pool: pool.clone(),
            key,
            shell: Some(shell),
            pid,
            out_writer: Some(out_writer),
            err_writer,
            dump_writer: Some(dump_writer),
            dump_text: Vec::new(),
            split,
            output_ended: false,
            stderr_ended: !split,
            buf: vec![0u8; 64 * 1024],
            state_dir: PathBuf::from(args.state_dir),
            tag: args.tag.to_owned(),
            workdir_given: !args.workdir.is_empty(),
            status: None,
            given_back: false,
        })
    }

    /// The job's PID, also its process group.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Runs the job until it exits (its exit code, or 128 + the signal that ended it), the
    /// `deadline` passes or `engine` (the connection, when watched) hangs up, handing its output
    /// to `output` as it comes, with the stream it came on ([`FrameKind::Output`], or
    /// [`FrameKind::Stderr`] for a job with stderr apart; `false` from it: the engine is gone),
    /// and reading its saved state
    /// meanwhile (a save larger than a pipe holds would otherwise keep the job from exiting).
    /// One thread and one `poll`: no output pump, no input watcher, no timer. A live shell that
    /// died (a command that killed `$$`) answers with its own end.
    pub fn run(
        &mut self,
        engine: Option<&UnixStream>,
        deadline: Option<Instant>,
        output: &mut dyn FnMut(FrameKind, &[u8]) -> bool,
    ) -> Ended {
        let mut buf = std::mem::take(&mut self.buf);
        let ended = self.run_with(engine, deadline, output, &mut buf);
        self.buf = buf;
        ended
    }

    fn run_with(
        &mut self,
        engine: Option<&UnixStream>,
        deadline: Option<Instant>,
        output: &mut dyn FnMut(FrameKind, &[u8]) -> bool,
        buf: &mut [u8],
    ) -> Ended {
        use rustix::event::{PollFd, PollFlags, Timespec};
        loop {
            let Some(shell) = self.shell.as_mut() else {
                return self.exited(128 + 9);
            };
            if let Some(code) = shell.status_line() {
                return self.exited(code);
            }
            let LiveShell {
                control,
                out,
                err,
                dump,
                ..
            } = shell;
            let timeout = match deadline {
                Some(at) => {
                    let left = at.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ended::Deadline;
                    }
                    Some(Timespec::try_from(left).unwrap_or(Timespec {
                        tv_sec: i64::MAX,
                        tv_nsec: 0,
                    }))
                }
                None => None,
            };
            let mut fds = vec![
                PollFd::new(&*control, PollFlags::IN),
                PollFd::new(&dump.reader, PollFlags::IN),
                PollFd::new(&out.reader, PollFlags::IN),
            ];
            // Polled only while the job holds it: a FIFO without writers reads as ended at
            // once, and would wake the poll without end.
            let err_at = self.split.then(|| {
                fds.push(PollFd::new(&err.reader, PollFlags::IN));
                fds.len() - 1
            });
            let engine_at = engine.map(|engine| {
                fds.push(PollFd::new(engine, PollFlags::IN));
                fds.len() - 1
            });
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                // Nothing to wait with: end it as a timeout would.
                Err(_) => return Ended::Deadline,
            }
            let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
            drop(fds);
            if ready[1] {
                read_available(&mut dump.reader, &mut self.dump_text);
            }
            if ready[2] && !pass_output(&mut out.reader, FrameKind::Output, buf, output) {
                return Ended::HungUp;
            }
            if err_at.is_some_and(|at| ready[at])
                && !pass_output(&mut err.reader, FrameKind::Stderr, buf, output)
            {
                return Ended::HungUp;
            }
            if engine_at.is_some_and(|at| ready[at]) && engine.is_some_and(hung_up) {
                return Ended::HungUp;
            }
            if ready[0] {
                let shell = self.shell.as_mut().map(|s| s.read_control());
                if shell == Some(false) {
                    // The live shell is gone: its job goes too, and its end is the answer.
                    signal_group(self.pid, rustix::process::Signal::KILL);
                    let status = self.shell.take().and_then(|mut s| s.child.wait().ok());
                    return self.exited(status.map_or(128 + 9, |s| {
                        use std::os::unix::process::ExitStatusExt;
                        s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(9))
                    }));
                }
            }
        }
    }

    fn exited(&mut self, code: i32) -> Ended {
        self.status = Some(code);
        // The job is gone: what still holds its output is its leftovers.
        self.out_writer = None;
        self.err_writer = None;
        self.dump_writer = None;
        Ended::Exited(code)
    }

    /// After the job exited and its leftovers were ended: the rest of its output (and stderr),
    /// until their end or `until` (a grandchild that kept a FIFO open is not waited for longer).
    pub fn drain(&mut self, until: Instant, output: &mut dyn FnMut(FrameKind, &[u8]) -> bool) {
        use rustix::event::{PollFd, PollFlags, Timespec};
        let Some(shell) = self.shell.as_mut() else {
            return;
        };
        let buf = &mut self.buf;
        while !(self.output_ended && self.stderr_ended) {
            let left = until.saturating_duration_since(Instant::now());
            let Ok(timeout) = Timespec::try_from(left) else {
                return;
            };
            let mut streams = Vec::with_capacity(2);
            if !self.output_ended {
                streams.push((
                    FrameKind::Output,
                    &mut shell.out.reader,
                    &mut self.output_ended,
                ));
            }
            if !self.stderr_ended {
                streams.push((
                    FrameKind::Stderr,
                    &mut shell.err.reader,
                    &mut self.stderr_ended,
                ));
            }
            let mut fds: Vec<PollFd<'_>> = streams
                .iter()
                .map(|(_, reader, _)| PollFd::new(&**reader, PollFlags::IN))
                .collect();
            match rustix::event::poll(&mut fds, Some(&timeout)) {
                Ok(0) => return,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => continue,
                Err(_) => return,
            }
            let ready: Vec<bool> = fds.iter().map(|fd| !fd.revents().is_empty()).collect();
            drop(fds);
            for ((kind, reader, ended), ready) in streams.into_iter().zip(ready) {
                if !ready {
                    continue;
                }
                let mut seen = 0;
                let mut counting = |kind: FrameKind, data: &[u8]| {
                    seen += data.len();
                    output(kind, data)
                };
                if !pass_output(reader, kind, buf, &mut counting) {
                    // The engine is gone.
                    return;
                }
                if seen == 0 {
                    // Readable with nothing in it: the end of this stream.
                    *ended = true;
                }
            }
        }
    }

    /// After the job's leftovers were ended: commits what it saved (only what it changed) and
    /// gives the live shell back, or retires it when the state changed. Answers the problems
    /// to tell the caller.
    pub fn finish(&mut self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(shell) = self.shell.as_mut() {
            read_available(&mut shell.dump.reader, &mut self.dump_text);
        }
        let Some(shell) = self.shell.take() else {
            // The shell died under the job: a new one for the next command.
            self.pool.give_back(self.key.clone(), None);
            self.given_back = true;
            return problems;
        };
        self.given_back = true;
        let saved = parse_saves(&self.dump_text).filter(|_| self.status.is_some());
        let Some(saves) = saved else {
            // Killed before it saved: nothing to commit, and the shell cannot be trusted.
            shell.end();
            self.pool.give_back(self.key.clone(), None);
            return problems;
        };
        // What the command started from: the shell's state, or the job's own start save.
        let (base_env, base_cwd) = saves
            .start
            .unwrap_or((shell.base_env.as_str(), shell.base_cwd.as_str()));
        let (env, cwd) = saves.end;
        let changed = env != base_env || (!self.workdir_given && cwd != base_cwd);
        if !changed {
            // Nothing to write: the shell still holds the session's state (whether the files
            // still say so is checked when it is next taken), unless the job's output did not
            // end (something it started still holds the FIFO, unfit for the next job).
            if self.output_ended && self.stderr_ended {
                self.pool.give_back(self.key.clone(), Some(shell));
            } else {
                shell.end();
                self.pool.give_back(self.key.clone(), None);
            }
            return problems;
        }
        let _lock = crate::shell_state::lock_dir(&self.state_dir);
        let mut targets = vec![("env.sh", base_env, env)];
        if !self.workdir_given {
            targets.push(("cwd", base_cwd, cwd));
        }
        for (name, base, new) in targets {
            let target = self.state_dir.join(name);
            if let Err(e) = crate::shell_state::commit_text(&target, base, new, &self.tag) {
                problems.push(format!("cannot commit {}: {e}", target.display()));
            }
        }
        // The state moved on: a new shell restores it.
        shell.end();
        self.pool.give_back(self.key.clone(), None);
        problems
    }
}

impl Drop for LiveJob {
    /// A job dropped before it finished (an error on the way): its shell cannot be trusted.
    fn drop(&mut self) {
        if let Some(shell) = self.shell.take() {
            signal_group(self.pid, rustix::process::Signal::KILL);
            shell.end();
        }
        if !self.given_back {
            self.pool.give_back(self.key.clone(), None);
        }
    }
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn signal_group(pgid: u32, signal: rustix::process::Signal) {
    if let Some(group) = i32::try_from(pgid)
        .ok()
        .and_then(rustix::process::Pid::from_raw)
    {
        let _ = rustix::process::kill_process_group(group, signal);
    }
}

/// Hands what the non-blocking `reader` holds now to `output` as `kind`; `false` when `output`
/// refused.
fn pass_output(
    reader: &mut File,
    kind: FrameKind,
    buf: &mut [u8],
    output: &mut dyn FnMut(FrameKind, &[u8]) -> bool,
) -> bool {
    loop {
        match reader.read(buf) {
            Ok(0) => return true,
            Ok(n) => {
                if !output(kind, &buf[..n]) {
                    return false;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return true,
        }
    }
}

/// Whether the engine hung up: its connection is readable, and no stdin was announced, so any
/// read (its end, or a byte it had no reason to send) means it gave up on the run.
fn hung_up(engine: &UnixStream) -> bool {
    let mut byte = [0u8; 1];
    !matches!(
        rustix::net::recv(engine, &mut byte, rustix::net::RecvFlags::DONTWAIT),
        Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR)
    )
}

/// Reads what a non-blocking `reader` holds now.
fn read_available(reader: &mut File, into: &mut Vec<u8>) {
    let mut buf = [0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => into.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// A job's saves: the state it started from when it changed directory itself before the
/// command (a workdir, or a session directory the shell is no longer in), as the wrapper's
/// start save has it; then its state at exit. Each is the state text, a NUL, the directory line
/// (empty at exit with a workdir), a NUL.
struct Saves<'a> {
    start: Option<(&'a str, &'a str)>,
    end: (&'a str, &'a str),
}

fn parse_saves(bytes: &[u8]) -> Option<Saves<'_>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let fields: Vec<&str> = text.split('\0').collect();
    match fields.as_slice() {
        [env, cwd, ""] => Some(Saves {
            start: None,
            end: (env, cwd),
        }),
        [start_env, start_cwd, env, cwd, ""] => Some(Saves {
            start: Some((start_env, start_cwd)),
            end: (env, cwd),
        }),
        _ => None,
    }
}
