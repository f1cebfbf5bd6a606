//! Property tests of policy files (`paddock_engine::policy::Policy::parse`): an operator's TOML is
//! untrusted input, and a mistake in it must come back as `FILE:LINE: key: message`.
//!
//! - arbitrary text (random characters and TOML-like token soup) never panics, and every error
//!   names the file, a line of the text, a key and a message;
//! - mutations of the shipped `policies/*.toml` (lines deleted, duplicated, swapped, values
//!   replaced by other types, unknown keys and tables inserted, keys misspelt, the text cut)
//!   never panic and answer the same well-formed errors; a value replaced by one of another
//!   type is refused on its own line;
//! - generated well-formed policies (`[backends.X]` of every kind with the keys that kind takes,
//!   `[codemode]`, `[tools]`, `[toolsets]`, `[approval]` and its rules, `[routes]`,
//!   `[mcp.servers.X]`, `[processes]`, `[sessions]`) parse, with the backends they declare;
//! - one mistake injected into such a policy is refused on the line where it was made.
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::collections::BTreeMap;
use std::sync::LazyLock;

use paddock_engine::policy::{Policy, PolicyError, RULE_PACKS};
use paddock_engine::registry::toolsets::{RETIRED_TOOLS, Toolsets};
use proptest::prelude::*;
use proptest::sample::{Index, select, subsequence};
use proptest::test_runner::TestCaseError;
use toml::Value;

#[path = "../../agent/tests/common/proptest_config.rs"]
mod proptest_config;
use proptest_config::config;

const NAME: &str = "p.toml";

/// The shipped policies, `(file name, text)`.
static SHIPPED: LazyLock<Vec<(String, String)>> = LazyLock::new(|| {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies");
    let mut files: Vec<(String, String)> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .map(|p| {
            let text = std::fs::read_to_string(&p).unwrap();
            (p.file_name().unwrap().to_string_lossy().into_owned(), text)
        })
        .collect();
    files.sort();
    assert!(files.len() >= 5, "policies/ has {} files", files.len());
    files
});

/// Checks that a refusal of `text` names the file, a line of `text`, a key and a message, and
/// returns its line.
fn check_error(text: &str, err: &PolicyError) -> Result<usize, TestCaseError> {
    let shown = err.to_string();
    let PolicyError::Invalid {
        path,
        line,
        key,
        message,
    } = err
    else {
        return Err(TestCaseError::fail(format!(
            "parsing text gave a read error: {shown}"
        )));
    };
    prop_assert_eq!(path, NAME);
    prop_assert_eq!(&shown, &format!("{NAME}:{line}: {key}: {message}"));
    let lines = text.matches('\n').count() + 1;
    prop_assert!(
        (1..=lines).contains(line),
        "line {} of a {}-line text: {}",
        line,
        lines,
        shown
    );
    prop_assert!(!key.trim().is_empty(), "no key: {:?}", shown);
    prop_assert!(!message.trim().is_empty(), "no message: {:?}", shown);
    Ok(*line)
}

/// Parses `text`; an error must be well-formed. Returns the error's line.
fn parse_checked(text: &str) -> Result<Option<usize>, TestCaseError> {
    match Policy::parse(text, NAME) {
        Ok(_) => Ok(None),
        Err(err) => check_error(text, &err).map(Some),
    }
}

// ---------------------------------------------------------------------------------------------
// Arbitrary text

fn any_text() -> impl Strategy<Value = String> {
    proptest::collection::vec(any::<char>(), 0..200).prop_map(String::from_iter)
}

/// TOML-looking text: tokens of the policy language in any order.
fn token_soup() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        8 => select(vec![
            "[", "]", "[[", "]]", "=", " = ", "\"", "'", "\"\"\"", "'''", "\n", "\r\n", "\r", "\t",
            " ", ".", ",", "{", "}", "#", "\\", "\\u", "\\U0010FFFF", "é", "\u{0}", "\u{7f}",
            "\u{feff}", "🦀", "codemode", "tools", "toolsets", "approval", "backends", "routes",
            "mcp", "servers", "processes", "sessions", "rules", "kind", "local", "docker", "ssh",
            "apptainer", "slurm", "image", "host", "sandbox", "network", "agent", "warm", "cpus",
            "allow", "deny", "mode", "preset", "terminal", "timeout_seconds", "true", "false",
            "0", "-1", "1.5", "1e999", "nan", "inf", "-inf", "0x1F", "1979-05-27T07:32:00Z",
            "9223372036854775808", "\"*\"", "[\"*\"]", "[]", "{}",
        ]).prop_map(str::to_owned),
        1 => "[a-z_]{1,8}",
        1 => proptest::collection::vec(any::<char>(), 1..4).prop_map(String::from_iter),
    ];
    proptest::collection::vec(token, 0..80).prop_map(|t| t.concat())
}

// ---------------------------------------------------------------------------------------------
// Mutations of the shipped policies

