//! Committing a session's shell state: three-way merge of what a finished command saved, so
//! that commands of one session that run at the same time keep each other's changes. The
//! engine commits local runs with it, the agent the runs of its environment.
//!
//! Each command's shell writes the state it started from (after restoring the session's) and
//! the state it ended with, both as `export -p; declare -f; alias -p` prints them. What the
//! command changed is the difference between the two; only that is applied to the session's
//! current state, which another command may have saved meanwhile. A command that changed
//! nothing (a `ls` that ends after a `cd` of a parallel call) writes nothing back.
//!
//! The text is bash's own output, read entry by entry: `declare -FLAGS NAME[=VALUE]` and
//! `alias NAME=VALUE` lines (values quoted by bash, newlines inside quotes kept), and function
//! definitions (`NAME () ` then the body up to a `}` line that ends it). Anything else makes
//! the merge give up and keep the command's own state whole, as before merges existed.

use std::collections::{HashMap, HashSet};
use std::path::Path;

/// The variable that lists a command's own variables for [`WRAPPER`].
pub const CALL_ENV: &str = "PADDOCK_CALL_ENV";

/// `bash -c WRAPPER paddock STATE_DIR COMMAND WORKDIR TAG`: the new state is written as
/// `env.sh.TAG` and `cwd.TAG` (a tag rather than `$$`: inside the sandbox's PID namespace every
/// shell is PID 2), the state the command started from as `env.sh.start.TAG` and
/// `cwd.start.TAG` (builtins only, after the restore: what [`commit_state`] merges against).
///
/// `PADDOCK_CALL_ENV` (space-separated names, checked by the engine) lists variables of this
/// command only: their values are set aside before the session's state is restored, put back
/// over it after the start state is saved, and at the end each name gets the session's value
/// again (or none), so that they win over the session's exports and never become part of its
/// state. Everything stays on the lines it had: bash names the line of the `eval` (25) in its
/// messages, and the live shell's script mirrors it.
pub const WRAPPER: &str = r#"__paddock_state=$1; __paddock_cmd=$2; __paddock_workdir=$3; __paddock_tag=${4:-$$}; __paddock_call=${PADDOCK_CALL_ENV-}; unset PADDOCK_CALL_ENV; for __paddock_n in $__paddock_call; do eval "__paddock_c_$__paddock_n=\${$__paddock_n}"; unset "$__paddock_n"; done
if [ -f "$__paddock_state/env.sh" ]; then . "$__paddock_state/env.sh" >/dev/null 2>&1; fi; for __paddock_n in $__paddock_call; do if [ -n "${!__paddock_n+set}" ]; then eval "__paddock_s_$__paddock_n=\${$__paddock_n}"; fi; done
if [ -n "$__paddock_workdir" ]; then
    builtin cd -- "$__paddock_workdir" || { echo "paddock: cannot change into workdir $__paddock_workdir" >&2; exit 126; }
elif [ -f "$__paddock_state/cwd" ]; then
    IFS= read -r __paddock_cwd < "$__paddock_state/cwd"
    builtin cd -- "$__paddock_cwd" 2>/dev/null || { echo "paddock: the session's directory $__paddock_cwd no longer exists; starting in ${HOME:-/}" >&2; builtin cd -- "${HOME:-/}"; }
fi
__paddock_save() {
    __paddock_status=$?
    export -n PADDOCK_RUN 2>/dev/null; for __paddock_n in $__paddock_call; do unset "$__paddock_n"; eval "if [ -n \"\${__paddock_s_$__paddock_n+set}\" ]; then export $__paddock_n=\"\$__paddock_s_$__paddock_n\"; fi"; done
    { export -p; declare -f; alias -p; } > "$__paddock_state/env.sh.$__paddock_tag" 2>/dev/null
    if [ -z "$__paddock_workdir" ]; then
        pwd -P > "$__paddock_state/cwd.$__paddock_tag" 2>/dev/null
    fi
    return $__paddock_status
}
trap __paddock_save EXIT
shopt -s expand_aliases
unset __paddock_cwd
{ export -p; declare -f; alias -p; } > "$__paddock_state/env.sh.start.$__paddock_tag" 2>/dev/null
if [ -z "$__paddock_workdir" ]; then
    pwd -P > "$__paddock_state/cwd.start.$__paddock_tag" 2>/dev/null
