//! Every shipped policy parses to the same meaning under the typed backend sections
//! (`paddock_backends::registry`) as under the flat section struct they replaced: the struct of
//! 35 optional keys below is that old parse, kept as the witness.

#![expect(clippy::unwrap_used, clippy::panic, reason = "test helpers")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use paddock_engine::policy::Policy;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use toml::Spanned;

/// The flat `[backends.NAME]` struct of every kind, as it was before the typed sections.
#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
struct FlatBackend {
    /// `local`, `docker`, `ssh`, `apptainer` (`singularity` is an alias), `slurm`.
    kind: Spanned<String>,
    /// local: `none`, `read-only` or `workspace-write` (the default). A policy that declares
    /// no `local` backend gets one in the workspace-write sandbox over the current directory,
    /// with no network (`policies/default.toml`'s); `sandbox = "none"` runs commands unconfined.
    sandbox: Option<Spanned<String>>,
    /// local, docker: the directory commands may change.
    workspace: Option<Spanned<String>>,
    /// docker, apptainer: the image.
    image: Option<Spanned<String>>,
    /// docker: `none` (default) or a network name; apptainer: `none` or `host`.
    network: Option<Spanned<String>>,
    memory_mb: Option<Spanned<u64>>,
    cpus: Option<Spanned<f64>>,
    /// ssh: the host, user, port and key.
    host: Option<Spanned<String>>,
    user: Option<Spanned<String>>,
    port: Option<Spanned<u16>>,
    identity_file: Option<Spanned<String>>,
    /// ssh: a known_hosts file, and how unknown host keys are treated: `yes` (default),
    /// `accept-new` or `no`.
    known_hosts_file: Option<Spanned<String>>,
    host_key_checking: Option<Spanned<String>>,
    connect_timeout_seconds: Option<Spanned<u64>>,
    /// docker: processes allowed in the container (default 512); the older name of
    /// `max_processes`.
    pids_limit: Option<Spanned<u64>>,
    /// local, docker, apptainer: processes and threads of a whole session (local: a pids
    /// cgroup; docker: `--pids-limit`; apptainer: `--pids-limit`).
    max_processes: Option<Spanned<u64>>,
    /// local: what one workspace-write command may add to the workspace (RLIMIT_FSIZE, and a
    /// watcher that ends the command past it).
    workspace_write_mb: Option<Spanned<u64>>,
    /// docker: a read-only root filesystem (/tmp stays writable).
    read_only: Option<Spanned<bool>>,
    /// docker: size of the /tmp tmpfs (default 512); local: the session's private /tmp as a
    /// tmpfs of this size.
    tmp_size_mb: Option<Spanned<u64>>,
    /// docker: the daemon socket (default: `DOCKER_HOST` or /var/run/docker.sock).
    socket: Option<Spanned<String>>,
    /// apptainer: bind mounts `src:dst[:ro]`.
    #[serde(default)]
    binds: Vec<Spanned<String>>,
    /// apptainer: the apptainer or singularity program (default: found on PATH).
    binary: Option<Spanned<String>>,
    /// apptainer: a writable tmpfs over the image (default true), or an overlay image/dir.
    writable_tmpfs: Option<Spanned<bool>>,
    overlay: Option<Spanned<String>>,
    /// Working directory commands start in.
    workdir: Option<Spanned<String>>,
    /// docker, apptainer, ssh, sandboxed local: commands go through the in-environment agent
    /// (default true); false: one `docker exec`/`apptainer exec`/ssh/sandbox per command.
    agent: Option<Spanned<bool>>,
    /// docker: containers kept ready, agent running, for new sessions (default 0).
    warm: Option<Spanned<u64>>,
    /// docker (keys added after the typed sections, witnessed here too): the OCI runtime
    /// (`runsc`), and capabilities the container goes without.
    runtime: Option<Spanned<String>>,
    drop_capabilities: Option<Spanned<Vec<String>>>,
    /// slurm: the job's partition, time limit (`--time`: `MM`, `HH:MM:SS`, `D-HH:MM`),
    /// generic resources (`--gres`), account, and more `salloc` options as given.
    partition: Option<Spanned<String>>,
    time_limit: Option<Spanned<String>>,
    gres: Option<Spanned<String>>,
    account: Option<Spanned<String>>,
    #[serde(default)]
    extra_args: Vec<Spanned<String>>,
    /// slurm: how long a session's job may wait in the queue before it is cancelled and the
    /// command fails (default 300).
    queue_timeout_seconds: Option<Spanned<u64>>,
    /// slurm: the directory of `salloc`, `srun`, `scontrol`, `squeue`, `scancel`, `sinfo`
    /// (default: PATH).
    slurm_bin_dir: Option<Spanned<String>>,
    /// slurm: how the engine reaches the session's agent on the job's node: `"none"` (the
    /// default: through the file system, the engine on the node or sharing its `/tmp` and
    /// state directory), `"tcp"` (for an engine on a login node and jobs on other nodes: the
    /// holder step's standard input and output carry a per-session token, each connection goes
    /// to a listener of the node's agent) or `"srun"` (every byte through the holder step's
    /// standard input and output: no port on the node, slower).
    relay: Option<Spanned<String>>,
    /// Environment variables set for every command.
    #[serde(default)]
    env: std::collections::BTreeMap<String, String>,
}

