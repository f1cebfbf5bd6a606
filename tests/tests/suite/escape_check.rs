//! What an outside escape check found (issue 47), held on the built-in default sandbox (no
//! policy file, as a new user runs it) and in the code-mode child:
//!
//! - a session sees only its own state: another session's python runs, artifacts, spill
//!   files and shell state can be neither read nor written, through `terminal`,
//!   `python_execute`, or a script's nested calls;
//! - the seccomp filters the sandbox actually installed (read back from the running process
//!   with `PTRACE_SECCOMP_GET_FILTER`) refuse every call Docker's default profile refuses, with
//!   the arguments it refuses them with (`sandbox-worker/data/docker-default-refused.tsv`);
//! - x32 calls, `AF_VSOCK`, `AF_ALG`, `pidfd_getfd` and `kcmp` are refused from inside a
//!   command, and a command holds no descriptor of the agent or the engine.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use paddock_tests::{Run, children_of, paddock_at, paddock_bin, sandbox_probe_bin};
use serde_json::{Value, json};

/// A project directory with its own state directory; every session is closed at the end.
struct Project {
    dir: tempfile::TempDir,
    workspace: PathBuf,
}

impl Project {
    fn new() -> Self {
        // Not under /tmp: inside the sandbox /tmp is the session's own.
        let dir = tempfile::Builder::new()
            .prefix("escape-check-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .unwrap_or_else(|e| panic!("temp dir: {e}"));
        let workspace = dir.path().join("project");
        std::fs::create_dir_all(&workspace).unwrap_or_else(|e| panic!("workspace: {e}"));
        Self { dir, workspace }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn paddock(&self, args: &[&str]) -> Run {
        let state = self.state().display().to_string();
        paddock_at(
            Some(&self.workspace),
            args,
            &[("PADDOCK_HOME", state.as_str())],
            None,
            Duration::from_secs(120),
        )
    }

    fn call(&self, session: &str, tool: &str, args: Value) -> Value {
        let args = args.to_string();
        let run = self.paddock(&["call", tool, "--session", session, "--args", &args]);
        assert!(run.code == 0 || run.code == 1, "{tool}: {}", run.stderr);
        run.json()
    }

    fn terminal(&self, session: &str, command: &str) -> String {
        let v = self.call(
            session,
            "terminal",
            json!({"command": command, "timeout": 30}),
        );
        v["output"].as_str().unwrap_or_default().to_owned()
    }
}

impl Drop for Project {
    fn drop(&mut self) {
        for session in ["a", "b", "default", "leaky"] {
            let _ = self.paddock(&["sessions", "close", session]);
        }
    }
}

/// Reading a filter back (`PTRACE_SECCOMP_GET_FILTER`) needs root; without it the same
/// programs are judged by sandbox-worker's unit tests, and this says so.
fn can_read_installed_filters() -> bool {
    if is_root() {
        return true;
    }
    eprintln!(
        "SKIPPED: reading an installed filter back needs root (PTRACE_SECCOMP_GET_FILTER); \
         the same program is judged by sandbox-worker's unit tests"
    );
    false
}

fn is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// Session A leaves a python run (code, output file, artifact), a spilled result and shell
/// state; session B, through every door, reaches none of it.
#[test]
fn another_sessions_python_runs_spill_and_shell_state_are_out_of_reach() {
    let p = Project::new();
    let a = p.call(
        "a",
        "python_execute",
        json!({"code": "import os\nSECRET = 'a-secret-code-7781'\n\
                open('out.txt', 'w').write('a-secret-output-7781')\n\
                open(os.environ['PADDOCK_ARTIFACTS'] + '/art.txt', 'w').write('a-secret-artifact-7781')\n\
                print(os.getcwd())"}),
    );
    assert_eq!(a["exit_code"], json!(0), "{a}");
    let run_dir = PathBuf::from(a["output"].as_str().unwrap_or_default().trim());
    assert!(run_dir.join("main.py").is_file(), "{a}");
    assert!(run_dir.join("artifacts/art.txt").is_file(), "{a}");
    let state = p.state();
    // The run lies in A's own directory, which A's sandbox sees.
    assert!(run_dir.starts_with(state.join("python/a")), "{a}");
    let own = p.terminal("a", &format!("cat {}/out.txt", run_dir.display()));
    assert!(
        own.contains("a-secret-output-7781"),
        "A lost its own run: {own}"
    );
    // A result big enough to be spilled, and shell state.
    let spilled = p.call(
        "a",
        "terminal",
        json!({"command": "export A_TOKEN_7781=a-shell-secret; seq 1 40000"}),
    );
    assert!(spilled["spilled"].is_array(), "{spilled}");
    let spill_dir = state.join("spill/a");
    assert!(spill_dir.is_dir());

    let targets = [
        run_dir.join("main.py"),
        run_dir.join("out.txt"),
        run_dir.join("artifacts/art.txt"),
    ];
    let listing = format!(
        "for f in {files}; do cat \"$f\" 2>&1; done; ls -la {python} {spill} {sessions} 2>&1; \
         cat {spill}/*.txt 2>&1 | head -c 200; cat {sessions}/a/* 2>&1 | head -c 2000; \
         echo pwn > {run}/pwn.txt 2>&1; echo pwn > {python}/a/pwn.txt 2>&1; echo end",
        files = targets
            .iter()
            .map(|t| t.display().to_string())
            .collect::<Vec<_>>()
            .join(" "),
        python = state.join("python").display(),
        spill = spill_dir.display(),
        sessions = state.join("sessions").display(),
        run = run_dir.display(),
    );

    // B's terminal, B's python_execute, and B's script's nested calls (code mode).
    let terminal = p.terminal("b", &listing);
    assert!(terminal.contains("end"), "{terminal}");
    let py = p.call(
        "b",
        "python_execute",
        json!({"code": format!("import subprocess\nprint(subprocess.run(['bash', '-c', {listing:?}], capture_output=True, text=True).stdout)")}),
    );
    let script = p.call(
        "b",
        "run_tools_script",
        json!({"code": format!(
            "r = await tools.terminal(command={listing:?}, timeout=30)\n\
             q = await tools.python_execute(code={code:?})\n\
             return r['output'] + q['output']",
            code = format!("print(open({:?}).read())", targets[0].display().to_string()),
        )}),
    );
    for (door, seen) in [
        ("terminal", terminal),
        ("python_execute", py.to_string()),
        ("run_tools_script", script.to_string()),
    ] {
        for secret in [
            "a-secret-code-7781",
            "a-secret-output-7781",
            "a-secret-artifact-7781",
            "a-shell-secret",
            "39999",
        ] {
            assert!(
                !seen.contains(secret),
                "session B read A's {secret} through {door}: {seen}"
            );
        }
    }
    assert!(!run_dir.join("pwn.txt").exists(), "B wrote into A's run");
    assert!(
        !state.join("python/a/pwn.txt").exists(),
        "B wrote into A's runs"
    );

    // Closing A removes its runs; B's own runs are untouched by it.
    let b = p.call("b", "python_execute", json!({"code": "print('b here')"}));
    assert_eq!(b["exit_code"], json!(0), "{b}");
    let close = p.paddock(&["sessions", "close", "a"]);
    assert_eq!(close.code, 0, "{}", close.stderr);
    assert!(!state.join("python/a").exists(), "A's runs outlived A");
    assert!(
        state.join("python/b").is_dir(),
        "closing A removed B's runs"
    );
}

/// A session id that would name a directory outside the state directory is refused before
/// python_execute writes anything.
#[test]
fn a_session_id_that_climbs_out_is_refused_before_anything_is_written() {
    let p = Project::new();
    let v = p.call(
        "../../escaped-7781",
        "python_execute",
        json!({"code": "print('ran')"}),
    );
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("session id")),
        "{v}"
    );
    let outside = p.dir.path().parent().map(|d| d.join("escaped-7781"));
    assert!(
        outside.is_some_and(|d| !d.exists()),
        "python_execute wrote outside the state directory"
    );
    assert!(!p.dir.path().join("escaped-7781").exists());
}

