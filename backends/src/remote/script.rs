//! The shell scripts a remote backend (docker, ssh, apptainer) runs on its target.
//!
//! The target is another machine or a container, so the engine cannot see its processes. Every
//! command therefore carries a run id in its environment (`PADDOCK_RUN=<id>`, inherited by
//! everything it starts, including daemons that call `setsid`), and ending "the whole tree" means
//! signalling every process on the target whose environment holds that id. The scan uses bash
//! builtins only: no `ps`, no `grep`, nothing the image might lack.

/// Scans `/proc` and signals every process (but this shell) started under run id `$__p_run`.
/// `$1` is the signal name.
const REAP_FUNCTION: &str = r#"__paddock_reap() {
    local d pid v
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        [ "$pid" = "$$" ] && continue
        while IFS= read -r -d '' v; do
            if [ "$v" = "PADDOCK_RUN=$__p_run" ]; then kill -"$1" "$pid" 2>/dev/null; break; fi
        done 2>/dev/null < "$d/environ"
    done
}
"#;

/// Set in a command script's environment (by the agent link, for a caller that listens to the
/// output as it comes): the script keeps stderr apart instead of merging it into stdout.
pub const SPLIT_STDERR_VAR: &str = "PADDOCK_SPLIT_STDERR";

/// `env PADDOCK_RUN=ID bash -c COMMAND_SCRIPT paddock ROOT SESSION RUN COMMAND WORKDIR HOME [K=V]...`
///
/// Like the local wrapper (`shell::WRAPPER`): restores the session's exports, functions,
/// aliases and cwd, runs the command, saves the state on any exit; a command's own variables
/// (`PADDOCK_CALL_ENV`) win over the session's and stay out of its state, as there. Differences: stderr is merged
/// into stdout at the source (one ordered stream through any transport; kept apart when
/// [`SPLIT_STDERR_VAR`] is set, for the agent's stderr frames), the state directory is
/// created on the target, the state is renamed into place here (the engine cannot reach it),
/// and leftovers of the command are ended when it finishes.
pub fn command_script() -> String {
    format!(
        r#"__p_split=${{PADDOCK_SPLIT_STDERR:-}}; unset PADDOCK_SPLIT_STDERR; [ -n "$__p_split" ] || exec 2>&1; unset __p_split
# Under the agent, the state is written under run-tagged names the agent renames, and the agent
# ends the run's leftovers: no mv, no /proc scan in bash.
__p_agent=${{PADDOCK_AGENT_COMMIT:-}}; unset PADDOCK_AGENT_COMMIT
# A terminal on the far side starts 0x0 and raw when the client has no terminal itself (ssh -tt,
# docker tty): give it the local backend's size and modes (^D is end of input).
if [ -t 0 ]; then stty sane rows 40 cols 120 2>/dev/null; fi
__p_root=$1; __p_session=$2; __p_run=$3; __p_cmd=$4; __p_workdir=$5; __p_home=$6
shift 6
__p_start=$PWD
case $__p_root in /*) ;; *) __p_root=$__p_start/$__p_root ;; esac
[ -n "$__p_home" ] || __p_home=$__p_start
for __p_kv in "$@"; do export "$__p_kv"; done
unset __p_kv; __p_call=${{PADDOCK_CALL_ENV-}}; unset PADDOCK_CALL_ENV; for __p_n in $__p_call; do eval "__p_c_$__p_n=\${{$__p_n}}"; unset "$__p_n"; done
# Where the environment holds the agent, a run outside it (a background command) commits its
# state with `paddock-agent commit-state` (a merge, as the agent commits its own runs).
__p_commit=${{PADDOCK_STATE_COMMIT:-}}; unset PADDOCK_STATE_COMMIT
case $__p_commit in '$HOME/'*) __p_commit=$HOME/${{__p_commit#'$HOME/'}} ;; esac
[ -n "$__p_commit" ] && [ -x "$__p_commit" ] || __p_commit=
__p_state=$__p_root/sessions/$__p_session
[ -d "$__p_state" ] || mkdir -p "$__p_state" || {{ echo "paddock: cannot create the session state directory $__p_state"; exit 125; }}
if [ -f "$__p_state/env.sh" ]; then . "$__p_state/env.sh" >/dev/null 2>&1; fi; for __p_n in $__p_call; do if [ -n "${{!__p_n+set}}" ]; then eval "__p_s_$__p_n=\${{$__p_n}}"; fi; done
export PADDOCK_RUN=$__p_run
if [ -n "$__p_workdir" ]; then
    builtin cd -- "$__p_workdir" 2>/dev/null || {{ echo "paddock: cannot change into workdir $__p_workdir"; exit 126; }}
elif [ -f "$__p_state/cwd" ]; then
    IFS= read -r __p_cwd < "$__p_state/cwd"
    builtin cd -- "$__p_cwd" 2>/dev/null || {{ echo "paddock: the session's directory $__p_cwd no longer exists; starting in $__p_home"; builtin cd -- "$__p_home"; }}
else
    builtin cd -- "$__p_home" 2>/dev/null || builtin cd /
fi
{REAP_FUNCTION}__paddock_save() {{
    __p_status=$?
    export -n PADDOCK_RUN; for __p_n in $__p_call; do unset "$__p_n"; eval "if [ -n \"\${{__p_s_$__p_n+set}}\" ]; then export $__p_n=\"\$__p_s_$__p_n\"; fi"; done
    if [ -n "$__p_agent" ] || [ -n "$__p_commit" ]; then
        {{ export -p; declare -f; alias -p; }} > "$__p_state/env.sh.$__p_run" 2>/dev/null
        if [ -z "$__p_workdir" ]; then pwd -P > "$__p_state/cwd.$__p_run" 2>/dev/null; fi
    fi
    if [ -n "$__p_agent" ]; then
        return $__p_status
    fi
    if [ -n "$__p_commit" ]; then
        "$__p_commit" commit-state "$__p_state" "$__p_run" >/dev/null 2>&1 || {{
            mv -f "$__p_state/env.sh.$__p_run" "$__p_state/env.sh" 2>/dev/null
            mv -f "$__p_state/cwd.$__p_run" "$__p_state/cwd" 2>/dev/null
            rm -f "$__p_state/env.sh.start.$__p_run" "$__p_state/cwd.start.$__p_run"
        }}
    else
        {{ export -p; declare -f; alias -p; }} > "$__p_state/env.sh.$$" 2>/dev/null && mv -f "$__p_state/env.sh.$$" "$__p_state/env.sh"
        if [ -z "$__p_workdir" ]; then
            pwd -P > "$__p_state/cwd.$$" 2>/dev/null && mv -f "$__p_state/cwd.$$" "$__p_state/cwd"
        fi
    fi
    __paddock_reap KILL
    return $__p_status
}}
trap __paddock_save EXIT
shopt -s expand_aliases
unset __p_cwd
# Under the agent (or with its commit-state), the state this command starts from too: only
# what the command changed is applied to the session's state (overlapping commands keep each
# other's changes).
if [ -n "$__p_agent" ] || [ -n "$__p_commit" ]; then
    {{ export -p; declare -f; alias -p; }} > "$__p_state/env.sh.start.$__p_run" 2>/dev/null
    if [ -z "$__p_workdir" ]; then pwd -P > "$__p_state/cwd.start.$__p_run" 2>/dev/null; fi
fi; for __p_n in $__p_call; do eval "export $__p_n=\"\$__p_c_$__p_n\""; done; unset __p_n
eval "$__p_cmd""#
    )
}

/// The parts of a wrapper run's argv (`env PADDOCK_RUN=ID bash -c COMMAND_SCRIPT paddock ROOT
/// SESSION RUN ...`) the agent needs: the run id and the session's state directory on the target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrapperRun {
    pub run_id: String,
    pub state_dir: String,
}

/// Recognises a wrapper run's argv.
pub fn wrapper_run(argv: &[String]) -> Option<WrapperRun> {
    match argv {
        [
            env,
            assignment,
            bash,
            dash_c,
            script,
            _name,
            root,
            session,
            run,
            ..,
        ] if env == "env"
            && bash == "bash"
            && dash_c == "-c"
            && *script == command_script()
            && assignment.strip_prefix("PADDOCK_RUN=") == Some(run.as_str()) =>
        {
            Some(WrapperRun {
                run_id: run.clone(),
                state_dir: format!("{root}/sessions/{session}"),
            })
        }
        _ => None,
    }
}

/// `bash -c KILL_SCRIPT paddock RUN`: TERM to the run's processes, a grace, then KILL.
pub fn kill_script() -> String {
    format!(
        r#"__p_run=$1
{REAP_FUNCTION}__paddock_reap TERM
sleep 0.5
__paddock_reap KILL
exit 0"#
    )
}

/// `bash -c SIGNAL_SCRIPT paddock RUN_ID SIGNAL`: `SIGNAL` (a name: INT, TERM...) to every
/// process of the run on the target.
pub fn signal_script() -> String {
    format!(
        r#"__p_run=$1
{REAP_FUNCTION}__paddock_reap "${{2#SIG}}"
exit 0"#
    )
}

/// `bash -c SIGNAL_SCRIPT paddock RUN_ID SIGNAL` on the target.
pub fn signal_argv(run_id: &str, signal: &str) -> Vec<String> {
    vec![
        "bash".to_owned(),
        "-c".to_owned(),
        signal_script(),
        "paddock".to_owned(),
        run_id.to_owned(),
        signal.to_owned(),
    ]
}

/// `bash -c FILES_SCRIPT paddock DIR MAX_FILES INLINE_BYTES`: every regular file under DIR as
/// one JSON object per line (path, size, sha256, base64 content), read by the engine to bring
/// python_execute's artifacts back. Python is on the target anyway (python_execute needs it).
pub const COLLECT_FILES_SCRIPT: &str = r#"exec python3 - "$@" <<'PADDOCK_EOF'
import base64, hashlib, json, os, sys
root, max_files, max_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
count = 0
for dirpath, dirnames, filenames in os.walk(root):
    dirnames.sort()
    for name in sorted(filenames):
        path = os.path.join(dirpath, name)
        if not os.path.isfile(path) or os.path.islink(path):
            continue
        count += 1
        if count > max_files:
            sys.exit(0)
        with open(path, "rb") as f:
            data = f.read()
        entry = {"path": os.path.relpath(path, root), "size": len(data),
                 "sha256": hashlib.sha256(data).hexdigest()}
        if len(data) <= max_bytes:
            entry["content_base64"] = base64.b64encode(data).decode()
        print(json.dumps(entry))
PADDOCK_EOF"#;

/// Quotes `word` for a POSIX shell (the remote command line of ssh is one string).
pub fn shell_quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        return word.to_owned();
    }
    format!("'{}'", word.replace('\'', r#"'"'"'"#))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoting_survives_a_real_shell() {
        let words = [
            "plain",
            "",
            "it's",
            "a b",
            "$(id)",
            "`x`",
            "new\nline",
            "\\",
        ];
        let line = words
            .iter()
            .map(|w| shell_quote(w))
            .collect::<Vec<_>>()
            .join(" ");
        let out = std::process::Command::new("bash")
            .arg("-c")
            .arg(format!("printf '%s\\0' {line}"))
            .output()
            .unwrap();
        let got: Vec<&str> = std::str::from_utf8(&out.stdout)
            .unwrap()
            .split_terminator('\0')
            .collect();
        assert_eq!(got, words);
    }

    #[test]
    fn scripts_parse_in_bash() {
        for script in [
            command_script(),
            kill_script(),
            COLLECT_FILES_SCRIPT.to_owned(),
        ] {
            let status = std::process::Command::new("bash")
                .args(["-n", "-c", &script])
                .status()
                .unwrap();
            assert!(status.success(), "{script}");
        }
    }
}