/// A value of any TOML type, written as TOML.
fn any_value() -> impl Strategy<Value = String> {
    prop_oneof![
        select(vec![
            "\"\"",
            "\"x\"",
            "'literal'",
            "\"\"\"multi\nline\"\"\"",
            "0",
            "-1",
            "42",
            "9223372036854775807",
            "-9223372036854775808",
            "1.5",
            "-0.0",
            "1e300",
            "inf",
            "-inf",
            "nan",
            "true",
            "false",
            "[]",
            "[1, \"a\"]",
            "[\"*\"]",
            "[[1], [2]]",
            "{}",
            "{ a = 1 }",
            "{ kind = \"local\" }",
            "1979-05-27T07:32:00Z",
            "1979-05-27",
            "07:32:00",
        ])
        .prop_map(str::to_owned),
        any::<i64>().prop_map(|n| Value::Integer(n).to_string()),
        any::<f64>().prop_map(|f| Value::Float(f).to_string()),
        any::<bool>().prop_map(|b| Value::Boolean(b).to_string()),
        proptest::collection::vec(any::<char>(), 0..12)
            .prop_map(|c| Value::String(String::from_iter(c)).to_string()),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    Delete(Index),
    Duplicate(Index),
    Swap(Index, Index),
    /// The value of a `key = value` line replaced.
    ReplaceValue(Index, String),
    /// A key no section has, inserted before a line.
    InsertKey(Index, String, String),
    /// A table header inserted before a line.
    InsertTable(Index, String),
    /// A letter of a key dropped, doubled or changed.
    Misspell(Index, Index, char),
    InsertRaw(Index, String),
    /// The text cut after this many characters.
    Truncate(Index),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let table = select(vec![
        "[codemode]",
        "[codemod]",
        "[tools]",
        "[approval]",
        "[backends]",
        "[backends.local]",
        "[backends.hpc]",
        "[backends.sandbox]",
        "[backends.x.env]",
        "[routes]",
        "[mcp]",
        "[mcp.servers.m]",
        "[[approval.rules]]",
        "[[backends]]",
        "[processes]",
        "[sessions]",
        "[toolsets]",
        "[unknown]",
        "[codemode.x]",
    ])
    .prop_map(str::to_owned);
    prop_oneof![
        1 => any::<Index>().prop_map(Mutation::Delete),
        1 => any::<Index>().prop_map(Mutation::Duplicate),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Swap(a, b)),
        3 => (any::<Index>(), any_value()).prop_map(|(i, v)| Mutation::ReplaceValue(i, v)),
        1 => (any::<Index>(), "[a-z_]{1,12}", any_value())
            .prop_map(|(i, k, v)| Mutation::InsertKey(i, k, v)),
        1 => (any::<Index>(), table).prop_map(|(i, t)| Mutation::InsertTable(i, t)),
        1 => (any::<Index>(), any::<Index>(), prop::char::range('a', 'z'))
            .prop_map(|(i, at, c)| Mutation::Misspell(i, at, c)),
        1 => (any::<Index>(), token_soup()).prop_map(|(i, t)| Mutation::InsertRaw(i, t)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
    ]
}

/// Applies `m` to `lines`; returns the line (0-based) it changed when it changed one in place.
fn apply(lines: &mut Vec<String>, m: &Mutation) -> Option<usize> {
    let pick = |i: &Index, lines: &Vec<String>| i.index(lines.len().max(1));
    match m {
        Mutation::Delete(i) => {
            if !lines.is_empty() {
                lines.remove(pick(i, lines));
            }
            None
        }
        Mutation::Duplicate(i) => {
            if !lines.is_empty() {
                let at = pick(i, lines);
                lines.insert(at, lines[at].clone());
            }
            None
        }
        Mutation::Swap(a, b) => {
            if !lines.is_empty() {
                let (a, b) = (pick(a, lines), pick(b, lines));
                lines.swap(a, b);
            }
            None
        }
        Mutation::ReplaceValue(i, value) => {
            // The n-th `key = value` line.
            let assignments: Vec<usize> = (0..lines.len())
                .filter(|&n| is_assignment(&lines[n]))
                .collect();
            if assignments.is_empty() {
                return None;
            }
            let at = assignments[i.index(assignments.len())];
            let key = lines[at]
                .split('=')
                .next()
                .unwrap_or("")
                .trim_end()
                .to_owned();
            lines[at] = format!("{key} = {value}");
            Some(at)
        }
        Mutation::InsertKey(i, key, value) => {
            let at = i.index(lines.len() + 1);
            lines.insert(at, format!("zz_{key} = {value}"));
            None
        }
        Mutation::InsertTable(i, table) => {
            let at = i.index(lines.len() + 1);
            lines.insert(at, table.clone());
            None
        }
        Mutation::Misspell(i, at, c) => {
            let assignments: Vec<usize> = (0..lines.len())
                .filter(|&n| is_assignment(&lines[n]))
                .collect();
            if assignments.is_empty() {
                return None;
            }
            let line = assignments[i.index(assignments.len())];
            let (key, rest) = lines[line].split_once('=').unwrap_or(("", ""));
            let mut key: Vec<char> = key.trim_end().chars().collect();
            let pos = at.index(key.len().max(1));
            match c {
                'a'..='h' if key.len() > 1 => {
                    key.remove(pos);
                }
                'i'..='p' => key.insert(pos, key.get(pos).copied().unwrap_or(*c)),
                _ => {
                    if let Some(k) = key.get_mut(pos) {
                        *k = *c;
                    }
                }
            }
            lines[line] = format!("{} ={rest}", String::from_iter(key));
            None
        }
        Mutation::InsertRaw(i, raw) => {
            let at = i.index(lines.len() + 1);
            lines.insert(at, raw.clone());
            None
        }
        Mutation::Truncate(i) => {
            let text = lines.join("\n");
            let keep = i.index(text.chars().count() + 1);
            let cut: String = text.chars().take(keep).collect();
            *lines = cut.split('\n').map(str::to_owned).collect();
            None
        }
    }
}

fn is_assignment(line: &str) -> bool {
    let t = line.trim_start();
    !t.starts_with('#') && !t.starts_with('[') && t.contains('=')
}

/// The TOML type of the value of a `key = value` line, when the line parses alone.
fn value_type(line: &str) -> Option<&'static str> {
    let table: toml::Table = toml::from_str(line).ok()?;
    table.values().next().map(Value::type_str)
}

// ---------------------------------------------------------------------------------------------
// Well-formed policies

