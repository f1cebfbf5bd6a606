//! Hostile commands against the local backend's `workspace-write` sandbox, through the real
//! binary's `terminal` tool. Every case checks evidence on the host: a canary unchanged, a
//! listener never reached, a process still alive or no survivor, not only an exit code.
//!
//! The test process plays the host: it owns a fake `$HOME` with credentials, listeners on
//! loopback, a "secret" sleeper process, and the workspace.

use std::io::Read;
use std::net::{TcpListener, UdpSocket};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

use paddock_tests::{Run, paddock_env, terminal_argv};
use serde_json::{Value, json};

struct Host {
    dir: tempfile::TempDir,
    workspace: PathBuf,
    home: PathBuf,
    policy: String,
}

impl Host {
    fn new() -> Self {
        // Not under /tmp: inside the sandbox /tmp is the session's own, so a host path there
        // (the fake $HOME) would vanish.
        Self::in_dir(Path::new(env!("CARGO_TARGET_TMPDIR")))
    }

    /// [`Host::new`] where another user can reach it too: the target directory when every
    /// directory above it lets anyone through, else /var/tmp (a checkout under a directory only
    /// root may traverse, such as root's home).
    fn for_anyone() -> Self {
        let target = Path::new(env!("CARGO_TARGET_TMPDIR"));
        if paddock_tests::traversable_by_anyone(&target.join("x")) {
            Self::new()
        } else {
            Self::in_dir(Path::new("/var/tmp"))
        }
    }

    fn in_dir(parent: &Path) -> Self {
        let dir = tempfile::Builder::new()
            .prefix("hostile-")
            .tempdir_in(parent)
            .unwrap();
        let workspace = dir.path().join("ws");
        let home = dir.path().join("home");
        std::fs::create_dir_all(workspace.join(".git/hooks")).unwrap();
        std::fs::write(
            workspace.join(".git/hooks/pre-commit"),
            "#!/bin/sh\nexit 0\n",
        )
        .unwrap();
        std::fs::create_dir_all(home.join(".ssh")).unwrap();
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".ssh/id_ed25519"), "SECRET-SSH-KEY").unwrap();
        std::fs::write(home.join(".aws/credentials"), "SECRET-AWS-KEY").unwrap();
        let policy = dir.path().join("p.toml");
        std::fs::write(
            &policy,
            format!(
                // The sandbox is what these commands test: the approval layer (tested in
                // approvals.rs) lets all but hardline ones through.
                "[approval]\nmode = \"allow\"\n[backends.local]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = \"{}\"\n",
                workspace.display()
            ),
        )
        .unwrap();
        Self {
            policy: policy.display().to_string(),
            dir,
            workspace,
            home,
        }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    /// `paddock call terminal --args ARGS` in the sandbox (session `h`), with `env` added to
    /// the state directory's `PADDOCK_HOME`.
    fn terminal(&self, args: &str, env: &[(&str, &str)]) -> Run {
        let state = self.state();
        let mut vars = vec![("PADDOCK_HOME", state.to_str().unwrap())];
        vars.extend_from_slice(env);
        paddock_env(
            &terminal_argv(&self.policy, "h", args),
            &vars,
            None,
            Duration::from_secs(60),
        )
    }

    /// Runs `command` in the sandbox; answers the terminal result.
    fn run(&self, command: &str) -> Value {
        let args = json!({"command": command, "timeout": 20}).to_string();
        let run = self.terminal(&args, &[("HOME", self.home.to_str().unwrap())]);
        run.answer()
    }

    fn output(&self, command: &str) -> String {
        self.run(command)["output"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }
}

fn hash(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_default()
}

fn python(code: &str) -> String {
    format!("python3 -c '{}'", code.replace('\'', "'\"'\"'"))
}

