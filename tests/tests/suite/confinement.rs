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
        "threading",
        "multiprocessing",
        "pathlib",
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
