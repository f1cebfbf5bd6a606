//! Every policy shipped in `policies/` loads and passes `paddock policy check`; broken ones fail
//! with file:line:key.

use paddock_tests::{paddock, temp_file, write_file};

fn policies_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies")
}

#[test]
fn every_shipped_policy_checks() {
    let mut files: Vec<String> = std::fs::read_dir(policies_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    files.sort();
    for required in [
        "default.toml",
        "strict.toml",
        "docker.toml",
        "ssh.toml",
        "hpc-apptainer.toml",
        "hpc-slurm.toml",
    ] {
        assert!(
            files.iter().any(|f| f.ends_with(required)),
            "policies/{required} is missing"
        );
    }
    let mut args = vec!["policy", "check"];
    args.extend(files.iter().map(String::as_str));
    let run = paddock(&args);
    assert_eq!(run.code, 0, "{}", run.stderr);
    // And each runs a script (environment backends are not started for this).
    for file in &files {
        let (_dir, s) = temp_file("s.py", "'ok'");
        let run = paddock(&["run", "--policy", file, &s]);
        assert_eq!(
            run.json()["result"],
            serde_json::json!("ok"),
            "{file}: {}",
            run.stderr
        );
    }
}

#[test]
fn broken_policies_fail_with_file_line_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        (
            "unknown_key.toml",
            "[codemode]\nenabled = true\nmax_memroy_mb = 5\n",
            ":3: codemode.max_memroy_mb: unknown field",
        ),
        (
            "wrong_type.toml",
            "[codemode]\ntimeout_seconds = \"soon\"\n",
            ":2: codemode.timeout_seconds:",
        ),
        (
            "bad_glob.toml",
            "[tools]\n\ndeny = [\"a[\"]\n",
            ":3: tools.deny: bad glob",
        ),
        ("malformed.toml", "[codemode\nenabled = true\n", ":1:"),
        (
            "zero_memory.toml",
            "[codemode]\nmax_memory_mb = 0\n",
            ":2: codemode.max_memory_mb: must be",
        ),
        (
            "unknown_capability.toml",
            "[backends.box]\nkind = \"docker\"\nimage = \"x\"\ndrop_capabilities = [\"SYS_ADMIN\"]\n",
            ":4: backends.box.drop_capabilities: `SYS_ADMIN` is not one of the capabilities",
        ),
        (
            "bad_runtime.toml",
            "[backends.box]\nkind = \"docker\"\nimage = \"x\"\nruntime = \"/usr/bin/runsc\"\n",
            ":4: backends.box.runtime: `/usr/bin/runsc` is not a runtime name",
        ),
    ];
    for (name, text, expected) in cases {
        let path = write_file(&dir, name, text);
        let run = paddock(&["policy", "check", &path]);
        assert_eq!(run.code, 2, "{name}");
        assert!(
            run.stderr.contains(&format!("{path}{expected}")),
            "{name}: {}",
            run.stderr
        );
    }
}