#[test]
fn the_workspace_is_writable_and_nothing_else_on_the_host() {
    let h = Host::new();
    let canary = h.dir.path().join("outside.txt");
    let out = h.output(&format!(
        "echo ok > {ws}/inside.txt && cat {ws}/inside.txt; echo x > {c}; echo x > /etc/paddock-canary; echo $?",
        ws = h.workspace.display(),
        c = canary.display()
    ));
    assert!(out.starts_with("ok\n"), "{out}");
    assert_eq!(
        std::fs::read_to_string(h.workspace.join("inside.txt")).unwrap(),
        "ok\n"
    );
    assert!(!canary.exists(), "a file outside the workspace was created");
    assert!(!Path::new("/etc/paddock-canary").exists());
}

#[test]
fn the_hosts_tmp_is_not_the_sandboxes() {
    let h = Host::new();
    let name = format!("/tmp/paddock-hostile-{}", std::process::id());
    let out = h.output(&format!("echo x > {name} && cat {name} && ls /tmp | wc -l"));
    assert!(out.starts_with("x\n"), "{out}");
    assert!(!Path::new(&name).exists(), "the host's /tmp was written");
    // It is the session's own /tmp: still there for the next command of the session.
    assert_eq!(h.output(&format!("cat {name}")), "x\n");
}

#[test]
fn credentials_and_password_hashes_are_masked() {
    let h = Host::new();
    let out = h.output("cat ~/.ssh/id_ed25519 ~/.aws/credentials /etc/shadow 2>&1; ls -a ~/.ssh");
    assert!(!out.contains("SECRET"), "{out}");
    assert!(!out.contains("root:"), "{out}");
}

#[test]
fn sockets_under_run_are_hidden() {
    let h = Host::new();
    let path = PathBuf::from(format!("/run/paddock-hostile-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path).unwrap();
    listener.set_nonblocking(true).unwrap();
    let out = h.output(&python(&format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect('{}'); print('CONNECTED')\nexcept OSError as e: print('refused', e.errno)",
        path.display()
    )));
    assert!(out.starts_with("refused"), "{out}");
    assert!(listener.accept().is_err(), "the host's socket was reached");
    let _ = std::fs::remove_file(&path);
}

#[test]
fn tcp_and_udp_to_the_host_do_not_get_through() {
    let h = Host::new();
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_nonblocking(true).unwrap();
    let out = h.output(&python(&format!(
        "import socket\ns=socket.socket()\ntry:\n s.connect(('127.0.0.1',{})); print('TCP CONNECTED')\nexcept OSError as e: print('tcp refused', e.errno)\nu=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry:\n u.sendto(b'leak',('127.0.0.1',{})); print('udp sent')\nexcept OSError as e: print('udp refused', e.errno)",
        tcp.local_addr().unwrap().port(),
        udp.local_addr().unwrap().port()
    )));
    assert!(out.contains("tcp refused"), "{out}");
    std::thread::sleep(Duration::from_millis(100));
    assert!(tcp.accept().is_err(), "the TCP listener was reached");
    let mut buf = [0u8; 16];
    assert!(
        udp.recv_from(&mut buf).is_err(),
        "a datagram reached the host: {out}"
    );
}

#[test]
fn abstract_unix_sockets_of_the_host_are_unreachable() {
    let h = Host::new();
    let name = format!("paddock-hostile-{}", std::process::id());
    let out = h.output(&python(&format!(
        "import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect('\\0{name}'); print('CONNECTED')\nexcept OSError as e: print('refused', e.errno)"
    )));
    assert!(out.starts_with("refused"), "{out}");
}

#[test]
fn host_processes_are_invisible_and_cannot_be_signalled() {
    let h = Host::new();
    let mut sleeper = std::process::Command::new("sleep")
        .arg("300.6601")
        .env("PADDOCK_HOSTILE_SECRET", "hunter2")
        .spawn()
        .unwrap();
    let pid = sleeper.id();
    let out = h.output(&format!(
        "ls /proc | grep -c '^[0-9]'; cat /proc/{pid}/environ 2>&1; kill -9 {pid} 2>&1; echo done"
    ));
    assert!(!out.contains("hunter2"), "{out}");
    let visible: usize = out
        .lines()
        .next()
        .unwrap_or("999")
        .trim()
        .parse()
        .unwrap_or(999);
    assert!(visible < 10, "the sandbox sees {visible} processes");
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        sleeper.try_wait().unwrap().is_none(),
        "the host process was killed"
    );
    sleeper.kill().unwrap();
    let _ = sleeper.wait();
}

