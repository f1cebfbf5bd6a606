//! `relay = "tcp"` or `"srun"`: the session's agent runs on the job's node, which need not share
//! this machine's file system. `paddock-agent relay-listen` here and `serve --relay-stdio`
//! there hold the holder step's own standard input and output; with `"tcp"` each connection then
//! goes directly to a listener of the node's agent with a per-session token sent over that
//! stream, with `"srun"` every byte goes through the stream (no port on the node, ~44 ms more
//! per message that follows another: srun's I/O has no `TCP_NODELAY`). See the agent's `relay`
//! module and docs/scale-out.md.
//!
//! The holder step is a small bash script on the node:
//! - it makes a directory of its own in the node's `/tmp` (`paddock-<digest>-<nonce>`: a new
//!   one per holder step, so an old step still going away never removes a new one's files);
//! - it reads the agent binary from its input (the relay sends it first: nodes need no copy of
//!   Paddock and always run this engine's build), then starts the agent on it, in the image's
//!   Apptainer instance when there is one;
//! - it removes its directory (and stops the instance) when it ends: at the end of the stream,
//!   at `scancel`, at the job's time limit. Nothing of the session stays on the node.

use std::path::Path;

use crate::agent::{AGENT_DIR_INSIDE, AGENT_PATH_INSIDE, SOCKET_NAME};

/// The node side of a bare session: the agent on the node itself.
const BARE_HOLDER: &str = r#"d=$1; size=$2; mode=$3
umask 077
mkdir -p "$d/run" || exit 1
trap 'rm -rf "$d"' EXIT
trap 'exit 143' TERM INT HUP
head -c "$size" > "$d/paddock-agent" && chmod 0700 "$d/paddock-agent" || exit 1
"$d/paddock-agent" serve --socket "$d/run/agent.sock" --relay-stdio $mode <&0 &
wait $!"#;

/// The node side of a session in an image: the instance binds the copied agent and its
/// directory where the agent is always found inside; the relay's end runs on the node, outside
/// the instance (whose network namespace is empty), and reaches the agent's socket through the
/// bound directory.
fn image_holder() -> String {
    format!(
        r#"d=$1; size=$2; mode=$3; a=$4; n=$5; shift 5
umask 077
mkdir -p "$d/run" || exit 1
trap '"$a" instance stop "$n" >/dev/null 2>&1; rm -rf "$d"' EXIT
trap 'exit 143' TERM INT HUP
head -c "$size" > "$d/paddock-agent" && chmod 0700 "$d/paddock-agent" || exit 1
"$a" instance stop "$n" >/dev/null 2>&1
"$a" "$@" >&2 || exit 1
"$d/paddock-agent" relay-node --socket "$d/run/{SOCKET_NAME}" $mode -- "$a" exec --cleanenv --pwd / "instance://$n" {AGENT_PATH_INSIDE} serve --socket {AGENT_DIR_INSIDE}/{SOCKET_NAME} <&0 &
wait $!"#
    )
}

/// The node directory of one holder step: `/tmp/paddock-<digest>-<nonce>`.
pub fn node_dir(digest: &str) -> String {
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("/tmp/paddock-{digest}-{nonce:x}")
}

/// What the instance binds from the node directory, in place of the engine's agent directory.
pub fn instance_binds(node_dir: &str) -> Vec<String> {
    vec![
        format!("{node_dir}/paddock-agent:{AGENT_PATH_INSIDE}:ro"),
        format!("{node_dir}/run:{AGENT_DIR_INSIDE}"),
    ]
}

/// The whole program run on this machine for a relayed holder step: `relay-listen` offering
/// `socket`, sending `agent` to the node first, around `srun` (`srun_argv`) of the holder.
/// `direct_host`: the node's address, for connections made directly to it (`relay = "tcp"`).
/// `instance`: the apptainer binary, the instance's name and its `instance start` arguments.
pub fn listen_argv(
    agent: &Path,
    agent_size: u64,
    socket: &Path,
    direct_host: Option<&str>,
    srun_argv: Vec<String>,
    node_dir: &str,
    instance: Option<(String, String, Vec<String>)>,
) -> Vec<String> {
    let mut argv = vec![
        agent.display().to_string(),
        "relay-listen".into(),
        "--socket".into(),
        socket.display().to_string(),
        "--send".into(),
        agent.display().to_string(),
    ];
    if let Some(host) = direct_host {
        argv.extend(["--direct-host".into(), host.to_owned()]);
    }
    argv.push("--".into());
    let mode = match (direct_host.is_some(), instance.is_some()) {
        (false, _) => "",
        (true, false) => "--relay-direct",
        (true, true) => "--direct",
    };
    argv.extend(srun_argv);
    match instance {
        None => argv.extend([
            "/bin/bash".into(),
            "-c".into(),
            BARE_HOLDER.into(),
            "paddock-holder".into(),
            node_dir.into(),
            agent_size.to_string(),
            mode.into(),
        ]),
        Some((apptainer, name, start_args)) => {
            argv.extend([
                "/bin/bash".into(),
                "-c".into(),
                image_holder(),
                "paddock-holder".into(),
                node_dir.into(),
                agent_size.to_string(),
                mode.into(),
                apptainer,
                name,
            ]);
            argv.extend(start_args);
        }
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_relay_sends_the_agent_and_runs_the_holder_through_srun() {
        let argv = listen_argv(
            Path::new("/x/paddock-agent"),
            1234,
            Path::new("/state/agents/ab/agent.sock"),
            None,
            vec!["srun".into(), "--jobid=7".into()],
            "/tmp/paddock-ab-1",
            None,
        );
        assert_eq!(
            argv[..9],
            [
                "/x/paddock-agent",
                "relay-listen",
                "--socket",
                "/state/agents/ab/agent.sock",
                "--send",
                "/x/paddock-agent",
                "--",
                "srun",
                "--jobid=7"
            ]
        );
        assert_eq!(argv[argv.len() - 3..], ["/tmp/paddock-ab-1", "1234", ""]);
        assert!(argv.iter().any(|a| a.contains("--relay-stdio")));
        let direct = listen_argv(
            Path::new("/x/paddock-agent"),
            1234,
            Path::new("/s/agent.sock"),
            Some("10.0.0.7"),
            vec!["srun".into()],
            "/tmp/d",
            None,
        );
        assert!(
            direct
                .windows(2)
                .any(|w| w == ["--direct-host", "10.0.0.7"])
        );
        assert_eq!(direct.last().unwrap(), "--relay-direct");
    }

    #[test]
    fn holder_directories_are_new_for_every_step() {
        let a = node_dir("ab");
        std::thread::sleep(std::time::Duration::from_millis(1));
        assert_ne!(a, node_dir("ab"));
        assert!(a.starts_with("/tmp/paddock-ab-"));
    }

    #[test]
    fn the_bare_holder_script_is_valid_bash() {
        for script in [BARE_HOLDER.to_owned(), image_holder()] {
            let status = std::process::Command::new("bash")
                .args(["-n", "-c", &script])
                .status()
                .unwrap();
            assert!(status.success(), "{script}");
        }
    }
}