/// Waits for a process of this test whose command line is exactly `argv`; answers its pid.
fn find_process(argv: &[&str], within: Duration) -> Option<u32> {
    let wanted: Vec<u8> = argv.iter().flat_map(|a| a.bytes().chain([0])).collect();
    let start = Instant::now();
    while start.elapsed() < within {
        for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            if std::fs::read(entry.path().join("cmdline")).is_ok_and(|c| c == wanted) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// The seccomp state line of `/proc/PID/status` (`2` = filtered).
fn seccomp_mode(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim().to_owned()))
        .unwrap_or_default()
}

/// Reads the filters installed in `pid` and judges them against Docker's list.
fn judge_installed_filters(pid: u32, what: &str) {
    assert_eq!(
        seccomp_mode(pid),
        "2",
        "{what} ({pid}) runs without a filter"
    );
    let out = Command::new(sandbox_probe_bin())
        .args(["--seccomp-check", &pid.to_string()])
        .output()
        .unwrap_or_else(|e| panic!("paddock-sandbox-probe: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{what}: {}{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l}: {e}")))
        .collect();
    let verdicts: Vec<&Value> = lines.iter().filter(|l| l["call"].is_string()).collect();
    assert!(verdicts.len() > 90, "{what}: {stdout}");
    let let_through: Vec<&&Value> = verdicts
        .iter()
        .filter(|v| v["refused"] != json!(true))
        .collect();
    assert!(
        let_through.is_empty(),
        "{what}: the installed filter lets through what Docker refuses: {let_through:#?}"
    );
    for call in [
        "pidfd_getfd",
        "kcmp",
        "process_madvise",
        "mbind",
        "file_setattr",
    ] {
        assert!(
            verdicts.iter().any(|v| v["call"] == json!(call)),
            "{what}: {call} unchecked"
        );
    }
    // x32 and i386 calls end the process before any table is looked at.
    for v in verdicts.iter().filter(|v| {
        v["call"]
            .as_str()
            .is_some_and(|c| c.ends_with("(x32)") || c.ends_with("(i386)"))
    }) {
        assert_eq!(v["verdict"], json!("kill-process"), "{what}: {v}");
    }
}