#[test]
fn mount_namespaces_chroot_and_ptrace_are_refused() {
    let h = Host::new();
    let out = h.output(
        "mount -t tmpfs none /mnt 2>&1 && echo MOUNTED; unshare -U true 2>&1 && echo UNSHARED; \
         chroot / true 2>&1 && echo CHROOTED; echo end",
    );
    for escaped in ["MOUNTED", "UNSHARED", "CHROOTED"] {
        assert!(!out.contains(escaped), "{out}");
    }
    let out = h.output(&python(
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         r = libc.ptrace(16, 1, 0, 0)\nprint('ptrace', r, ctypes.get_errno())",
    ));
    assert!(out.starts_with("ptrace -1"), "{out}");
}

#[test]
fn kernel_attack_surface_syscalls_are_refused() {
    let h = Host::new();
    // io_uring_setup, userfaultfd, bpf, keyctl, perf_event_open: each must fail.
    let out = h.output(&python(
        "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n\
         for name, nr in [('io_uring',425),('userfaultfd',323),('bpf',321),('keyctl',250),('perf',298)]:\n\
         \x20   r = libc.syscall(nr, 0, 0, 0, 0, 0)\n\
         \x20   print(name, r, ctypes.get_errno())",
    ));
    for line in out.lines() {
        assert!(line.split_whitespace().nth(1) == Some("-1"), "{out}");
    }
    assert_eq!(out.lines().count(), 5, "{out}");
}

#[test]
fn tiocsti_cannot_inject_into_the_terminal() {
    let h = Host::new();
    let args = json!({"command": python(
        "import fcntl, termios, ctypes\ntry:\n fcntl.ioctl(0, termios.TIOCSTI, b\"x\"); print(\"INJECTED\")\nexcept OSError as e: print(\"refused\", e.errno)"
    ), "pty": true, "timeout": 20})
    .to_string();
    let run = h.terminal(&args, &[]);
    let out = run.json()["output"].as_str().unwrap_or_default().to_owned();
    assert!(out.contains("refused"), "{out}");
    assert!(!out.contains("INJECTED"), "{out}");
}

#[test]
fn capabilities_and_privileges_are_gone() {
    let h = Host::new();
    let out = h.output("grep -E '^(CapEff|CapPrm|CapBnd|NoNewPrivs)' /proc/self/status");
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
    assert!(out.contains("CapBnd:\t0000000000000000"), "{out}");
    assert!(out.contains("NoNewPrivs:\t1"), "{out}");
    // A setuid copy of a shell gains nothing.
    let out = h.output(
        "cp /bin/bash /tmp/sh && chmod u+s /tmp/sh; /tmp/sh -p -c 'grep CapEff /proc/self/status'",
    );
    assert!(out.contains("CapEff:\t0000000000000000"), "{out}");
}

#[test]
fn git_hooks_in_the_workspace_stay_read_only() {
    let h = Host::new();
    let hook = h.workspace.join(".git/hooks/pre-commit");
    let before = hash(&hook);
    let ws = h.workspace.display();
    let out = h.output(&format!(
        "echo 'injected-line' >> {ws}/.git/hooks/pre-commit; echo x > {ws}/.git/hooks/post-checkout; \
         mv {ws}/.git/hooks {ws}/hooks-moved; rm -rf {ws}/.git/hooks; echo end"
    ));
    assert!(out.ends_with("end\n"), "{out:?}");
    assert_eq!(hash(&hook), before, "the hook changed");
    assert!(!h.workspace.join(".git/hooks/post-checkout").exists());
    assert!(!h.workspace.join("hooks-moved").exists());
}