/// A string value: any characters (TOML escapes them).
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<char>(), 0..16).prop_map(String::from_iter),
        "[a-zA-Z0-9/._:-]{1,16}",
    ]
}

fn string() -> BoxedStrategy<Value> {
    text().prop_map(Value::String).boxed()
}

fn one_of(options: &[&'static str]) -> BoxedStrategy<Value> {
    select(options.to_vec())
        .prop_map(|s| Value::String(s.to_owned()))
        .boxed()
}

fn int(range: std::ops::RangeInclusive<i64>) -> BoxedStrategy<Value> {
    range.prop_map(Value::Integer).boxed()
}

fn boolean() -> BoxedStrategy<Value> {
    any::<bool>().prop_map(Value::Boolean).boxed()
}

fn list(item: BoxedStrategy<Value>, max: usize) -> BoxedStrategy<Value> {
    proptest::collection::vec(item, 0..max)
        .prop_map(Value::Array)
        .boxed()
}

fn string_map() -> BoxedStrategy<Value> {
    proptest::collection::btree_map(text(), text(), 0..3)
        .prop_map(|m| Value::Table(m.into_iter().map(|(k, v)| (k, Value::String(v))).collect()))
        .boxed()
}

type Entry = (String, Value);

/// `key = value`, present or not.
fn opt(key: &'static str, value: BoxedStrategy<Value>) -> BoxedStrategy<Option<Entry>> {
    proptest::option::of(value.prop_map(move |v| (key.to_owned(), v))).boxed()
}

fn req(key: &'static str, value: BoxedStrategy<Value>) -> BoxedStrategy<Option<Entry>> {
    value.prop_map(move |v| Some((key.to_owned(), v))).boxed()
}

fn entries(parts: Vec<BoxedStrategy<Option<Entry>>>) -> BoxedStrategy<Vec<Entry>> {
    parts
        .prop_map(|v| v.into_iter().flatten().collect())
        .boxed()
}

fn get<'a>(entries: &'a [Entry], key: &str) -> Option<&'a Value> {
    entries.iter().find(|(k, _)| k == key).map(|(_, v)| v)
}

fn without(entries: &mut Vec<Entry>, key: &str) {
    entries.retain(|(k, _)| k != key);
}

/// Glob-safe tool name patterns that name no retired tool.
fn glob() -> BoxedStrategy<Value> {
    prop_oneof![
        select(vec![
            "*",
            "wait",
            "terminal",
            "process",
            "python_*",
            "current_datetime",
            "mcp_*",
            "mcp_*__search",
            "run_tools_script",
            "?ait",
        ])
        .prop_map(str::to_owned),
        "[a-z_*?]{1,10}",
    ]
    .prop_filter("a retired tool name is refused", |g| {
        !RETIRED_TOOLS.iter().any(|(n, _)| n == g)
    })
    .prop_map(Value::String)
    .boxed()
}

/// Backend kinds and the keys each one takes (besides `kind` and `env`, which all take).
const KINDS: &[(&str, &[&str])] = &[
    (
        "local",
        &[
            "sandbox",
            "workspace",
            "workdir",
            "network",
            "agent",
            "max_processes",
            "cpus",
            "memory_mb",
            "tmp_size_mb",
            "workspace_write_mb",
        ],
    ),
    (
        "docker",
        &[
            "image",
            "network",
            "memory_mb",
            "cpus",
            "workspace",
            "workdir",
            "pids_limit",
            "max_processes",
            "read_only",
            "tmp_size_mb",
            "socket",
            "agent",
            "warm",
        ],
    ),
    (
        "ssh",
        &[
            "host",
            "user",
            "port",
            "identity_file",
            "workdir",
            "known_hosts_file",
            "host_key_checking",
            "connect_timeout_seconds",
            "agent",
        ],
    ),
    (
        "apptainer",
        &[
            "image",
            "network",
            "binds",
            "workdir",
            "memory_mb",
            "cpus",
            "max_processes",
            "binary",
            "writable_tmpfs",
            "overlay",
            "agent",
        ],
    ),
    (
        "slurm",
        &[
            "partition",
            "time_limit",
            "cpus",
            "memory_mb",
            "gres",
            "account",
            "extra_args",
            "queue_timeout_seconds",
            "slurm_bin_dir",
            "relay",
            "workdir",
            "agent",
            "image",
            "network",
            "binds",
            "binary",
            "writable_tmpfs",
            "overlay",
        ],
    ),
];

/// Every backend key, with a value of the right type.
fn backend_key_value(key: &str) -> Value {
    match key {
        "memory_mb"
        | "pids_limit"
        | "max_processes"
        | "workspace_write_mb"
        | "tmp_size_mb"
        | "warm"
        | "connect_timeout_seconds"
        | "queue_timeout_seconds"
        | "port" => Value::Integer(2),
        "cpus" => Value::Float(2.0),
        "read_only" | "writable_tmpfs" | "agent" => Value::Boolean(true),
        "binds" | "extra_args" => Value::Array(vec![Value::String("/a:/a".into())]),
        "network" => Value::String("none".into()),
        _ => Value::String("x".into()),
    }
}

const ALL_BACKEND_KEYS: &[&str] = &[
    "sandbox",
    "workspace",
    "image",
    "network",
    "memory_mb",
    "cpus",
    "host",
    "user",
    "port",
    "identity_file",
    "binds",
    "workdir",
    "known_hosts_file",
    "host_key_checking",
    "connect_timeout_seconds",
    "pids_limit",
    "max_processes",
    "workspace_write_mb",
    "read_only",
    "tmp_size_mb",
    "socket",
    "binary",
    "writable_tmpfs",
    "overlay",
    "agent",
    "warm",
    "partition",
    "time_limit",
    "gres",
    "account",
    "extra_args",
    "queue_timeout_seconds",
    "slurm_bin_dir",
    "relay",
];

