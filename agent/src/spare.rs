//! Spare shells: a `bash` started ahead of need, waiting for its script, so that a command's
//! critical path holds no fork, exec or shell start-up (about a millisecond a command, more
//! under seccomp and Landlock).
//!
//! A spare runs `bash -c 'IFS= read -r -d "" f || exit 0; . "$f"; eval "$s"'`: it reads,
//! byte by byte from its stdin, the path of a boot file ended by a NUL, then sources that file,
//! which sets up what `Command` would have (the environment, the directory, the positional
//! arguments) and holds the request's `-c` script, which the spare then runs. Whatever follows the NUL on stdin is the command's own
//! stdin. Used only for `bash -c SCRIPT NAME ARGS...` requests with pipes; anything else is
//! spawned as asked.

use std::collections::HashMap;
use std::io::{PipeReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::protocol::RunRequest;

/// What a spare runs until it is given work.
/// The request's script is `eval`ed here, on line 1 of the `-c` text, not sourced with the
/// boot file: bash then names it `paddock: line N` in its messages, N the script's own line,
/// as when bash runs the script itself (sourced, it was `/…/boot-PID-N: line 32`).
const SPARE_SCRIPT: &str =
    r#"IFS= read -r -d '' __paddock_boot || exit 0; . "$__paddock_boot"; eval "$__paddock_script""#;

/// One waiting shell.
pub struct Spare {
    pub child: Child,
    pub stdin: Option<ChildStdin>,
    /// stdout, with stderr merged unless the spare keeps it apart.
    pub output: PipeReader,
    /// stderr, for a run that asked for it apart (`split_stderr`).
    pub stderr: Option<PipeReader>,
}

/// Which spares wait: by program (`bash`, `/usr/bin/bash`) and whether stderr has a pipe of its
/// own (a run that streams its output asks for that; a shell's pipes are fixed at its start).
type SpareKey = (String, bool);

/// Spares by [`SpareKey`], and where boot files are written.
pub struct SparePool {
    spares: Mutex<HashMap<SpareKey, Spare>>,
    boot_dir: PathBuf,
    counter: AtomicU64,
    /// Spares start with an empty environment and serve only requests that set their whole
    /// environment (`clear_env`): a shell's first environment stays readable in
    /// `/proc/PID/environ` whatever it unsets later, so a spare must not start with secrets
    /// its commands are not to see.
    clean: bool,
}

/// A spare's boot file, removed when dropped (after the run).
pub struct BootFile(PathBuf);

impl Drop for BootFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Quotes `word` for bash.
fn quote(word: &str) -> String {
    format!("'{}'", word.replace('\'', r#"'\''"#))
}

impl SparePool {
    /// `clean`: see [`SparePool`]; an agent whose own environment is what its commands get
    /// anyway (a container's, a remote login's) passes `false`.
    pub fn new(boot_dir: PathBuf, clean: bool) -> Arc<Self> {
        Arc::new(Self {
            spares: Mutex::new(HashMap::new()),
            boot_dir,
            counter: AtomicU64::new(0),
            clean,
        })
    }

    /// Whether a spare can serve `request`: `bash -c SCRIPT [NAME ARGS...]` with pipes.
    fn serves(request: &RunRequest) -> bool {
        !request.pty
            && request.argv.len() >= 3
            && request.argv[1] == "-c"
            && Path::new(&request.argv[0])
                .file_name()
                .is_some_and(|n| n == "bash")
    }

    /// Starts a spare of `program` (stderr apart when `split`) in the background when there is
    /// none.
    pub fn refill(self: &Arc<Self>, program: &str, split: bool) {
        let pool = self.clone();
        let key: SpareKey = (program.to_owned(), split);
        // No thread to spare (the session at its process ceiling): the next run starts its
        // shell itself.
        let _ = std::thread::Builder::new().spawn(move || {
            if pool.spares.lock().is_ok_and(|s| s.contains_key(&key)) {
                return;
            }
            let Ok(spare) = start(&key.0, pool.clean, key.1) else {
                return;
            };
            if let Ok(mut spares) = pool.spares.lock()
                && let Some(mut extra) = spares.insert(key, spare)
            {
                // Two refills raced: the older one goes.
                let _ = extra.child.kill();
                let _ = extra.child.wait();
            }
        });
    }

    /// A spare given `request`'s work, or `None` (spawn it the ordinary way). A spare of the
    /// program is started for next time either way.
    pub fn take(self: &Arc<Self>, request: &RunRequest) -> Option<(Spare, BootFile)> {
        if !Self::serves(request) || (self.clean && !request.clear_env) {
            return None;
        }
        let program = request.argv[0].clone();
        let split = request.split_stderr;
        let taken = self.spares.lock().ok()?.remove(&(program.clone(), split));
        self.refill(&program, split);
        let mut spare = taken?;
        // A spare that died while waiting (killed from outside) is not used.
        if !matches!(spare.child.try_wait(), Ok(None)) {
            return None;
        }
        let boot_file = BootFile(self.boot_dir.join(format!(
            "boot-{}-{}",
            std::process::id(),
            self.counter.fetch_add(1, Ordering::Relaxed)
        )));
        std::fs::write(&boot_file.0, boot_script(request)).ok()?;
        let mut line = boot_file.0.as_os_str().as_encoded_bytes().to_vec();
        line.push(0);
        let sent = spare
            .stdin
            .as_mut()
            .is_some_and(|stdin| stdin.write_all(&line).is_ok());
        if !sent {
            let _ = spare.child.kill();
            let _ = spare.child.wait();
            return None;
        }
        Some((spare, boot_file))
    }

    /// Ends the waiting spares (the agent is leaving).
    pub fn drain(&self) {
        if let Ok(mut spares) = self.spares.lock() {
            for (_, mut spare) in spares.drain() {
                let _ = spare.child.kill();
                let _ = spare.child.wait();
            }
        }
    }
}

/// Starts one waiting shell: its own process group, stdout and stderr on one pipe (or, `split`,
/// on one each).
fn start(program: &str, clean: bool, split: bool) -> std::io::Result<Spare> {
    let mut command = Command::new(program);
    if clean {
        command.env_clear();
    }
    command.args(["-c", SPARE_SCRIPT, "paddock"]);
    if split {
        let (reader, writer) = std::io::pipe()?;
        let (err_reader, err_writer) = std::io::pipe()?;
        command
            .stdin(Stdio::piped())
            .stdout(writer)
            .stderr(err_writer)
            .process_group(0);
        let mut child = command.spawn()?;
        // The parent's copies of the writing ends must be gone, or the output never ends.
        drop(command);
        let stdin = child.stdin.take();
        return Ok(Spare {
            child,
            stdin,
            output: reader,
            stderr: Some(err_reader),
        });
    }
    let (child, stdin, reader) = spawn_merged(command, "the spare")?;
    Ok(Spare {
        child,
        stdin: Some(stdin),
        output: reader,
        stderr: None,
    })
}

/// Spawns `command` in its own process group with stdin piped and stdout and stderr merged on
/// one pipe, in order: the child, its stdin and the pipe's reading end. `who` names the program
/// in the error for a stdin that is missing.
pub(crate) fn spawn_merged(
    mut command: Command,
    who: &str,
) -> std::io::Result<(Child, ChildStdin, PipeReader)> {
    let (reader, writer) = std::io::pipe()?;
    command
        .stdin(Stdio::piped())
        .stdout(writer.try_clone()?)
        .stderr(writer)
        .process_group(0);
    let mut child = command.spawn()?;
    // The parent's copies of the pipe's writing end must be gone, or the output never ends.
    drop(command);
    let stdin = child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other(format!("{who}'s stdin was not piped")))?;
    Ok((child, stdin, reader))
}

/// What the spare sources: the environment (cleared first when asked), the directory, the
/// positional arguments, and the request's `-c` script in `__paddock_script` (run by the
/// spare's own `eval`).
fn boot_script(request: &RunRequest) -> String {
    let mut text = String::from("unset __paddock_boot\n");
    if request.clear_env {
        text.push_str("for __paddock_v in $(compgen -e); do unset \"$__paddock_v\"; done; unset __paddock_v\n");
    }
    for (key, value) in &request.env {
        text.push_str(&format!("export {}\n", quote(&format!("{key}={value}"))));
    }
    if let Some(cwd) = &request.cwd {
        text.push_str(&format!("builtin cd -- {} || exit 126\n", quote(cwd)));
    }
    // argv = bash -c SCRIPT [NAME [ARGS...]]: NAME is $0, which a sourced file cannot set.
    let args: Vec<String> = request.argv.iter().skip(4).map(|a| quote(a)).collect();
    text.push_str(&format!("set -- {}\n", args.join(" ")));
    text.push_str(&format!("__paddock_script={}\n", quote(&request.argv[2])));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(argv: &[&str]) -> RunRequest {
        RunRequest {
            argv: argv.iter().map(|s| (*s).to_owned()).collect(),
            env: [
                ("A".to_owned(), "it's".to_owned()),
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
            ]
            .into_iter()
            .collect(),
            clear_env: true,
            cwd: Some("/tmp".into()),
            timeout_ms: None,
            renames: Vec::new(),
            pty: false,
            stdin: false,
            run_id: None,
            split_stderr: false,
            keep_detached: false,
            keep_connection: false,
        }
    }

    #[test]
    fn a_spare_runs_the_script_with_its_environment_arguments_and_stdin() {
        let dir = tempfile::tempdir().unwrap();
        let pool = SparePool::new(dir.path().to_path_buf(), true);
        pool.refill("bash", false);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !pool
            .spares
            .lock()
            .unwrap()
            .contains_key(&("bash".to_owned(), false))
        {
            assert!(std::time::Instant::now() < deadline, "no spare started");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let req = request(&[
            "bash",
            "-c",
            r#"echo "$A|$1|$2|$(pwd)|${HOME-unset}|$(tr '\0' ' ' < /proc/$$/environ)"; cat"#,
            "name",
            "one two",
            "x'y",
        ]);
        let (mut spare, _boot) = pool.take(&req).expect("a spare");
        let mut stdin = spare.stdin.take().unwrap();
        stdin.write_all(b"from stdin\n").unwrap();
        drop(stdin);
        let mut out = String::new();
        use std::io::Read;
        let status = spare.child.wait().unwrap();
        spare.output.read_to_string(&mut out).unwrap_or_default();
        assert!(status.success(), "{status}: {out}");
        // The shell's first environment (what /proc shows) was empty.
        assert_eq!(out, "it's|one two|x'y|/tmp|unset|\nfrom stdin\n");
        pool.drain();
    }

    #[test]
    fn only_bash_with_pipes_is_served() {
        assert!(SparePool::serves(&request(&[
            "/usr/bin/bash",
            "-c",
            "true"
        ])));
        assert!(!SparePool::serves(&request(&["sh", "-c", "true"])));
        let mut pty = request(&["bash", "-c", "true"]);
        pty.pty = true;
        assert!(!SparePool::serves(&pty));
    }
}