fi; for __paddock_n in $__paddock_call; do eval "export $__paddock_n=\"\$__paddock_c_$__paddock_n\""; done; unset __paddock_n
eval "$__paddock_cmd""#;

/// Puts the state a finished shell (run with `tag`) wrote in `state_dir` (`env.sh.TAG`,
/// `cwd.TAG`) into place ([`commit_file`]), under the session's lock.
pub fn commit_state(state_dir: &Path, tag: &str) {
    let _lock = lock_dir(state_dir);
    for name in ["env.sh", "cwd"] {
        let _ = commit_file(
            &state_dir.join(format!("{name}.{tag}")),
            &state_dir.join(name),
        );
    }
}

/// Serialises the commits of one session (a lock on its directory, held while the value
/// lives; `None` when the directory cannot be locked, and the commit goes on unlocked).
pub fn lock_dir(dir: &Path) -> Option<std::fs::File> {
    let dir = std::fs::File::open(dir).ok()?;
    dir.lock().ok()?;
    Some(dir)
}

/// Puts `written` (`TARGET.TAG`, what a finished command saved) into `target`. When the
/// command also saved the state it started from (`TARGET.start.TAG`), only what it changed is
/// applied to the current `target` ([`merge`]; for `cwd`, the directory if it changed): commands
/// of one session that overlap keep each other's changes, and one that changed nothing writes
/// nothing back. Without a start, or as the session's first state, `written` is renamed over
/// `target`. A missing `written` (a shell killed before it saved) is no error. The caller holds
/// [`lock_dir`]; the file lands by rename (atomic for the next command that reads it).
pub fn commit_file(written: &Path, target: &Path) -> std::io::Result<()> {
    let start = start_of(written, target);
    let base = start.as_ref().and_then(|s| std::fs::read_to_string(s).ok());
    if let Some(start) = &start {
        let _ = std::fs::remove_file(start);
    }
    let current = std::fs::read_to_string(target);
    let (Some(base), Ok(current)) = (base, current) else {
        return match std::fs::rename(written, target) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            other => other,
        };
    };
    let new = match std::fs::read_to_string(written) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        other => other?,
    };
    let merged = merged_state(target, &base, &new, &current);
    if merged == current {
        return std::fs::remove_file(written);
    }
    std::fs::write(written, merged)?;
    std::fs::rename(written, target)
}

/// Applies what a command changed (`base` to `new`, texts a live shell handed over rather than
/// files) to `target` as [`commit_file`] does, writing through `TARGET.TAG` and a rename; the
/// caller holds [`lock_dir`]. A missing or unreadable `target` becomes `new`. Answers whether
/// `target` changed.
pub fn commit_text(target: &Path, base: &str, new: &str, tag: &str) -> std::io::Result<bool> {
    let merged = match std::fs::read_to_string(target) {
        Ok(current) => {
            let merged = merged_state(target, base, new, &current);
            if merged == current {
                return Ok(false);
            }
            merged
        }
        Err(_) => new.to_owned(),
    };
    let mut written = target.as_os_str().to_owned();
    written.push(format!(".{tag}"));
    std::fs::write(&written, merged)?;
    std::fs::rename(&written, target)?;
    Ok(true)
}

/// `current` with the change from `base` to `new`: a merge of entries for `env.sh`, the new
/// directory for `cwd` when the command changed it.
fn merged_state(target: &Path, base: &str, new: &str, current: &str) -> String {
    if target.file_name().is_some_and(|n| n == "cwd") {
        if new == base {
            current.to_owned()
        } else {
            new.to_owned()
        }
    } else {
        merge(base, new, current)
    }
}

/// `TARGET.start.TAG` for `written` = `TARGET.TAG`.
fn start_of(written: &Path, target: &Path) -> Option<std::path::PathBuf> {
    let written = written.to_str()?;
    let target = target.to_str()?;
    let tag = written.strip_prefix(target)?.strip_prefix('.')?;
    Some(format!("{target}.start.{tag}").into())
}

