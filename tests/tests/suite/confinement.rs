//! Negative tests: what a hostile script must not reach.

use paddock_tests::run_script;
use serde_json::json;

fn outcome(code: &str) -> serde_json::Value {
    run_script(code, &["--timeout", "20"]).json()
}

fn error_of(code: &str) -> String {
    let v = outcome(&format!(
        "try:\n{}\n    r = 'NOT BLOCKED'\nexcept BaseException as e:\n    r = type(e).__name__ + ': ' + str(e)\nr",
        indent(code)
    ));
    v["result"].as_str().unwrap_or_default().to_owned()
}

fn indent(code: &str) -> String {
    code.lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn files_cannot_be_opened() {
    let e = error_of("open('/etc/passwd').read()");
    assert!(e.starts_with("PermissionError"), "{e}");
    let e = error_of("import io\nio.open('/etc/passwd')");
    assert!(e.starts_with("PermissionError"), "{e}");
    let e = error_of("import os\nos.listdir('/')");
    assert!(e.starts_with("PermissionError"), "{e}");
}

#[test]
fn environment_is_not_readable() {
    let e = error_of("import os\nos.environ['HOME']");
    assert!(e.starts_with("PermissionError"), "{e}");
    let e = error_of("import os\nos.getenv('PATH')");
    assert!(e.starts_with("PermissionError"), "{e}");
}

#[test]
fn network_processes_and_ffi_do_not_exist() {
    for module in [
        "socket",
        "subprocess",
        "ctypes",
        "multiprocessing",
        "tempfile",
        "shutil",
    ] {
        let e = error_of(&format!("import {module}"));
        assert!(
            e.starts_with("ModuleNotFoundError")
                && e.contains("not available in the Paddock sandbox"),
            "{module}: {e}"
        );
    }
    let e = error_of("import os\nos.system('id')");
    assert!(e.starts_with("PermissionError"), "{e}");
}

#[test]
fn removing_the_import_blocker_still_finds_nothing_on_disk() {
    // A script that strips the runtime's guards still has no path to the host: there are no
    // path finders and the process itself is confined.
    let v = outcome(
        "import sys\nsys.meta_path[:] = [f for f in sys.meta_path if 'Blocker' not in repr(f)]\n\
         sys.path[:] = ['/usr/lib/python3.11', '/usr/lib/python3/dist-packages']\n\
         try:\n    import socket\n    r = 'imported'\nexcept ImportError as e:\n    r = 'ImportError'\nr",
    );
    assert_eq!(v["result"], json!("ImportError"), "{v}");
}

#[test]
fn recursion_is_a_clean_error() {
    let v = outcome("def f(n):\n    return f(n + 1)\nf(0)");
    assert_eq!(v["error_code"], json!("codemode:script_error"));
    assert!(
        v["error"].as_str().unwrap().starts_with("RecursionError"),
        "{v}"
    );
}

/// `paddock run` with `PADDOCK_SANDBOX_SIMULATE_MISSING` (and an optional policy).
fn run_without(feature: &str, policy: Option<&str>) -> serde_json::Value {
    let mut args = vec!["run", "--timeout", "20"];
    if let Some(policy) = policy {
        args.extend(["--policy", policy]);
    }
    args.push("-");
    paddock_tests::paddock_env(
        &args,
        &[("PADDOCK_SANDBOX_SIMULATE_MISSING", feature)],
        Some(b"'ran'"),
        std::time::Duration::from_secs(60),
    )
    .json()
}

#[test]
fn a_missing_kernel_feature_stops_code_mode_and_names_the_feature() {
    for feature in ["namespaces", "landlock", "seccomp"] {
        let v = run_without(feature, None);
        assert_eq!(v["ok"], json!(false), "{feature}: {v}");
        assert_eq!(v["error_code"], json!("codemode:sandbox_failed"), "{v}");
        let error = v["error"].as_str().unwrap();
        assert!(
            error.contains(&format!("the kernel feature '{feature}' is missing")),
            "{error}"
        );
        assert_ne!(v["result"], json!("ran"), "{v}");
    }
}

#[test]
fn an_operator_may_accept_a_named_degraded_mode_but_never_without_seccomp() {
    let dir = tempfile::tempdir().unwrap();
    let policy = paddock_tests::write_file(
        &dir,
        "p.toml",
        "[codemode]\ndegraded = [\"namespaces\", \"landlock\"]\n",
    );
    assert_eq!(
        run_without("namespaces", Some(&policy))["result"],
        json!("ran")
    );
    assert_eq!(
        run_without("landlock", Some(&policy))["result"],
        json!("ran")
    );
    // seccomp cannot be listed at all.
    let bad = paddock_tests::write_file(&dir, "bad.toml", "[codemode]\ndegraded = [\"seccomp\"]\n");
    let check = paddock_tests::paddock(&["policy", "check", &bad]);
    assert_eq!(check.code, 2, "{}", check.stderr);
    assert!(
        check.stderr.contains("codemode.degraded"),
        "{}",
        check.stderr
    );
}

#[test]
fn scripts_run_for_an_ordinary_user_in_a_namespace_of_their_own() {
    let is_root = std::fs::read_to_string("/proc/self/status")
        .unwrap_or_default()
        .lines()
        .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"));
    if !is_root {
        // Already an ordinary user: the other tests of this suite are the proof.
        return;
    }
    let home = tempfile::tempdir().unwrap();
    let _ = std::process::Command::new("chown")
        .args(["65534:65534", home.path().to_str().unwrap()])
        .status();
    let out = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "env"])
        .arg(format!("PADDOCK_HOME={}", home.path().display()))
        .arg(paddock_tests::reachable_by_anyone(&paddock_tests::paddock_bin()))
        .args(["run", "--timeout", "20", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .and_then(|mut child| {
            use std::io::Write;
            child
                .stdin
                .take()
                .unwrap()
                .write_all(b"try:\n    open('/etc/passwd')\n    r = 'opened'\nexcept PermissionError:\n    r = 'refused'\nr")?;
            child.wait_with_output()
        })
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(v["result"], json!("refused"), "{v}");
}