fn kill(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// The filter of a sandboxed command, read back from a `sleep` running under the built-in
/// default (no policy file).
#[test]
fn the_command_sandboxs_installed_filter_refuses_everything_dockers_profile_refuses() {
    if !can_read_installed_filters() {
        return;
    }
    let p = Project::new();
    let state = p.state().display().to_string();
    let args = json!({"command": "sleep 299.4711", "timeout": 120}).to_string();
    let mut paddock = Command::new(paddock_bin())
        .args(["call", "terminal", "--args", &args])
        .current_dir(&p.workspace)
        .env("PADDOCK_HOME", &state)
        .env_remove("PADDOCK_POLICY")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("paddock: {e}"));
    let Some(sleeper) = find_process(&["sleep", "299.4711"], Duration::from_secs(60)) else {
        kill(&mut paddock);
        panic!("the sandboxed sleep never appeared");
    };
    judge_installed_filters(sleeper, "a sandboxed command");
    let _ = Command::new("kill").arg(sleeper.to_string()).status();
    kill(&mut paddock);
}

/// The filters of a code-mode child (its own allow-list and the zygote's kill-list), read back
/// from a child of a running `paddock run`.
#[test]
fn the_code_mode_childs_installed_filters_refuse_everything_dockers_profile_refuses() {
    if !can_read_installed_filters() {
        return;
    }
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let script = dir.path().join("s.py");
    std::fs::write(&script, "import asyncio\nawait asyncio.sleep(60)\n")
        .unwrap_or_else(|e| panic!("{e}"));
    let mut paddock = Command::new(paddock_bin())
        .args(["run", "--timeout", "90"])
        .arg(&script)
        .env("PADDOCK_HOME", dir.path().join("state"))
        .env_remove("PADDOCK_POLICY")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("paddock: {e}"));
    // paddock run -> zygote -> children (confined before they take a script).
    let start = Instant::now();
    let child = loop {
        let confined = children_of(paddock.id())
            .into_iter()
            .flat_map(children_of)
            .find(|&pid| seccomp_mode(pid) == "2");
        if let Some(pid) = confined {
            break Some(pid);
        }
        if start.elapsed() > Duration::from_secs(60) {
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let Some(child) = child else {
        kill(&mut paddock);
        panic!("no confined code-mode child appeared");
    };
    judge_installed_filters(child, "a code-mode child");
    kill(&mut paddock);
}

fn python(code: &str) -> String {
    format!(
        "python3 -c '{}'; echo status=$?",
        code.replace('\'', "'\"'\"'")
    )
}

/// From inside a command of the built-in default sandbox: the doors the escape check found
/// open are shut, and shut by the filter (a kill for x32, EPERM for the rest).
#[test]
fn x32_vsock_alg_and_another_processs_descriptors_are_refused_inside_a_command() {
    let p = Project::new();
    // x32 getpid: without the filter this kernel (no x32 support) answers ENOSYS and python
    // goes on; with it the process dies of SIGSYS (status 159).
    let out = p.terminal(
        "default",
        &python("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nprint(libc.syscall(0x40000000 | 39))"),
    );
    assert!(
        out.contains("status=159"),
        "an x32 call was not killed: {out}"
    );

    let out = p.terminal(
        "default",
        &python(
            "import socket\nfor name, family, kind in [(\"vsock\", 40, socket.SOCK_STREAM), (\"alg\", 38, socket.SOCK_SEQPACKET)]:\n\
             \x20   try:\n\
             \x20       socket.socket(family, kind)\n\
             \x20       print(name, \"OPENED\")\n\
             \x20   except OSError as e:\n\
             \x20       print(name, \"refused\", e.errno)",
        ),
    );
    assert!(out.contains("vsock refused 1"), "{out}");
    assert!(out.contains("alg refused 1"), "{out}");

    // Every other process of the sandbox (the session's agent among them): pidfd_open works,
    // pidfd_getfd and kcmp do not.
    let out = p.terminal(
        "default",
        &python(
            "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\nme = os.getpid()\n\
             pids = [int(p) for p in os.listdir(\"/proc\") if p.isdigit() and int(p) != me]\n\
             print(\"others\", len(pids))\n\
             for pid in pids:\n\
             \x20   try:\n\
             \x20       pfd = os.pidfd_open(pid)\n\
             \x20   except OSError:\n\
             \x20       continue\n\
             \x20   for fd in range(12):\n\
             \x20       r = libc.syscall(438, pfd, fd, 0)\n\
             \x20       if r >= 0:\n\
             \x20           print(\"TOOK\", pid, fd, os.readlink(\"/proc/self/fd/%d\" % r))\n\
             \x20       elif ctypes.get_errno() != 1:\n\
             \x20           print(\"ERRNO\", pid, fd, ctypes.get_errno())\n\
             \x20   r = libc.syscall(312, me, pid, 0, 0, 0)\n\
             \x20   print(\"kcmp\", r, ctypes.get_errno())",
        ),
    );
    assert!(out.contains("status=0"), "{out}");
    assert!(!out.contains("TOOK") && !out.contains("ERRNO"), "{out}");
    assert!(out.contains("kcmp -1 1"), "{out}");
    let others: usize = out
        .lines()
        .find_map(|l| l.strip_prefix("others "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0);
    assert!(others >= 1, "no other process to try: {out}");

    // The command's own descriptors: stdin, stdout and stderr (a pipe or the live shell's
    // output FIFO, its own output), nothing else: not the agent's socket, lock or log, not
    // another job's FIFO, nothing the engine or whoever started `paddock` held.
    let lister = "import os\nfor fd in sorted(int(f) for f in os.listdir(\"/proc/%s/fd\" % os.environ.get(\"WHO\", \"self\"))):\n\
                  \x20   try:\n\
                  \x20       print(fd, os.readlink(\"/proc/%s/fd/%d\" % (os.environ.get(\"WHO\", \"self\"), fd)))\n\
                  \x20   except OSError:\n\
                  \x20       print(fd, \"(gone)\")";
    // Twice: the first command of a session starts its live shell, later ones run in it.
    for round in 0..2 {
        let out = p.terminal(
            "default",
            &format!(
                "echo command; {own}; echo shell; WHO=$$ {shell}",
                own = python(lister),
                shell = python(lister)
            ),
        );
        let mut section = "";
        for line in out.lines() {
            if line == "command" || line == "shell" {
                section = line;
                continue;
            }
            let Some((fd, target)) = line.split_once(' ') else {
                continue;
            };
            let Ok(fd) = fd.parse::<u32>() else {
                continue;
            };
            // The python lister's own directory descriptor (its /proc/self/fd).
            let listing = target.ends_with("/fd") || target == "(gone)";
            assert!(
                fd <= 2 || (section == "command" && fd == 3 && listing),
                "round {round}: the {section} holds descriptor {fd} -> {target}:\n{out}"
            );
            assert!(
                !target.ends_with(".sock")
                    && !target.ends_with(".lock")
                    && !target.ends_with("agent.log")
                    && !target.starts_with("socket:"),
                "round {round}: the {section} holds {fd} -> {target}:\n{out}"
            );
        }
        assert!(out.contains("shell"), "{out}");
    }

    // Descriptors whoever started `paddock` left open without close-on-exec (a CI runner's, a
    // terminal multiplexer's) never reach a sandboxed command: a session whose agent starts
    // from a `paddock` holding fds 7 and 8.
    let args = json!({"command": "ls /proc/self/fd | tr '\\n' ' '", "timeout": 30}).to_string();
    let out = Command::new("bash")
        .args(["-c", "exec 7</etc/hostname 8>/dev/null; exec \"$0\" \"$@\""])
        .arg(paddock_bin())
        .args(["call", "terminal", "--session", "leaky", "--args", &args])
        .current_dir(&p.workspace)
        .env("PADDOCK_HOME", p.state())
        .env_remove("PADDOCK_POLICY")
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["output"], json!("0 1 2 3 "), "{v}");
}