/// The old parse of a policy's backends: the flat struct, the rest of the file ignored.
#[derive(Deserialize)]
struct FlatPolicy {
    #[serde(default)]
    backends: BTreeMap<String, FlatBackend>,
}

/// A section's keys that are set, as JSON: absent, empty lists and empty tables dropped, and
/// `singularity` said as the kind it names.
fn meaning(section: Value) -> BTreeMap<String, Value> {
    let Value::Object(keys) = section else {
        panic!("a section is a table: {section}");
    };
    keys.into_iter()
        .filter(|(_, v)| match v {
            Value::Null => false,
            Value::Array(a) => !a.is_empty(),
            Value::Object(o) => !o.is_empty(),
            _ => true,
        })
        .map(|(k, v)| match (k.as_str(), &v) {
            ("kind", Value::String(s)) if s == "singularity" => (k, Value::from("apptainer")),
            _ => (k, v),
        })
        .collect()
}

/// Compares the two parses of `text`; the kinds of its sections.
fn old_and_new(text: &str, name: &str) -> Vec<&'static str> {
    let new = Policy::parse(text, name).unwrap_or_else(|e| panic!("{name}: {e}"));
    let old: FlatPolicy = toml::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(
        old.backends.keys().collect::<Vec<_>>(),
        new.backends.keys().collect::<Vec<_>>(),
        "{name}"
    );
    for (backend, flat) in &old.backends {
        let was = meaning(serde_json::to_value(flat).unwrap());
        let is = meaning(serde_json::to_value(&new.backends[backend]).unwrap());
        pretty_assertions::assert_eq!(was, is, "{name}: backends.{backend}");
    }
    new.backends.values().map(|b| b.kind()).collect()
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The fenced `toml` blocks of a Markdown file that declare backends.
fn toml_blocks(markdown: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut current: Option<String> = None;
    for line in markdown.lines() {
        match &mut current {
            None if line.trim_start().starts_with("```toml") => current = Some(String::new()),
            Some(block) if line.trim_start().starts_with("```") => {
                if block.contains("[backends.") {
                    blocks.push(std::mem::take(block));
                }
                current = None;
            }
            Some(block) => {
                block.push_str(line);
                block.push('\n');
            }
            None => {}
        }
    }
    blocks
}

#[test]
fn shipped_policy_files_mean_what_they_meant() {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo().join("policies"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    files.sort();
    // What scripts/test-services.sh prints (a copy), and the live one when services run.
    files.push(repo().join("engine/tests/fixtures/test-services-policy.toml"));
    if let Some(live) = std::env::var_os("PADDOCK_TEST_POLICY") {
        files.push(PathBuf::from(live));
    }
    let mut kinds = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).unwrap();
        kinds.extend(old_and_new(&text, &file.display().to_string()));
    }
    // Every kind is among them.
    assert_eq!(
        kinds,
        paddock_engine::policy::BackendConfig::kinds()
            .into_iter()
            .filter(|k| *k != "singularity")
            .collect(),
        "{files:?}"
    );
}

#[test]
fn policies_in_the_documentation_mean_what_they_meant() {
    let mut checked = Vec::new();
    for doc in ["README.md", "docs/scale-out.md", "ARCHITECTURE.md"] {
        let text = std::fs::read_to_string(repo().join(doc)).unwrap();
        for (i, block) in toml_blocks(&text).into_iter().enumerate() {
            checked.extend(old_and_new(&block, &format!("{doc} block {i}")));
        }
    }
    assert!(!checked.is_empty(), "no documented backend sections found");
}

/// The typed sections refuse what the flat struct let through only to refuse it later, and
/// take the same keys for each kind: spot checks of both directions.
#[test]
fn a_key_of_another_kind_is_refused_naming_the_kinds_keys() {
    let e = Policy::parse(
        "[backends.d]\nkind = \"docker\"\nimage = \"i\"\npartition = \"p\"\n",
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("p.toml:4: backends.d.partition: does not apply to a docker backend (its keys: image, network,"),
        "{e}"
    );
    let e = Policy::parse(
        "[backends.s]\nkind = \"singularity\"\nimage = \"x.sif\"\nimagee = \"y\"\n",
        "p.toml",
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("does not apply to a apptainer backend"), "{e}");
    assert!(e.ends_with("did you mean `image`?"), "{e}");
}