fn backend_entries() -> BoxedStrategy<Vec<Entry>> {
    let env = || opt("env", string_map());
    let local = entries(vec![
        req("kind", one_of(&["local"])),
        opt("sandbox", one_of(&["none", "read-only", "workspace-write"])),
        opt("workspace", string()),
        opt("workdir", string()),
        opt("network", one_of(&["none", "host"])),
        opt("agent", boolean()),
        env(),
    ])
    .prop_map(|mut e| {
        let unconfined = get(&e, "sandbox").and_then(Value::as_str) == Some("none");
        if unconfined && get(&e, "agent").and_then(Value::as_bool) == Some(true) {
            without(&mut e, "agent");
        }
        e
    });
    let docker = entries(vec![
        req("kind", one_of(&["docker"])),
        req("image", string()),
        opt("network", string()),
        opt("memory_mb", int(0..=i64::MAX)),
        opt("cpus", (0.01f64..64.0).prop_map(Value::Float).boxed()),
        opt("workspace", string()),
        opt("workdir", string()),
        opt("pids_limit", int(0..=i64::MAX)),
        opt("read_only", boolean()),
        opt("tmp_size_mb", int(0..=1 << 40)),
        opt("socket", string()),
        opt("agent", boolean()),
        opt("warm", int(0..=8)),
        env(),
    ])
    .prop_map(|mut e| {
        let warm = get(&e, "warm").and_then(Value::as_integer).unwrap_or(0);
        if warm > 0 && get(&e, "agent").and_then(Value::as_bool) == Some(false) {
            without(&mut e, "agent");
        }
        e
    });
    let ssh = entries(vec![
        req("kind", one_of(&["ssh"])),
        req("host", string()),
        opt("user", string()),
        opt("port", int(0..=65535)),
        opt("identity_file", string()),
        opt("workdir", string()),
        opt("known_hosts_file", string()),
        opt("host_key_checking", one_of(&["yes", "accept-new", "no"])),
        opt("connect_timeout_seconds", int(0..=i64::MAX)),
        opt("agent", boolean()),
        env(),
    ]);
    let apptainer = entries(vec![
        req("kind", one_of(&["apptainer", "singularity"])),
        req("image", string()),
        opt("network", one_of(&["none", "host"])),
        opt("binds", list(string(), 4)),
        opt("workdir", string()),
        opt("memory_mb", int(0..=i64::MAX)),
        opt("cpus", (0.01f64..64.0).prop_map(Value::Float).boxed()),
        opt("binary", string()),
        opt("writable_tmpfs", boolean()),
        opt("overlay", string()),
        opt("agent", boolean()),
        env(),
    ]);
    let slurm = entries(vec![
        req("kind", one_of(&["slurm"])),
        opt("partition", string()),
        opt(
            "time_limit",
            "[0-9:-]{0,12}".prop_map(Value::String).boxed(),
        ),
        opt(
            "cpus",
            prop_oneof![
                int(1..=1024),
                (1u16..1024)
                    .prop_map(|n| Value::Float(f64::from(n)))
                    .boxed(),
            ]
            .boxed(),
        ),
        opt("memory_mb", int(0..=i64::MAX)),
        opt("gres", string()),
        opt("account", string()),
        opt("extra_args", list(string(), 3)),
        opt("queue_timeout_seconds", int(1..=i64::MAX)),
        opt("slurm_bin_dir", string()),
        opt("relay", one_of(&["none", "tcp", "srun"])),
        opt("workdir", string()),
        opt("agent", Just(Value::Boolean(true)).boxed()),
        // Apptainer inside the job: its keys only with an image.
        opt("image", string()),
        opt("network", one_of(&["none", "host"])),
        opt("binds", list(string(), 3)),
        opt("binary", string()),
        opt("writable_tmpfs", boolean()),
        opt("overlay", string()),
        env(),
    ])
    .prop_map(|mut e| {
        if get(&e, "image").is_none() {
            for k in ["network", "binds", "binary", "writable_tmpfs", "overlay"] {
                without(&mut e, k);
            }
        }
        e
    });
    prop_oneof![local, docker, ssh, apptainer, slurm].boxed()
}

/// A table header of `path` (each part quoted when it is not a bare key).
fn header(path: &[&str], array: bool) -> String {
    let parts: Vec<String> = path.iter().map(|p| key(p)).collect();
    if array {
        format!("[[{}]]", parts.join("."))
    } else {
        format!("[{}]", parts.join("."))
    }
}

fn key(name: &str) -> String {
    let bare = !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if bare {
        return name.to_owned();
    }
    // A basic string on one line (a key cannot be a multi-line string).
    let mut quoted = String::from("\"");
    for c in name.chars() {
        match c {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\u{0}'..='\u{1f}' | '\u{7f}' => quoted.push_str(&format!("\\u{:04X}", u32::from(c))),
            c => quoted.push(c),
        }
    }
    quoted.push('"');
    quoted
}

#[derive(Debug, Clone)]
struct Section {
    header: String,
    entries: Vec<Entry>,
}

/// A backend name: a bare key mostly, sometimes any string.
fn backend_name() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => "[a-z][a-z0-9_-]{0,8}",
        1 => proptest::collection::vec(any::<char>(), 0..8).prop_map(String::from_iter),
    ]
}