#[test]
fn symlinks_and_hardlinks_do_not_lead_outside() {
    let h = Host::new();
    let target = h.dir.path().join("outside-target.txt");
    std::fs::write(&target, "original").unwrap();
    let ws = h.workspace.display();
    let t = target.display();
    let out = h.output(&format!(
        "ln -s {t} {ws}/link && echo pwned >> {ws}/link; ln {t} {ws}/hard 2>&1; \
         ln -s /etc/passwd {ws}/pw && echo pwned >> {ws}/pw; echo end"
    ));
    assert!(out.ends_with("end\n"), "{out}");
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "original");
    assert!(
        !h.workspace.join("hard").exists(),
        "a hardlink to an outside file was made"
    );
    assert!(
        !std::fs::read_to_string("/etc/passwd")
            .unwrap()
            .contains("pwned")
    );
}

#[test]
fn paddocks_own_state_is_out_of_reach() {
    let h = Host::new();
    // A first command creates the state directory (approvals, other sessions, processes).
    h.output("true");
    let other = h.state().join("sessions/other-session");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(other.join("env.sh"), "export TOKEN=other-session-secret\n").unwrap();
    let out = h.output(&format!(
        "cat {}/env.sh 2>&1; echo x > {}/approvals.txt 2>&1; ls {}",
        other.display(),
        h.state().display(),
        h.state().display()
    ));
    assert!(!out.contains("other-session-secret"), "{out}");
    assert!(!h.state().join("approvals.txt").exists());
}

#[test]
fn daemons_die_with_the_command() {
    let h = Host::new();
    let out = h
        .output("setsid sleep 300.6602 > /dev/null 2>&1 & (nohup sleep 300.6603 &) ; echo started");
    assert_eq!(out, "started\n");
    std::thread::sleep(Duration::from_millis(300));
    for marker in ["300.6602", "300.6603"] {
        assert!(
            survivors(marker).is_empty(),
            "a daemon survived the command: {marker}"
        );
    }
}

#[test]
fn a_timeout_ends_everything_in_the_sandbox() {
    let h = Host::new();
    let args =
        json!({"command": "setsid sleep 300.6606 & sleep 60.6607", "timeout": 1}).to_string();
    let run = h.terminal(&args, &[]);
    assert_eq!(run.json()["exit_code"], json!(124));
    std::thread::sleep(Duration::from_millis(300));
    assert!(survivors("300.6606").is_empty() && survivors("60.6607").is_empty());
}

#[test]
fn the_network_is_off() {
    let h = Host::new();
    let out = h.output("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '; getent hosts localhost >/dev/null && echo resolved-localhost; (exec 3<>/dev/tcp/1.1.1.1/80) 2>&1 | head -1");
    let interfaces: Vec<&str> = out.lines().take_while(|l| !l.contains(' ')).collect();
    assert!(
        interfaces
            .iter()
            .all(|i| *i == "lo" || i.is_empty() || i.contains("resolved")),
        "{out}"
    );
    assert!(
        out.contains("Network is unreachable") || out.contains("connect"),
        "{out}"
    );
}

#[test]
fn fd_exhaustion_and_output_floods_stay_inside() {
    let h = Host::new();
    let out = h.output(&python(
        "import os\nfds=[]\ntry:\n while True: fds.append(os.open('/dev/null', os.O_RDONLY))\nexcept OSError as e: print('stopped at', len(fds), e.errno)",
    ));
    assert!(out.starts_with("stopped at"), "{out}");
    let v = h.run("yes flood | head -c 5000000");
    assert!(v["output"].as_str().unwrap().contains("characters omitted"));
}