/// What an entry defines; its place in the merged text follows this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Variable,
    Function,
    /// `declare -fx NAME`: a function's export, after the function itself.
    FunctionExport,
    Alias,
}

const KINDS: [Kind; 4] = [
    Kind::Variable,
    Kind::Function,
    Kind::FunctionExport,
    Kind::Alias,
];

/// Variables that differ between any two commands by design and are no change of state.
const PER_COMMAND: &[&str] = &["PADDOCK_RUN"];

#[derive(Debug, Clone, Copy, PartialEq)]
struct Entry<'a> {
    kind: Kind,
    name: &'a str,
    /// The entry's whole text, its final newline included.
    text: &'a str,
}

type Key<'a> = (Kind, &'a str);

/// The session's new state: `current` with what the command changed from `base` to `new`.
pub fn merge<'a>(base: &'a str, new: &'a str, current: &'a str) -> String {
    if base == new {
        return current.to_owned();
    }
    let (Some(base), Some(new_entries), Some(current)) = (parse(base), parse(new), parse(current))
    else {
        return new.to_owned();
    };
    let index = |entries: &[Entry<'a>]| -> HashMap<Key<'a>, &'a str> {
        entries
            .iter()
            .filter(|e| !(e.kind == Kind::Variable && PER_COMMAND.contains(&e.name)))
            .map(|e| ((e.kind, e.name), e.text))
            .collect()
    };
    let before = index(&base);
    let after = index(&new_entries);
    let changed = |key: &Key<'_>| before.get(key) != after.get(key);
    let mut out = String::with_capacity(current.iter().map(|e| e.text.len()).sum());
    let mut push = |text: &str| {
        out.push_str(text);
        if !text.ends_with('\n') {
            out.push('\n');
        }
    };
    for kind in KINDS {
        let mut seen: HashSet<Key<'_>> = HashSet::new();
        for entry in current.iter().filter(|e| e.kind == kind) {
            let key = (entry.kind, entry.name);
            if !seen.insert(key) {
                continue;
            }
            if !changed(&key) {
                push(entry.text);
            } else if let Some(text) = after.get(&key) {
                push(text);
            }
            // Changed and gone from `new`: the command unset it.
        }
        for entry in new_entries.iter().filter(|e| e.kind == kind) {
            let key = (entry.kind, entry.name);
            if seen.insert(key) && changed(&key) {
                push(entry.text);
            }
        }
    }
    out
}

/// The entries of bash's state text, or `None` when it is not in bash's own format.
fn parse(text: &str) -> Option<Vec<Entry<'_>>> {
    let mut entries = Vec::new();
    let mut pos = 0;
    while pos < text.len() {
        let rest = &text[pos..];
        let line = first_line(rest);
        let (kind, name, len) = if let Some(declared) = line.strip_prefix("declare ") {
            let (flags, after) = declared.split_once(' ')?;
            if !flags.starts_with('-') {
                return None;
            }
            let name = after
                .split(['=', '\n'])
                .next()
                .unwrap_or_default()
                .trim_end();
            let kind = if flags.contains('f') {
                Kind::FunctionExport
            } else {
                Kind::Variable
            };
            (kind, name, quoted_line_len(rest)?)
        } else if let Some(alias) = line.strip_prefix("alias ") {
            let (name, _) = alias.split_once('=')?;
            (Kind::Alias, name, quoted_line_len(rest)?)
        } else if let Some(name) = function_header(line) {
            (Kind::Function, name, function_len(rest)?)
        } else {
            return None;
        };
        if name.is_empty() || name.contains(char::is_whitespace) {
            return None;
        }
        entries.push(Entry {
            kind,
            name,
            text: &rest[..len],
        });
        pos += len;
    }
    Some(entries)
}

/// The first line of `text`, its newline included.
fn first_line(text: &str) -> &str {
    text.find('\n').map_or(text, |i| &text[..=i])
}

/// `NAME () ` (bash's header of a function definition): the name.
fn function_header(line: &str) -> Option<&str> {
    let line = line.strip_suffix('\n').unwrap_or(line);
    line.strip_suffix(" () ")
}