fn codemode() -> BoxedStrategy<Section> {
    entries(vec![
        opt("enabled", boolean()),
        opt(
            "timeout_seconds",
            prop_oneof![
                (0.001f64..=3600.0).prop_map(Value::Float),
                (1i64..=3600).prop_map(Value::Integer),
            ]
            .boxed(),
        ),
        opt("max_tool_calls", int(0..=i64::from(u32::MAX))),
        opt("max_memory_mb", int(1..=16384)),
        opt("max_output_chars", int(100..=i64::MAX)),
        opt("exclude", list(glob(), 3)),
        opt("max_concurrency", int(1..=1024)),
        opt("prefork", int(0..=64)),
        opt(
            "degraded",
            subsequence(vec!["namespaces", "landlock"], 0..=2)
                .prop_map(|v| {
                    Value::Array(v.into_iter().map(|s| Value::String(s.into())).collect())
                })
                .boxed(),
        ),
        opt("keep_state", boolean()),
        opt("max_kept_sessions", int(1..=4096)),
    ])
    .prop_map(|entries| Section {
        header: "[codemode]".into(),
        entries,
    })
    .boxed()
}

fn tools() -> BoxedStrategy<Section> {
    entries(vec![
        opt(
            "allow",
            proptest::collection::vec(glob(), 1..4)
                .prop_map(Value::Array)
                .boxed(),
        ),
        opt(
            "deny",
            list(
                glob()
                    .prop_filter("deny = [\"*\"] allows nothing", |g| g.as_str() != Some("*"))
                    .boxed(),
                3,
            ),
        ),
        opt("require_approval", list(glob(), 3)),
    ])
    .prop_map(|entries| Section {
        header: "[tools]".into(),
        entries,
    })
    .boxed()
}

fn toolsets() -> BoxedStrategy<Section> {
    let known = Toolsets::default();
    let presets: Vec<String> = known.preset_names().map(str::to_owned).collect();
    let mut names: Vec<String> = known.names().map(str::to_owned).collect();
    names.extend(["*".to_owned(), "all".to_owned()]);
    let name = select(names).prop_map(Value::String).boxed();
    entries(vec![
        opt("preset", select(presets).prop_map(Value::String).boxed()),
        opt("enabled", list(name.clone(), 4)),
        opt("disabled", list(name, 3)),
    ])
    .prop_map(|entries| Section {
        header: "[toolsets]".into(),
        entries,
    })
    .boxed()
}

fn approval() -> BoxedStrategy<Vec<Section>> {
    let packs: Vec<&'static str> = RULE_PACKS.to_vec();
    let section = entries(vec![
        opt("mode", one_of(&["ask", "deny", "allow"])),
        opt(
            "timeout_seconds",
            (0.001f64..1e9).prop_map(Value::Float).boxed(),
        ),
        opt("allowlist", list(string(), 3)),
        opt("deny", list(string(), 3)),
        opt("approver", string()),
        opt("approver_args", list(string(), 3)),
        opt(
            "packs",
            subsequence(packs.clone(), 0..=packs.len())
                .prop_map(|v| {
                    Value::Array(v.into_iter().map(|s| Value::String(s.into())).collect())
                })
                .boxed(),
        ),
        opt("skip_for_containers", boolean()),
    ])
    .prop_map(|entries| Section {
        header: "[approval]".into(),
        entries,
    });
    let rule = entries(vec![
        req("id", string()),
        req(
            "pattern",
            prop_oneof![
                select(vec![
                    r"\brm\s+-rf\b",
                    "^git push",
                    "curl .*\\| *sh",
                    "(?i)drop table"
                ])
                .prop_map(str::to_owned),
                text().prop_map(|t| regex::escape(&t)),
            ]
            .prop_map(Value::String)
            .boxed(),
        ),
        opt("severity", one_of(&["dangerous", "hardline"])),
        opt("description", string()),
        opt("examples", list(string(), 2)),
        opt("counter_examples", list(string(), 2)),
    ])
    .prop_map(|entries| Section {
        header: "[[approval.rules]]".into(),
        entries,
    });
    (section, proptest::collection::vec(rule, 0..3))
        .prop_map(|(s, rules)| std::iter::once(s).chain(rules).collect())
        .boxed()
}

fn mcp_server() -> BoxedStrategy<Section> {
    (
        "[A-Za-z0-9_-]{1,8}",
        prop_oneof![
            string().prop_map(|c| ("command".to_owned(), c)),
            ("https?://[a-z0-9.:/]{0,20}").prop_map(|u| ("url".to_owned(), Value::String(u))),
        ],
        entries(vec![
            opt("args", list(string(), 3)),
            opt("env", string_map()),
            opt("mode", one_of(&["bridge", "lazy"])),
            opt(
                "timeout_seconds",
                (0.1f64..600.0).prop_map(Value::Float).boxed(),
            ),
        ]),
    )
        .prop_map(|(name, transport, mut rest)| {
            rest.insert(0, transport);
            Section {
                header: header(&["mcp", "servers", &name], false),
                entries: rest,
            }
        })
        .boxed()
}

fn processes() -> BoxedStrategy<Section> {
    entries(vec![
        opt(
            "retention_days",
            (0.001f64..1e6).prop_map(Value::Float).boxed(),
        ),
        opt("max_receipts", int(0..=i64::MAX)),
    ])
    .prop_map(|entries| Section {
        header: "[processes]".into(),
        entries,
    })
    .boxed()
}

fn sessions() -> BoxedStrategy<Section> {
    entries(vec![opt("idle_timeout_seconds", int(1..=i64::MAX))])
        .prop_map(|entries| Section {
            header: "[sessions]".into(),
            entries,
        })
        .boxed()
}

/// A generated policy: its sections, and the backends it declares (name -> kind).
#[derive(Debug, Clone)]
struct Generated {
    sections: Vec<Section>,
    backends: BTreeMap<String, String>,
}

