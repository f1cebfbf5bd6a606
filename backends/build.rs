//! Builds the static in-environment agent (`paddock-agent`) so that this crate can carry it:
//! the docker, ssh, apptainer and slurm backends place it in their environments, and a `paddock`
//! built from a checkout (`cargo build --release`, `pip install ./python`) then needs no second
//! step. The agent is compiled by a nested cargo with its own target directory
//! (`<target>/agent-static`, shared with scripts/build-agent.sh): the outer cargo holds the lock
//! of the main one. Its only flag of its own is crt-static, which must not reach the rest of the
//! workspace.
//!
//! Where it cannot be built (another architecture, no static C library, `PADDOCK_EMBED_AGENT=0`)
//! the build goes on without it and says why in a warning; the agent backends then refuse to
//! start with that reason, unless `PADDOCK_AGENT_BIN` or a `paddock-agent` beside the binary
//! gives them one.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The target the agent is built for: any x86-64 Linux, whatever its C library.
const TRIPLE: &str = "x86_64-unknown-linux-gnu";

/// What the nested cargo may see of the outer one's environment: the toolchain, the registry's
/// settings, the jobserver (so that both share the same CPU budget). Nothing that changes how
/// code is compiled (RUSTFLAGS, wrappers such as clippy's) passes.
const PASSED: &[&str] = &[
    "PATH",
    "HOME",
    "TMPDIR",
    "CARGO_HOME",
    "RUSTUP_HOME",
    "RUSTUP_TOOLCHAIN",
    "RUSTC",
    "CARGO_MAKEFLAGS",
    "http_proxy",
    "https_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "no_proxy",
    "NO_PROXY",
];

fn main() -> Result<(), String> {
    let out_dir = PathBuf::from(var("OUT_DIR")?);
    let manifest_dir = PathBuf::from(var("CARGO_MANIFEST_DIR")?);
    let workspace = manifest_dir
        .parent()
        .ok_or("backends/ has no parent directory")?
        .to_path_buf();
    for input in [
        "agent/src",
        "agent/Cargo.toml",
        "files/src",
        "files/Cargo.toml",
        "Cargo.lock",
    ] {
        println!("cargo:rerun-if-changed={}", workspace.join(input).display());
    }
    println!("cargo:rerun-if-env-changed=PADDOCK_EMBED_AGENT");

    let (agent, missing) = match build_agent(&workspace, &out_dir) {
        Ok(path) => (
            std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?,
            String::new(),
        ),
        Err(reason) => {
            println!("cargo:warning=paddock-agent is not embedded: {reason}");
            (Vec::new(), reason)
        }
    };
    std::fs::write(out_dir.join("paddock-agent"), &agent)
        .map_err(|e| format!("{}: {e}", out_dir.display()))?;
    println!(
        "cargo:rustc-env=PADDOCK_EMBEDDED_AGENT_ID={:016x}",
        fnv1a(&agent)
    );
    println!(
        "cargo:rustc-env=PADDOCK_EMBEDDED_AGENT_MISSING={}",
        missing.replace('\n', " ")
    );
    Ok(())
}

/// Builds the agent; answers its path, or why it could not be built.
fn build_agent(workspace: &Path, out_dir: &Path) -> Result<PathBuf, String> {
    if std::env::var("PADDOCK_EMBED_AGENT").is_ok_and(|v| v == "0") {
        return Err("PADDOCK_EMBED_AGENT=0 left it out".into());
    }
    let arch = var("CARGO_CFG_TARGET_ARCH")?;
    let os = var("CARGO_CFG_TARGET_OS")?;
    if arch != "x86_64" || os != "linux" {
        return Err(format!(
            "the agent is built for x86-64 Linux only, not {arch}-{os}"
        ));
    }
    // OUT_DIR is <target>[/<triple>]/<profile>/build/<crate>-<hash>/out.
    let target_dir = out_dir
        .ancestors()
        .nth(4)
        .ok_or("OUT_DIR is not inside a target directory")?
        .join("agent-static");
    let cargo = var("CARGO")?;
    let mut command = Command::new(&cargo);
    command.env_clear();
    for name in PASSED {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    let output = command
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS",
            "-C target-feature=+crt-static",
        )
        .current_dir(workspace)
        .args(["build", "--release", "--ignore-rust-version", "--locked"])
        .args(["-p", "paddock-agent", "--target", TRIPLE, "--target-dir"])
        .arg(&target_dir)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {cargo}: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(6).collect();
        return Err(format!(
            "its static build failed ({}): {}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        ));
    }
    Ok(target_dir
        .join(TRIPLE)
        .join("release")
        .join("paddock-agent"))
}

fn var(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("cargo did not set {name}"))
}

/// FNV-1a over the agent's bytes: names its extracted copy, so that a rebuilt agent never
/// reuses an old one's file.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