/// Whether `text` begins with a new entry (or is the end).
fn starts_entry(text: &str) -> bool {
    text.is_empty()
        || text.starts_with("declare -")
        || text.starts_with("alias ")
        || function_header(first_line(text)).is_some()
}

/// The length of a function definition: up to a `}` line (or `} > FILE`) that the end or
/// another entry follows (a here-document in the body may hold a `}` line of its own).
fn function_len(text: &str) -> Option<usize> {
    let mut end = first_line(text).len();
    while end < text.len() {
        let line = first_line(&text[end..]);
        end += line.len();
        // `}`, or `} > FILE` for a function with redirections.
        let closes = line.trim_end_matches('\n') == "}" || line.starts_with("} ");
        if closes && starts_entry(&text[end..]) {
            return Some(end);
        }
    }
    None
}

/// The length of one `declare`/`alias` entry: up to a newline outside quotes (bash quotes
/// values with `"..."`, `'...'` with `'\''`, or `$'...'`).
fn quoted_line_len(text: &str) -> Option<usize> {
    #[derive(PartialEq)]
    enum Quote {
        None,
        Single,
        Double,
        AnsiC,
    }
    let mut quote = Quote::None;
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        match quote {
            Quote::None => match byte {
                b'\n' => return Some(i + 1),
                b'\\' => i += 1,
                b'\'' => quote = Quote::Single,
                b'"' => quote = Quote::Double,
                b'$' if bytes.get(i + 1) == Some(&b'\'') => {
                    quote = Quote::AnsiC;
                    i += 1;
                }
                _ => {}
            },
            Quote::Single => {
                if byte == b'\'' {
                    quote = Quote::None;
                }
            }
            Quote::Double | Quote::AnsiC => match byte {
                b'\\' => i += 1,
                b'"' if quote == Quote::Double => quote = Quote::None,
                b'\'' if quote == Quote::AnsiC => quote = Quote::None,
                _ => {}
            },
        }
        i += 1;
    }
    (quote == Quote::None).then_some(text.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What bash 5.2 printed for a session with a multi-line variable, an exported function
    /// whose here-document holds a `}` line, a function with a redirection, and an alias with
    /// a quote in it.
    const STATE: &str = "declare -x FOO=$'a\\nb \"q\" $x \\\\ ok'\n\
declare -x HOME=\"/root\"\n\
declare -x OLDPWD\n\
declare -ax ARR=([0]=\"1\" [1]=\"two\")\n\
f () \n\
{ \n\
    echo \"}\";\n\
    cat <<EOF\n\
}\n\
EOF\n\
\n\
}\n\
declare -fx f\n\
g () \n\
{ \n\
    echo\n\
} > /tmp/x\n\
h () \n\
{ \n\
    :\n\
}\n\
alias ll='ls -l '\\''x'\\'''\n";

    fn names(text: &str) -> Vec<(Kind, String)> {
        parse(text)
            .unwrap()
            .iter()
            .map(|e| (e.kind, e.name.to_owned()))
            .collect()
    }

    #[test]
    fn bash_state_parses_entry_by_entry_and_whole() {
        let entries = parse(STATE).unwrap();
        let whole: String = entries.iter().map(|e| e.text).collect();
        assert_eq!(whole, STATE);
        assert_eq!(
            names(STATE),
            vec![
                (Kind::Variable, "FOO".into()),
                (Kind::Variable, "HOME".into()),
                (Kind::Variable, "OLDPWD".into()),
                (Kind::Variable, "ARR".into()),
                (Kind::Function, "f".into()),
                (Kind::FunctionExport, "f".into()),
                (Kind::Function, "g".into()),
                (Kind::Function, "h".into()),
                (Kind::Alias, "ll".into()),
            ]
        );
    }

    #[test]
    fn quoted_newlines_stay_inside_their_entry() {
        let text = "declare -x A=\"x\ndeclare -x B=1\"\nalias a='p\nalias b=q'\n";
        assert_eq!(
            names(text),
            vec![(Kind::Variable, "A".into()), (Kind::Alias, "a".into())]
        );
    }

    #[test]
    fn changes_of_both_commands_survive() {
        let base = "declare -x A=\"1\"\ndeclare -x PWD=\"/w\"\n";
        // This command exported B; another one, meanwhile, changed A and left.
        let new = "declare -x A=\"1\"\ndeclare -x B=\"2\"\ndeclare -x PWD=\"/w\"\n";
        let current = "declare -x A=\"9\"\ndeclare -x PWD=\"/w/sub\"\n";
        assert_eq!(
            merge(base, new, current),
            "declare -x A=\"9\"\ndeclare -x PWD=\"/w/sub\"\ndeclare -x B=\"2\"\n"
        );
    }

    #[test]
    fn an_unchanged_command_writes_nothing_back() {
        let current = "declare -x A=\"9\"\n";
        assert_eq!(merge(STATE, STATE, current), current);
    }

    #[test]
    fn unset_and_redefined_entries_follow_the_command() {
        let base = "declare -x A=\"1\"\nf () \n{ \n    :\n}\nalias x='y'\n";
        let new = "f () \n{ \n    echo new\n}\n";
        let current = "declare -x A=\"1\"\ndeclare -x C=\"3\"\nf () \n{ \n    :\n}\nalias x='y'\n";
        assert_eq!(
            merge(base, new, current),
            "declare -x C=\"3\"\nf () \n{ \n    echo new\n}\n"
        );
    }

    #[test]
    fn the_run_id_is_no_change() {
        let base = "declare -x A=\"1\"\ndeclare -x PADDOCK_RUN=\"t-1\"\n";
        let new = "declare -x A=\"2\"\n";
        let current = "declare -x A=\"1\"\ndeclare -x Z=\"0\"\n";
        assert_eq!(
            merge(base, new, current),
            "declare -x A=\"2\"\ndeclare -x Z=\"0\"\n"
        );
    }

    #[test]
    fn commit_state_merges_renames_and_cleans_up() {
        let dir = tempfile::tempdir().unwrap();
        let at = |name: &str| dir.path().join(name);
        // The first state of a session is renamed into place.
        std::fs::write(at("env.sh.t1"), "declare -x A=\"1\"\n").unwrap();
        std::fs::write(at("env.sh.start.t1"), "").unwrap();
        std::fs::write(at("cwd.t1"), "/w\n").unwrap();
        commit_state(dir.path(), "t1");
        assert_eq!(
            std::fs::read_to_string(at("env.sh")).unwrap(),
            "declare -x A=\"1\"\n"
        );
        // Two overlapping commands: t3 ends first (cd, B), t2 (started before, exported C,
        // stayed in /w) ends last.
        for (tag, env, cwd) in [
            ("t2", "declare -x A=\"1\"\ndeclare -x C=\"3\"\n", "/w\n"),
            ("t3", "declare -x A=\"1\"\ndeclare -x B=\"2\"\n", "/w/sub\n"),
        ] {
            std::fs::write(at(&format!("env.sh.start.{tag}")), "declare -x A=\"1\"\n").unwrap();
            std::fs::write(at(&format!("cwd.start.{tag}")), "/w\n").unwrap();
            std::fs::write(at(&format!("env.sh.{tag}")), env).unwrap();
            std::fs::write(at(&format!("cwd.{tag}")), cwd).unwrap();
        }
        commit_state(dir.path(), "t3");
        commit_state(dir.path(), "t2");
        assert_eq!(
            std::fs::read_to_string(at("env.sh")).unwrap(),
            "declare -x A=\"1\"\ndeclare -x B=\"2\"\ndeclare -x C=\"3\"\n"
        );
        assert_eq!(std::fs::read_to_string(at("cwd")).unwrap(), "/w/sub\n");
        let mut left: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, vec!["cwd", "env.sh"]);
        // A shell killed before it saved: nothing to commit, no error.
        assert!(commit_file(&at("env.sh.t9"), &at("env.sh")).is_ok());
    }

    #[test]
    fn text_of_another_shape_keeps_the_command_state_whole() {
        let new = "export A=1\n";
        assert_eq!(merge("", new, "declare -x B=\"2\"\n"), new);
        assert_eq!(parse("declare -x A=\"unterminated\n"), None);
    }
}