fn policy() -> impl Strategy<Value = Generated> {
    let backends = proptest::collection::btree_map(backend_name(), backend_entries(), 0..4);
    (
        backends,
        proptest::option::of(codemode()),
        proptest::option::of(tools()),
        proptest::option::of(toolsets()),
        proptest::option::of(approval()),
        proptest::collection::vec(mcp_server(), 0..3),
        proptest::option::of(processes()),
        proptest::option::of(sessions()),
        proptest::collection::vec(any::<Index>(), 3),
    )
        .prop_flat_map(
            |(backends, codemode, tools, toolsets, approval, mcp, processes, sessions, routes)| {
                let mut sections: Vec<Section> = Vec::new();
                let mut kinds = BTreeMap::new();
                for (name, entries) in &backends {
                    let kind = get(entries, "kind").and_then(Value::as_str).unwrap_or("");
                    kinds.insert(name.clone(), kind.to_owned());
                    sections.push(Section {
                        header: header(&["backends", name], false),
                        entries: entries.clone(),
                    });
                }
                sections.extend(codemode);
                sections.extend(tools);
                sections.extend(toolsets);
                sections.extend(approval.into_iter().flatten());
                // MCP servers of the same name would be one table defined twice.
                let mut seen = std::collections::BTreeSet::new();
                sections.extend(mcp.into_iter().filter(|s| seen.insert(s.header.clone())));
                sections.extend(processes);
                sections.extend(sessions);
                // Routes to declared backends, or to the built-in `local`.
                let targets: Vec<String> = kinds.keys().cloned().chain(["local".into()]).collect();
                let route_entries: Vec<Entry> = ["terminal", "process", "python_execute"]
                    .iter()
                    .zip(&routes)
                    .filter_map(|(tool, i)| {
                        let n = i.index(targets.len() + 1);
                        targets
                            .get(n)
                            .map(|t| ((*tool).to_owned(), Value::String(t.clone())))
                    })
                    .collect();
                if !route_entries.is_empty() {
                    sections.push(Section {
                        header: "[routes]".into(),
                        entries: route_entries,
                    });
                }
                // Tables may come in any order.
                Just(sections)
                    .prop_shuffle()
                    .prop_map(move |sections| Generated {
                        sections,
                        backends: kinds.clone(),
                    })
            },
        )
}

/// The text of `sections`, and the line (1-based) of each section's header and entries.
fn render(sections: &[Section]) -> (String, Vec<Vec<usize>>) {
    let mut text = String::new();
    let mut lines = Vec::new();
    let line_now = |text: &String| text.matches('\n').count() + 1;
    for section in sections {
        let mut at = vec![line_now(&text)];
        text.push_str(&section.header);
        text.push('\n');
        for (k, v) in &section.entries {
            at.push(line_now(&text));
            text.push_str(&format!("{} = {v}\n", key(k)));
        }
        text.push('\n');
        lines.push(at);
    }
    (text, lines)
}

/// One mistake to make in a generated policy.
#[derive(Debug, Clone)]
enum Mistake {
    /// A key no table takes, appended to a section.
    UnknownKey(Index),
    /// A key that does not apply to the kind of a backend, appended to it.
    ForeignBackendKey(Index, Index),
    /// A value of the right type that is not allowed.
    BadValue(Index),
    /// A value of the wrong type.
    WrongType(Index),
    /// An approval rule whose pattern is not a regular expression.
    BadRulePattern,
    /// An approval rule of an unknown severity.
    BadRuleSeverity,
    /// An MCP server with neither `command` nor `url`.
    McpWithoutTransport,
    /// An MCP server named with characters names may not have.
    McpBadName,
    /// `[tools] allow = []`.
    AllowNothing,
}

fn mistake() -> impl Strategy<Value = Mistake> {
    prop_oneof![
        3 => any::<Index>().prop_map(Mistake::UnknownKey),
        3 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mistake::ForeignBackendKey(a, b)),
        3 => any::<Index>().prop_map(Mistake::BadValue),
        3 => any::<Index>().prop_map(Mistake::WrongType),
        1 => Just(Mistake::BadRulePattern),
        1 => Just(Mistake::BadRuleSeverity),
        1 => Just(Mistake::McpWithoutTransport),
        1 => Just(Mistake::McpBadName),
        1 => Just(Mistake::AllowNothing),
    ]
}

/// Where an error belongs: `(section index, entry index)`, entry `None` for the section's
/// header.
type Place = (usize, Option<usize>);