#[test]
fn read_only_mode_cannot_write_the_workspace() {
    let h = Host::new();
    std::fs::write(
        &h.policy,
        format!(
            "[backends.local]\nkind = \"local\"\nsandbox = \"read-only\"\nworkspace = \"{}\"\n",
            h.workspace.display()
        ),
    )
    .unwrap();
    let ws = h.workspace.display();
    let out = h.output(&format!(
        "ls {ws} >/dev/null && echo can-read; echo x > {ws}/new.txt; echo end"
    ));
    assert!(out.starts_with("can-read\n"), "{out}");
    assert!(!h.workspace.join("new.txt").exists());
}

#[test]
fn a_missing_kernel_feature_fails_closed() {
    let h = Host::new();
    let args = json!({"command": "echo RAN > /dev/null; echo ran"}).to_string();
    let run = h.terminal(&args, &[("PADDOCK_SANDBOX_SIMULATE_MISSING", "namespaces")]);
    let v = run.json();

    // Through the session's agent the sandbox is made when the agent starts: its failure is
    // the call's error, naming the step; per command (`agent = false`), exit 125 does.
    let out = v["output"].as_str().unwrap_or_default();
    assert!(!out.contains("ran"), "the command ran: {v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        (error.contains("namespaces") && error.contains("the command was not run"))
            || (v["exit_code"] == json!(125) && out.contains("namespaces")),
        "{v}"
    );
    assert_ne!(run.code, 0, "{v}");
}

#[test]
fn the_suite_holds_for_an_ordinary_user_too() {
    if !nix_is_root() {
        return;
    }
    // The engine itself as nobody: its sandbox then starts with a user namespace.
    let h = Host::for_anyone();
    let _ = std::process::Command::new("chown")
        .args(["-R", "65534:65534", h.dir.path().to_str().unwrap()])
        .status();
    let mut perms = std::fs::metadata(h.dir.path()).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(h.dir.path(), perms).unwrap();
    let canary = h.dir.path().join("outside.txt");
    let tcp = TcpListener::bind("127.0.0.1:0").unwrap();
    tcp.set_nonblocking(true).unwrap();
    let command = format!(
        "echo ok > {ws}/inside.txt; echo x > {c}; ls -A $HOME/.ssh | wc -l; \
         (exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo CONNECTED; \
         grep NoNewPrivs /proc/self/status; ls /proc | grep -c '^[0-9]'",
        ws = h.workspace.display(),
        c = canary.display(),
        port = tcp.local_addr().unwrap().port()
    );
    let args = json!({"command": command}).to_string();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env"])
        .arg(format!("PADDOCK_HOME={}", h.state().display()))
        .arg(format!("HOME={}", h.home.display()))
        .arg(paddock_tests::reachable_by_anyone(
            &paddock_tests::paddock_bin(),
        ))
        .args(terminal_argv(&h.policy, "h", &args))
        .current_dir(h.dir.path())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let text = v["output"].as_str().unwrap_or_default();
    assert!(h.workspace.join("inside.txt").exists(), "{v}");
    assert!(!canary.exists(), "{v}");
    assert!(
        text.lines().any(|l| l == "0"),
        "the .ssh directory is visible: {v}"
    );
    assert!(!text.contains("CONNECTED"), "{v}");
    assert!(text.contains("NoNewPrivs:\t1"), "{v}");
    assert!(tcp.accept().is_err());
}

fn nix_is_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
}

/// Host processes whose command line contains `marker`.
fn survivors(marker: &str) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .filter(|pid| {
            let mut cmdline = Vec::new();
            std::fs::File::open(format!("/proc/{pid}/cmdline"))
                .and_then(|mut f| f.read_to_end(&mut cmdline))
                .is_ok()
                && String::from_utf8_lossy(&cmdline)
                    .replace('\0', " ")
                    .contains(marker)
                && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .unwrap_or_default()
                    .contains(") Z")
        })
        .collect()
}