/// Makes `mistake` in `g`: returns the sections and the places where the error may be reported.
fn make(g: &Generated, mistake: &Mistake) -> Option<(Vec<Section>, Vec<Place>)> {
    let mut sections = g.sections.clone();
    let append = |sections: &mut Vec<Section>, n: usize, k: &str, v: Value| {
        sections[n].entries.push((k.to_owned(), v));
        vec![(n, Some(sections[n].entries.len() - 1))]
    };
    let new_section = |sections: &mut Vec<Section>, header: String, entries: Vec<Entry>| {
        sections.push(Section { header, entries });
        sections.len() - 1
    };
    let backend_sections: Vec<usize> = (0..sections.len())
        .filter(|&n| sections[n].header.starts_with("[backends."))
        .collect();
    let at = match mistake {
        Mistake::UnknownKey(i) => {
            if sections.is_empty() {
                return None;
            }
            let n = i.index(sections.len());
            append(&mut sections, n, "zz_not_a_key", Value::Integer(1))
        }
        Mistake::ForeignBackendKey(i, k) => {
            if backend_sections.is_empty() {
                return None;
            }
            let n = backend_sections[i.index(backend_sections.len())];
            let kind = get(&sections[n].entries, "kind")?.as_str()?.to_owned();
            let kind = if kind == "singularity" {
                "apptainer".to_owned()
            } else {
                kind
            };
            let applies = KINDS.iter().find(|(k, _)| *k == kind)?.1;
            let foreign: Vec<&str> = ALL_BACKEND_KEYS
                .iter()
                .copied()
                .filter(|k| !applies.contains(k))
                .collect();
            let key = foreign[k.index(foreign.len())];
            append(&mut sections, n, key, backend_key_value(key))
        }
        Mistake::BadValue(i) => {
            // (section header, key, a value of the right type that is refused)
            let candidates: Vec<(usize, &str, Value)> = (0..sections.len())
                .flat_map(|n| {
                    let s = &sections[n];
                    let kind = get(&s.entries, "kind").and_then(Value::as_str);
                    let bad: Vec<(&str, Value)> = match (s.header.as_str(), kind) {
                        ("[codemode]", _) => vec![
                            ("timeout_seconds", Value::Float(0.0)),
                            ("max_memory_mb", Value::Integer(0)),
                            ("max_output_chars", Value::Integer(99)),
                            ("max_concurrency", Value::Integer(0)),
                            ("max_kept_sessions", Value::Integer(4097)),
                            (
                                "degraded",
                                Value::Array(vec![Value::String("seccomp".into())]),
                            ),
                            ("exclude", Value::Array(vec![Value::String("bad[".into())])),
                        ],
                        ("[tools]", _) => vec![
                            ("deny", Value::Array(vec![Value::String("*".into())])),
                            (
                                "require_approval",
                                Value::Array(vec![Value::String("shell".into())]),
                            ),
                        ],
                        ("[toolsets]", _) => vec![
                            ("preset", Value::String("tiny".into())),
                            (
                                "disabled",
                                Value::Array(vec![Value::String("enviroment".into())]),
                            ),
                        ],
                        ("[approval]", _) => vec![
                            ("mode", Value::String("maybe".into())),
                            ("timeout_seconds", Value::Float(-1.0)),
                            ("packs", Value::Array(vec![Value::String("clod".into())])),
                        ],
                        ("[processes]", _) => vec![("retention_days", Value::Float(0.0))],
                        ("[sessions]", _) => vec![("idle_timeout_seconds", Value::Integer(0))],
                        ("[routes]", _) => {
                            vec![("terminal", Value::String("no such backend".into()))]
                        }
                        (_, Some("local")) => vec![
                            ("sandbox", Value::String("open".into())),
                            ("network", Value::String("lan".into())),
                        ],
                        (_, Some("ssh")) => {
                            vec![("host_key_checking", Value::String("maybe".into()))]
                        }
                        (_, Some("slurm")) => vec![
                            ("cpus", Value::Float(1.5)),
                            ("time_limit", Value::String("1 hour".into())),
                            ("queue_timeout_seconds", Value::Integer(0)),
                            ("agent", Value::Boolean(false)),
                        ],
                        (_, Some("apptainer" | "singularity")) => {
                            vec![("network", Value::String("bridge".into()))]
                        }
                        _ if s.header.starts_with("[mcp.servers.") => {
                            vec![("mode", Value::String("eager".into()))]
                        }
                        _ => vec![],
                    };
                    bad.into_iter().map(move |(k, v)| (n, k, v))
                })
                .collect();
            if candidates.is_empty() {
                return None;
            }
            let (n, k, v) = candidates[i.index(candidates.len())].clone();
            append(&mut sections, n, k, v)
        }
        Mistake::WrongType(i) => {
            // Any entry but an `env` map's, its value replaced by one of another type.
            let all: Vec<(usize, usize)> = (0..sections.len())
                .flat_map(|n| (0..sections[n].entries.len()).map(move |e| (n, e)))
                .filter(|&(n, e)| sections[n].entries[e].0 != "env")
                .collect();
            if all.is_empty() {
                return None;
            }
            let (n, e) = all[i.index(all.len())];
            let old = &sections[n].entries[e].1;
            let new = match old {
                Value::String(_) => Value::Integer(7),
                Value::Array(_) => Value::String("x".into()),
                Value::Table(_) => Value::Boolean(true),
                Value::Integer(_) | Value::Float(_) | Value::Boolean(_) | Value::Datetime(_) => {
                    Value::Array(vec![])
                }
            };
            sections[n].entries[e].1 = new;
            vec![(n, Some(e))]
        }
        Mistake::BadRulePattern | Mistake::BadRuleSeverity => {
            let (pattern, severity) = match mistake {
                Mistake::BadRulePattern => ("(unclosed", "dangerous"),
                _ => ("^ok$", "catastrophic"),
            };
            let n = new_section(
                &mut sections,
                "[[approval.rules]]".into(),
                vec![
                    ("id".into(), Value::String("injected".into())),
                    ("pattern".into(), Value::String(pattern.into())),
                    ("severity".into(), Value::String(severity.into())),
                ],
            );
            let line = if matches!(mistake, Mistake::BadRulePattern) {
                1
            } else {
                2
            };
            vec![(n, None), (n, Some(line))]
        }
        Mistake::McpWithoutTransport => {
            let n = new_section(
                &mut sections,
                header(&["mcp", "servers", "zz-injected"], false),
                vec![("args".into(), Value::Array(vec![]))],
            );
            vec![(n, None)]
        }
        Mistake::McpBadName => {
            let n = new_section(
                &mut sections,
                header(&["mcp", "servers", "zz injected"], false),
                vec![("command".into(), Value::String("srv".into()))],
            );
            vec![(n, None)]
        }
        Mistake::AllowNothing => {
            let existing = sections.iter().position(|s| s.header == "[tools]");
            match existing {
                // Appended last: when `allow` is already there, TOML refuses the duplicate here.
                Some(n) => append(&mut sections, n, "allow", Value::Array(vec![])),
                None => {
                    let n = new_section(
                        &mut sections,
                        "[tools]".into(),
                        vec![("allow".into(), Value::Array(vec![]))],
                    );
                    vec![(n, Some(0))]
                }
            }
        }
    };
    Some((sections, at))
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_text_never_panics_and_errors_name_file_line_and_key(
        text in prop_oneof![any_text(), token_soup()],
    ) {
        parse_checked(&text)?;
    }

    #[test]
    fn mutated_shipped_policies_never_panic_and_errors_name_file_line_and_key(
        file in any::<Index>(),
        mutations in proptest::collection::vec(mutation(), 1..5),
    ) {
        let (_, text) = &SHIPPED[file.index(SHIPPED.len())];
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        for m in &mutations {
            apply(&mut lines, m);
        }
        parse_checked(&lines.join("\n"))?;
    }

    #[test]
    fn a_shipped_value_replaced_by_another_type_is_refused_on_its_line(
        file in any::<Index>(),
        line in any::<Index>(),
        value in any_value(),
    ) {
        let (_, text) = &SHIPPED[file.index(SHIPPED.len())];
        let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
        let before = lines.clone();
        let Some(at) = apply(&mut lines, &Mutation::ReplaceValue(line, value)) else {
            return Ok(());
        };
        let (old, new) = (value_type(&before[at]), value_type(&lines[at]));
        // Integers and floats are both numbers to a number key.
        let numbers = |t: Option<&str>| matches!(t, Some("integer" | "float"));
        prop_assume!(old != new && !(numbers(old) && numbers(new)));
        let text = lines.join("\n");
        if let Some(err_line) = parse_checked(&text)? {
            prop_assert_eq!(
                err_line,
                at + 1,
                "{} changed on line {} gave {}",
                text,
                at + 1,
                Policy::parse(&text, NAME).unwrap_err()
            );
        }
    }

    #[test]
    fn generated_policies_parse_with_their_backends(g in policy()) {
        let (text, _) = render(&g.sections);
        let parsed = match Policy::parse(&text, NAME) {
            Ok(p) => p,
            Err(e) => return Err(TestCaseError::fail(format!("{e}\n---\n{text}"))),
        };
        let kinds: BTreeMap<String, String> = parsed
            .backends
            .iter()
            .map(|(name, b)| (name.clone(), b.kind().to_owned()))
            .collect();
        // `singularity` is the apptainer kind under another name.
        let written: BTreeMap<String, String> = g
            .backends
            .iter()
            .map(|(name, kind)| {
                let kind = if kind == "singularity" { "apptainer" } else { kind.as_str() };
                (name.clone(), kind.to_owned())
            })
            .collect();
        prop_assert_eq!(kinds, written);
    }

    #[test]
    fn one_mistake_in_a_generated_policy_is_refused_on_its_line(
        g in policy(),
        mistake in mistake(),
    ) {
        let Some((sections, at)) = make(&g, &mistake) else {
            return Ok(());
        };
        let (text, lines) = render(&sections);
        let expected: Vec<usize> = at
            .iter()
            .map(|&(n, entry)| lines[n][entry.map_or(0, |e| e + 1)])
            .collect();
        match Policy::parse(&text, NAME) {
            Ok(_) => prop_assert!(false, "{:?} accepted:\n{}", mistake, text),
            Err(err) => {
                let line = check_error(&text, &err)?;
                prop_assert!(
                    expected.contains(&line),
                    "{:?}: error on line {}, expected one of {:?}: {}\n---\n{}",
                    mistake,
                    line,
                    expected,
                    err,
                    text
                );
            }
        }
    }
}

#[test]
fn every_shipped_policy_parses() {
    for (name, text) in SHIPPED.iter() {
        if let Err(e) = Policy::parse(text, name) {
            panic!("{e}");
        }
    }
}

#[test]
fn a_missing_file_is_a_file_level_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("nope.toml");
    let err = Policy::load(&path).unwrap_err();
    let shown = err.to_string();
    assert!(
        shown.starts_with(&format!("{}: cannot read policy: ", path.display())),
        "{shown}"
    );
}

// ---------------------------------------------------------------------------------------------
// Gaps the properties above found (errors on line 1), fixed: the line of each.

/// The line of the error `text` gets.
fn error_line(text: &str) -> usize {
    match Policy::parse(text, NAME) {
        Err(PolicyError::Invalid { line, .. }) => line,
        other => panic!("{other:?}"),
    }
}

#[test]
fn approval_rule_errors_name_their_line() {
    let head = "[approval]\nmode = \"ask\"\n\n[[approval.rules]]\nid = \"r\"\n";
    let bad_pattern = format!("{head}pattern = \"(unclosed\"\n");
    assert!([4, 6].contains(&error_line(&bad_pattern)), "{bad_pattern}");
    let bad_severity = format!("{head}pattern = \"x\"\nseverity = \"catastrophic\"\n");
    assert!(
        [4, 7].contains(&error_line(&bad_severity)),
        "{bad_severity}"
    );
}

#[test]
fn mcp_server_errors_name_their_line() {
    let no_transport = "[codemode]\nenabled = true\n\n[mcp.servers.files]\nargs = []\n";
    assert_eq!(error_line(no_transport), 4, "{no_transport}");
    let bad_name = "[codemode]\nenabled = true\n\n[mcp.servers.\"a b\"]\ncommand = \"x\"\n";
    assert_eq!(error_line(bad_name), 4, "{bad_name}");
}

#[test]
fn an_empty_allow_list_names_its_line() {
    let text = "[codemode]\nenabled = true\n\n[tools]\nallow = []\n";
    assert_eq!(error_line(text), 5, "{text}");
}
