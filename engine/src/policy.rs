//! Operator policy files (TOML). See DESIGN.md section 5 and `policies/`.
//!
//! Unknown keys, wrong types and bad globs are errors that name the file, the line and the key.
//! A missing policy is the built-in default.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
use paddock_backends::section::SectionError;
use serde::Deserialize;
use toml::Spanned;

/// A policy that failed to load.
#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    #[error("{path}: cannot read policy: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {key}: {message}")]
    Invalid {
        path: String,
        line: usize,
        key: String,
        message: String,
    },
}

/// `[codemode]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CodemodeConfig {
    pub enabled: bool,
    pub timeout_seconds: Spanned<f64>,
    pub max_tool_calls: Spanned<u32>,
    pub max_memory_mb: Spanned<u64>,
    pub max_output_chars: Spanned<usize>,
    /// Tool-name globs scripts can never call.
    pub exclude: Vec<Spanned<String>>,
    /// Scripts running at once; more wait their turn.
    pub max_concurrency: Spanned<usize>,
    /// Confined children kept forked ahead of need.
    pub prefork: Spanned<usize>,
    /// Kernel features the script sandbox may run without, for old kernels: `namespaces`,
    /// `landlock`. Empty (the default): a missing feature means no script runs.
    pub degraded: Vec<Spanned<String>>,
    /// Notebook sessions: the scripts of one session share one namespace, like notebook cells.
    pub keep_state: bool,
    /// Notebook sessions holding a child at once; one more evicts the least recently used.
    pub max_kept_sessions: Spanned<usize>,
}

impl Default for CodemodeConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            timeout_seconds: Spanned::new(0..0, 60.0),
            max_tool_calls: Spanned::new(0..0, 50),
            max_memory_mb: Spanned::new(0..0, 64),
            max_output_chars: Spanned::new(0..0, 20_000),
            exclude: Vec::new(),
            max_concurrency: Spanned::new(0..0, 8),
            prefork: Spanned::new(0..0, 2),
            degraded: Vec::new(),
            keep_state: false,
            max_kept_sessions: Spanned::new(0..0, 16),
        }
    }
}

/// `[tools]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsConfig {
    pub allow: Vec<Spanned<String>>,
    pub deny: Vec<Spanned<String>>,
    pub require_approval: Vec<Spanned<String>>,
    /// A direct call's result longer than this (characters of its JSON) is spilled: the big
    /// fields go to a file in the session's state and the caller gets a preview and the path.
    pub max_result_chars: Spanned<usize>,
}

/// `[tools] max_result_chars` when the policy does not say: the size of the terminal's old
/// output cap, so that every result the model used to see whole it still sees whole.
pub const DEFAULT_MAX_RESULT_CHARS: usize = 50_000;

/// The bounds of `[tools] max_result_chars`: the preview (a fifth of it) stays readable, and a
/// result is never allowed past what the environment tools capture at most.
pub const MAX_RESULT_CHARS_RANGE: std::ops::RangeInclusive<usize> = 5_000..=1_000_000;

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            allow: vec![Spanned::new(0..0, "*".into())],
            deny: Vec::new(),
            require_approval: Vec::new(),
            max_result_chars: Spanned::new(0..0, DEFAULT_MAX_RESULT_CHARS),
        }
    }
}

/// The names `[approval] packs` accepts: the rule packs of `approval/packs/` (a test there
/// keeps the two lists equal; the policy layer does not depend on the approval layer).
pub const RULE_PACKS: &[&str] = &[
    "core",
    "cloud",
    "containers",
    "infrastructure",
    "databases",
    "services",
    "secrets",
];

/// `[approval]`: what a dangerous command gets.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ApprovalConfig {
    /// `ask` (a human decides; nobody to ask means deny), `deny` or `allow`.
    pub mode: Spanned<String>,
    pub timeout_seconds: Spanned<f64>,
    /// Permanent approvals: command globs that never ask.
    pub allowlist: Vec<Spanned<String>>,
    /// Command globs that are always denied.
    pub deny: Vec<Spanned<String>>,
    /// Who answers: a program (gets the request as JSON on stdin, answers on stdout),
    /// `terminal`, or `none`. Default: the terminal when a person sits at one, else none.
    pub approver: Option<Spanned<String>>,
    pub approver_args: Vec<String>,
    /// Rule packs to apply ([`RULE_PACKS`]); all of them when absent.
    pub packs: Option<Vec<Spanned<String>>>,
    /// Extra rules on top of the packs.
    pub rules: Vec<ExtraRule>,
    /// Environment tools routed to a container backend skip command approval.
    pub skip_for_containers: bool,
}

/// `[[approval.rules]]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExtraRule {
    pub id: String,
    /// A regular expression over one simple command (case-insensitive).
    pub pattern: Spanned<String>,
    /// `dangerous` (default: needs approval) or `hardline` (never allowed).
    pub severity: Option<Spanned<String>>,
    pub description: Option<String>,
    /// Command lines the rule must match, and look-alikes it must not: checked when the
    /// policy loads.
    #[serde(default)]
    pub examples: Vec<String>,
    #[serde(default)]
    pub counter_examples: Vec<String>,
}

impl Default for ApprovalConfig {
    fn default() -> Self {
        Self {
            mode: Spanned::new(0..0, "ask".into()),
            timeout_seconds: Spanned::new(0..0, 300.0),
            allowlist: Vec::new(),
            deny: Vec::new(),
            approver: None,
            approver_args: Vec::new(),
            packs: None,
            rules: Vec::new(),
            skip_for_containers: false,
        }
    }
}

/// `[backends.NAME]`: where environment tools run, typed by its `kind`; each kind's keys,
/// defaults and checks belong to its backend module ([`paddock_backends::registry`]).
pub use paddock_backends::registry::BackendConfig;

/// `[network]`: the egress policy of backends with `network = "proxy"` (DESIGN.md section 5).
/// Parsed and checked now; the proxy that enforces it is not in this build yet, so no backend
/// can name `network = "proxy"` (refused, saying so) and these keys change nothing yet.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkConfig {
    /// Host globs (`pypi.org`, `*.pythonhosted.org`, `*`).
    pub allow: Vec<Spanned<String>>,
    /// Host globs; a match wins over `allow`.
    pub deny: Vec<Spanned<String>>,
    /// `deny` (default) or `ask`: a host in neither list.
    pub unknown: Option<Spanned<String>>,
    /// Names resolving to loopback, private, link-local, CGNAT or metadata addresses (and such
    /// literal IPs) are refused unless this is true.
    pub allow_private: bool,
    /// Pinned names: where they go, private or not.
    pub resolve: std::collections::BTreeMap<String, Spanned<String>>,
    /// Headers the proxy adds for one host; values from the engine's environment.
    pub credentials: Vec<NetworkCredential>,
}

/// `[[network.credentials]]`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NetworkCredential {
    pub host: Spanned<String>,
    pub header: Spanned<String>,
    /// May name variables of the engine's environment as `${NAME}`.
    pub value: Spanned<String>,
}

impl NetworkConfig {
    /// The egress decisions these keys describe (valid once the policy was checked).
    pub fn egress(&self) -> Result<paddock_network::EgressPolicy, String> {
        let text =
            |list: &[Spanned<String>]| list.iter().map(|g| g.get_ref().clone()).collect::<Vec<_>>();
        let unknown = match self.unknown.as_ref().map(|u| u.get_ref().as_str()) {
            Some("ask") => paddock_network::Unknown::Ask,
            _ => paddock_network::Unknown::Deny,
        };
        let pins = self
            .resolve
            .iter()
            .map(|(name, addr)| (name.clone(), addr.get_ref().clone()))
            .collect();
        paddock_network::EgressPolicy::new(
            &text(&self.allow),
            &text(&self.deny),
            unknown,
            self.allow_private,
            &pins,
        )
        .map_err(|e| e.to_string())
    }
}

/// The `${NAME}` references of a credential value; `Err` names what is malformed.
/// `value` with each `${NAME}` replaced by the engine's environment variable `NAME`; an error
/// names a variable that is not set.
pub fn expand_credential(value: &str) -> Result<String, String> {
    let names = credential_variables(value)?;
    let mut out = value.to_owned();
    for name in names {
        let found = std::env::var(name).map_err(|_| {
            format!(
                "${{{name}}} is not set in the engine's environment (network.credentials.value)"
            )
        })?;
        out = out.replace(&format!("${{{name}}}"), &found);
    }
    Ok(out)
}

fn credential_variables(value: &str) -> Result<Vec<&str>, String> {
    let mut names = Vec::new();
    let mut rest = value;
    while let Some(at) = rest.find("${") {
        let after = &rest[at + 2..];
        let Some(end) = after.find('}') else {
            return Err("`${` without its closing `}`".into());
        };
        let name = &after[..end];
        let valid = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !name.starts_with(|c: char| c.is_ascii_digit());
        if !valid {
            return Err(format!("`${{{name}}}` is not a variable name"));
        }
        names.push(name);
        rest = &after[end + 1..];
    }
    Ok(names)
}

/// `[routes]`: which backend each environment tool runs on.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RoutesConfig {
    pub terminal: Option<Spanned<String>>,
    pub process: Option<Spanned<String>>,
    pub python_execute: Option<Spanned<String>>,
    /// The file tools (read_file, write_file, edit_file, apply_patch, grep, ...); default: where
    /// `terminal` goes, so that files and commands see one environment.
    pub files: Option<Spanned<String>>,
}

/// `[mcp.servers.NAME]`: another MCP server whose tools scripts may call.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// stdio: the program and its arguments ...
    pub command: Option<Spanned<String>>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: std::collections::BTreeMap<String, String>,
    /// ... or a Streamable HTTP endpoint.
    pub url: Option<Spanned<String>>,
    /// `bridge` (default): `mcp_<server>__<tool>`; `lazy`: list_tools / call_tool.
    pub mode: Option<Spanned<String>>,
    pub timeout_seconds: Option<Spanned<f64>>,
}

/// `[mcp]`
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    pub servers: std::collections::BTreeMap<String, McpServerConfig>,
}

/// `[toolsets]`: which bundles of tools are on.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ToolsetsConfig {
    /// A preset (`default`, `minimal`, `no-shell`, `all`); used when `enabled` is not given.
    pub preset: Option<Spanned<String>>,
    pub enabled: Option<Vec<Spanned<String>>>,
    pub disabled: Vec<Spanned<String>>,
}

/// `[processes]`: retention of background process receipts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ProcessesConfig {
    pub retention_days: Spanned<f64>,
    pub max_receipts: Spanned<usize>,
}

impl Default for ProcessesConfig {
    fn default() -> Self {
        Self {
            retention_days: Spanned::new(0..0, 7.0),
            max_receipts: Spanned::new(0..0, 200),
        }
    }
}

/// `[sessions]`: when an idle session is closed (its environments removed, its background
/// processes ended, their receipts kept).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SessionsConfig {
    /// Signed so that a negative value is refused with its line rather than as a type error.
    pub idle_timeout_seconds: Spanned<i64>,
    /// `close` (the default) or `pause`: an idle session is paused after
    /// `pause_after_seconds`, and closed only after `idle_timeout_seconds`.
    pub idle_action: Spanned<String>,
    pub pause_after_seconds: Spanned<i64>,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        Self {
            idle_timeout_seconds: Spanned::new(0..0, 1800),
            idle_action: Spanned::new(0..0, "close".to_owned()),
            pause_after_seconds: Spanned::new(0..0, 300),
        }
    }
}

impl SessionsConfig {
    /// How long a session may stay idle before a sweep closes it.
    pub fn idle_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_secs((*self.idle_timeout_seconds.get_ref()).max(1).unsigned_abs())
    }

    /// How long a session may stay idle before a sweep pauses it (`idle_action = "pause"`).
    pub fn pause_after(&self) -> Option<std::time::Duration> {
        (self.idle_action.get_ref() == "pause").then(|| {
            std::time::Duration::from_secs(
                (*self.pause_after_seconds.get_ref()).max(1).unsigned_abs(),
            )
        })
    }
}

/// `[snapshots]`: how many snapshots a home keeps, and how much they may take
/// (`paddock sessions snapshot` refuses a new one past either, naming the key).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SnapshotsConfig {
    pub max_count: Spanned<i64>,
    pub max_total_mb: Spanned<i64>,
}

impl Default for SnapshotsConfig {
    fn default() -> Self {
        Self {
            max_count: Spanned::new(0..0, 50),
            max_total_mb: Spanned::new(0..0, 20 * 1024),
        }
    }
}

/// `[e2b]`: the E2B-compatible front end (`paddock serve --e2b`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct E2bConfig {
    /// The API keys its REST API accepts (`X-API-KEY`): `e2b_` and hex, as the SDKs check
    /// before sending; a value may name the engine's environment variables as `${NAME}`.
    pub api_keys: Vec<Spanned<String>>,
}

impl E2bConfig {
    /// The keys with their `${NAME}`s expanded; an error names a bad or unset one.
    pub fn expanded_keys(&self) -> Result<Vec<String>, String> {
        let mut keys = Vec::new();
        for key in &self.api_keys {
            let value = expand_credential(key.get_ref()).map_err(|e| {
                format!(
                    "e2b.api_keys: {}",
                    e.replace(" (network.credentials.value)", "")
                )
            })?;
            if !is_e2b_key(&value) {
                return Err(format!(
                    "e2b.api_keys: a key must be `e2b_` followed by hex digits (the SDKs refuse \
                     others), got one of {} characters",
                    value.len()
                ));
            }
            keys.push(value);
        }
        Ok(keys)
    }
}

/// Whether `key` has the shape E2B's SDKs accept: `e2b_` and one or more hex digits.
pub fn is_e2b_key(key: &str) -> bool {
    key.strip_prefix("e2b_")
        .is_some_and(|hex| !hex.is_empty() && hex.chars().all(|c| c.is_ascii_hexdigit()))
}

/// A whole policy file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub codemode: CodemodeConfig,
    pub tools: ToolsConfig,
    pub toolsets: ToolsetsConfig,
    pub approval: ApprovalConfig,
    /// Parsed apart, each by its kind's section type ([`Policy::parse`]).
    #[serde(skip)]
    pub backends: std::collections::BTreeMap<String, BackendConfig>,
    pub routes: RoutesConfig,
    pub mcp: McpConfig,
    pub processes: ProcessesConfig,
    pub sessions: SessionsConfig,
    pub snapshots: SnapshotsConfig,
    pub network: NetworkConfig,
    pub e2b: E2bConfig,
    /// Where it came from (`<built-in>` for the default).
    #[serde(skip)]
    pub source: Option<PathBuf>,
}

impl Policy {
    /// The built-in default: everything allowed, no approvals configured, default limits.
    pub fn builtin() -> Self {
        Self::default()
    }

    /// Loads and checks a policy file.
    pub fn load(path: &Path) -> Result<Self, PolicyError> {
        let text = std::fs::read_to_string(path).map_err(|source| PolicyError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string()).map(|mut p| {
            p.source = Some(path.to_path_buf());
            p
        })
    }

    /// Parses and checks policy text; `name` is used in error messages.
    pub fn parse(text: &str, name: &str) -> Result<Self, PolicyError> {
        let syntax = |err: toml::de::Error| {
            let span = err.span().unwrap_or(0..0);
            let (line, key) = locate(text, span.start);
            PolicyError::Invalid {
                path: name.to_owned(),
                line,
                key,
                message: with_suggestion(err.message().trim()),
            }
        };
        let mut document = toml::de::DeTable::parse(text).map_err(syntax)?;
        // `[backends.NAME]` sections are typed by their `kind`: read apart, once each.
        let sections = document.get_mut().remove("backends");
        let mut policy =
            Policy::deserialize(toml::de::Deserializer::from(document)).map_err(syntax)?;
        if let Some(sections) = sections {
            policy.backends = parse_backends(sections, text, name)?;
        }
        policy.validate(text, name)?;
        Ok(policy)
    }

    fn validate(&self, text: &str, name: &str) -> Result<(), PolicyError> {
        let invalid = |span: std::ops::Range<usize>, key: &str, message: String| {
            let (line, _) = locate(text, span.start);
            PolicyError::Invalid {
                path: name.to_owned(),
                line,
                key: key.to_owned(),
                message,
            }
        };
        let c = &self.codemode;
        let timeout = *c.timeout_seconds.get_ref();
        if !(timeout.is_finite() && timeout > 0.0 && timeout <= 3600.0) {
            return Err(invalid(
                c.timeout_seconds.span(),
                "codemode.timeout_seconds",
                format!("must be between 0 and 3600 seconds, got {timeout}"),
            ));
        }
        if *c.max_memory_mb.get_ref() == 0 || *c.max_memory_mb.get_ref() > 16 * 1024 {
            return Err(invalid(
                c.max_memory_mb.span(),
                "codemode.max_memory_mb",
                "must be between 1 and 16384".into(),
            ));
        }
        if *c.max_output_chars.get_ref() < 100 {
            return Err(invalid(
                c.max_output_chars.span(),
                "codemode.max_output_chars",
                "must be at least 100".into(),
            ));
        }
        if *c.max_kept_sessions.get_ref() == 0 || *c.max_kept_sessions.get_ref() > 4096 {
            return Err(invalid(
                c.max_kept_sessions.span(),
                "codemode.max_kept_sessions",
                "must be between 1 and 4096".into(),
            ));
        }
        if *c.max_concurrency.get_ref() == 0 {
            return Err(invalid(
                c.max_concurrency.span(),
                "codemode.max_concurrency",
                "must be at least 1".into(),
            ));
        }
        let max_result = *self.tools.max_result_chars.get_ref();
        if !MAX_RESULT_CHARS_RANGE.contains(&max_result) {
            return Err(invalid(
                self.tools.max_result_chars.span(),
                "tools.max_result_chars",
                format!(
                    "must be between {} and {} characters, got {max_result}",
                    MAX_RESULT_CHARS_RANGE.start(),
                    MAX_RESULT_CHARS_RANGE.end()
                ),
            ));
        }
        self.validate_sections(text, name)?;
        let allows_nothing =
            self.tools.allow.is_empty() || self.tools.deny.iter().any(|d| d.get_ref() == "*");
        if allows_nothing {
            let span = self
                .tools
                .deny
                .iter()
                .find(|d| d.get_ref() == "*")
                .map_or_else(|| key_in_table(text, "tools", "allow"), Spanned::span);
            return Err(invalid(
                span,
                "tools",
                "this policy allows no tool at all (allow is empty or deny has \"*\"); \
                 to turn code mode off use [codemode] enabled = false"
                    .into(),
            ));
        }
        for (key, globs) in [
            ("codemode.exclude", &c.exclude),
            ("tools.allow", &self.tools.allow),
            ("tools.deny", &self.tools.deny),
            ("tools.require_approval", &self.tools.require_approval),
        ] {
            for glob in globs {
                Glob::new(glob.get_ref()).map_err(|e| {
                    invalid(
                        glob.span(),
                        key,
                        format!("bad glob {:?}: {}", glob.get_ref(), e.kind()),
                    )
                })?;
                if let Some((_, why)) = crate::toolsets::RETIRED_TOOLS
                    .iter()
                    .find(|(n, _)| n == glob.get_ref())
                {
                    return Err(invalid(
                        glob.span(),
                        key,
                        format!("tool '{}' no longer exists: it was {why}", glob.get_ref()),
                    ));
                }
            }
        }
        Ok(())
    }

    fn validate_sections(&self, text: &str, name: &str) -> Result<(), PolicyError> {
        let invalid = |span: std::ops::Range<usize>, key: &str, message: String| {
            let (line, _) = locate(text, span.start);
            PolicyError::Invalid {
                path: name.to_owned(),
                line,
                key: key.to_owned(),
                message,
            }
        };
        let one_of = |value: &Spanned<String>, key: &str, allowed: &[&str]| {
            if allowed.contains(&value.get_ref().as_str()) {
                return Ok(());
            }
            let hint = closest(value.get_ref(), allowed.iter().copied())
                .map(|b| format!("; did you mean \"{b}\"?"))
                .unwrap_or_default();
            Err(invalid(
                value.span(),
                key,
                format!(
                    "\"{}\" is not one of {}{hint}",
                    value.get_ref(),
                    allowed.join(", ")
                ),
            ))
        };
        one_of(
            &self.approval.mode,
            "approval.mode",
            &["ask", "deny", "allow"],
        )?;
        for feature in &self.codemode.degraded {
            // seccomp is never optional: it is the layer that holds when the others are gone.
            one_of(feature, "codemode.degraded", &["namespaces", "landlock"])?;
        }
        for pack in self.approval.packs.iter().flatten() {
            one_of(pack, "approval.packs", RULE_PACKS)?;
        }
        let t = *self.approval.timeout_seconds.get_ref();
        if !(t.is_finite() && t > 0.0) {
            return Err(invalid(
                self.approval.timeout_seconds.span(),
                "approval.timeout_seconds",
                "must be a positive number of seconds".into(),
            ));
        }
        for rule in &self.approval.rules {
            if let Err(e) = regex::Regex::new(rule.pattern.get_ref()) {
                return Err(invalid(
                    rule.pattern.span(),
                    &format!("approval.rules.{}", rule.id),
                    format!("bad pattern: {e}"),
                ));
            }
            if let Some(sev) = &rule.severity
                && sev.get_ref() != "dangerous"
                && sev.get_ref() != "hardline"
            {
                return Err(invalid(
                    sev.span(),
                    &format!("approval.rules.{}", rule.id),
                    format!(
                        "severity \"{}\" is not one of dangerous, hardline",
                        sev.get_ref()
                    ),
                ));
            }
        }
        for (tool, route) in [
            ("terminal", &self.routes.terminal),
            ("process", &self.routes.process),
            ("python_execute", &self.routes.python_execute),
            ("files", &self.routes.files),
        ] {
            let Some(route) = route else { continue };
            let target = route.get_ref();
            if target != "local" && !self.backends.contains_key(target) {
                let defined: Vec<&str> = self
                    .backends
                    .keys()
                    .map(String::as_str)
                    .chain(["local"])
                    .collect();
                let hint = closest(target, defined.iter().copied())
                    .map(|b| format!("; did you mean \"{b}\"?"))
                    .unwrap_or_default();
                return Err(invalid(
                    route.span(),
                    &format!("routes.{tool}"),
                    format!(
                        "no backend named \"{target}\" (defined: {}){hint}",
                        defined.join(", ")
                    ),
                ));
            }
        }
        let net = &self.network;
        for (list, key) in [(&net.allow, "network.allow"), (&net.deny, "network.deny")] {
            for glob in list {
                paddock_network::HostGlob::parse(glob.get_ref())
                    .map_err(|e| invalid(glob.span(), key, e.to_string()))?;
            }
        }
        if let Some(unknown) = &net.unknown {
            one_of(unknown, "network.unknown", &["deny", "ask"])?;
        }
        for (host, addr) in &net.resolve {
            if paddock_network::parse_ip_literal(addr.get_ref()).is_none() {
                return Err(invalid(
                    addr.span(),
                    &format!("network.resolve.\"{host}\""),
                    format!("\"{}\" is not an IP address", addr.get_ref()),
                ));
            }
        }
        for credential in &net.credentials {
            paddock_network::HostGlob::parse(credential.host.get_ref()).map_err(|e| {
                invalid(
                    credential.host.span(),
                    "network.credentials.host",
                    e.to_string(),
                )
            })?;
            let header = credential.header.get_ref();
            if header.is_empty()
                || !header
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
            {
                return Err(invalid(
                    credential.header.span(),
                    "network.credentials.header",
                    format!("\"{header}\" is not an HTTP header name"),
                ));
            }
            credential_variables(credential.value.get_ref())
                .map_err(|e| invalid(credential.value.span(), "network.credentials.value", e))?;
        }
        for key in &self.e2b.api_keys {
            let value = key.get_ref();
            let names =
                credential_variables(value).map_err(|e| invalid(key.span(), "e2b.api_keys", e))?;
            if names.is_empty() && !is_e2b_key(value) {
                return Err(invalid(
                    key.span(),
                    "e2b.api_keys",
                    "a key must be `e2b_` followed by hex digits (the SDKs refuse others)".into(),
                ));
            }
        }
        for (server, config) in &self.mcp.servers {
            let key = |k: &str| format!("mcp.servers.{server}.{k}");
            match (&config.command, &config.url) {
                (Some(_), Some(url)) => {
                    return Err(invalid(
                        url.span(),
                        &key("url"),
                        "give either `command` (stdio) or `url` (HTTP), not both".into(),
                    ));
                }
                (None, None) => {
                    return Err(invalid(
                        table_header(text, &format!("mcp.servers.{server}")),
                        &format!("mcp.servers.{server}"),
                        "needs `command` (stdio) or `url` (HTTP)".into(),
                    ));
                }
                _ => {}
            }
            if let Some(url) = &config.url
                && !(url.get_ref().starts_with("http://") || url.get_ref().starts_with("https://"))
            {
                return Err(invalid(
                    url.span(),
                    &key("url"),
                    "must start with http:// or https://".into(),
                ));
            }
            if let Some(mode) = &config.mode {
                one_of(mode, &key("mode"), &["bridge", "lazy"])?;
            }
            if !server
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                return Err(invalid(
                    table_header(text, &format!("mcp.servers.{server}")),
                    &format!("mcp.servers.{server}"),
                    "server names use letters, digits, _ and -".into(),
                ));
            }
        }
        let toolsets = crate::toolsets::Toolsets::default();
        if let Some(preset) = &self.toolsets.preset {
            let names: Vec<&str> = toolsets.preset_names().collect();
            one_of(preset, "toolsets.preset", &names)?;
        }
        for (key, list) in [
            (
                "toolsets.enabled",
                self.toolsets.enabled.as_deref().unwrap_or(&[]),
            ),
            ("toolsets.disabled", &self.toolsets.disabled),
        ] {
            for item in list {
                let n = item.get_ref();
                if n != "*" && n != "all" && toolsets.resolve(n).is_none() {
                    let known: Vec<&str> = toolsets.names().collect();
                    let hint = closest(n, known.iter().copied())
                        .map(|b| format!("; did you mean \"{b}\"?"))
                        .unwrap_or_default();
                    return Err(invalid(
                        item.span(),
                        key,
                        format!(
                            "no toolset named \"{n}\" (known: {}){hint}",
                            known.join(", ")
                        ),
                    ));
                }
            }
        }
        let days = *self.processes.retention_days.get_ref();
        if !(days.is_finite() && days > 0.0) {
            return Err(invalid(
                self.processes.retention_days.span(),
                "processes.retention_days",
                "must be a positive number of days".into(),
            ));
        }
        let idle = *self.sessions.idle_timeout_seconds.get_ref();
        for (value, key) in [
            (&self.snapshots.max_count, "snapshots.max_count"),
            (&self.snapshots.max_total_mb, "snapshots.max_total_mb"),
        ] {
            if *value.get_ref() < 1 {
                return Err(invalid(
                    value.span(),
                    key,
                    format!("must be at least 1, got {}", value.get_ref()),
                ));
            }
        }
        if idle <= 0 {
            return Err(invalid(
                self.sessions.idle_timeout_seconds.span(),
                "sessions.idle_timeout_seconds",
                format!("must be a positive number of seconds, got {idle}"),
            ));
        }
        let action = self.sessions.idle_action.get_ref().as_str();
        if !matches!(action, "close" | "pause") {
            return Err(invalid(
                self.sessions.idle_action.span(),
                "sessions.idle_action",
                format!("must be \"close\" or \"pause\", got {action:?}"),
            ));
        }
        let pause = *self.sessions.pause_after_seconds.get_ref();
        if pause <= 0 || (action == "pause" && pause >= idle) {
            return Err(invalid(
                self.sessions.pause_after_seconds.span(),
                "sessions.pause_after_seconds",
                format!(
                    "must be a positive number of seconds below idle_timeout_seconds ({idle}), \
                     got {pause}"
                ),
            ));
        }
        Ok(())
    }

    /// The toolsets switched on: `enabled` (or the preset's), and `disabled`.
    pub fn toolset_selection(&self) -> (Vec<String>, Vec<String>) {
        let toolsets = crate::toolsets::Toolsets::default();
        let enabled = match (&self.toolsets.enabled, &self.toolsets.preset) {
            (Some(list), _) => list.iter().map(|s| s.get_ref().clone()).collect(),
            (None, Some(preset)) => toolsets
                .preset(preset.get_ref())
                .map(<[String]>::to_vec)
                .unwrap_or_default(),
            (None, None) => vec!["*".to_owned()],
        };
        let mut disabled: Vec<String> = self
            .toolsets
            .disabled
            .iter()
            .map(|s| s.get_ref().clone())
            .collect();
        // Every toolset unless the policy says otherwise, but an orchestrator's: saving and
        // branching sessions is for operators who enable it.
        if self.toolsets.enabled.is_none() && self.toolsets.preset.is_none() {
            disabled.push("sessions_admin".to_owned());
        }
        (enabled, disabled)
    }

    /// The tool filter this policy describes.
    pub fn tool_filter(&self) -> ToolFilter {
        ToolFilter {
            allow: glob_set(&self.tools.allow),
            deny: glob_set(&self.tools.deny),
            require_approval: glob_set(&self.tools.require_approval),
            exclude: glob_set(&self.codemode.exclude),
        }
    }
}

fn glob_set(globs: &[Spanned<String>]) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for glob in globs {
        // Validated at load; a glob that still fails to parse matches nothing.
        if let Ok(g) = Glob::new(glob.get_ref()) {
            builder.add(g);
        }
    }
    builder.build().unwrap_or_else(|_| GlobSet::empty())
}

/// Adds "did you mean `x`?" to serde's "unknown field `y`, expected one of `a`, `b`".
fn with_suggestion(message: &str) -> String {
    let Some(rest) = message.strip_prefix("unknown field `") else {
        return message.to_owned();
    };
    let Some((unknown, expected)) = rest.split_once('`') else {
        return message.to_owned();
    };
    let candidates: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    match closest(unknown, candidates.iter().copied()) {
        Some(best) => format!("{message}; did you mean `{best}`?"),
        None => message.to_owned(),
    }
}

/// The candidate closest to `word`, when it is close enough to be a typo.
/// Where the header of table `name` (`[name]`, or `[a."b"]` quoted) starts in `text`, for an
/// error about a table as a whole; the file's start when it cannot be found.
fn table_header(text: &str, name: &str) -> std::ops::Range<usize> {
    let (head, last) = name.rsplit_once('.').unwrap_or(("", name));
    let candidates = [
        format!("[{name}]"),
        format!("[{head}.\"{last}\"]"),
        format!("[{head}.'{last}']"),
    ];
    candidates
        .iter()
        .filter_map(|c| text.find(c.as_str()))
        .min()
        .map_or(0..0, |at| at..at + 1)
}

/// Where `key = ...` of table `table` starts in `text` (the table's header when the key is
/// not found).
fn key_in_table(text: &str, table: &str, key: &str) -> std::ops::Range<usize> {
    let header = table_header(text, table);
    let mut at = header.start;
    for (i, line) in text[header.start..].split_inclusive('\n').enumerate() {
        if i > 0 {
            let trimmed = line.trim_start();
            if trimmed.starts_with('[') {
                break;
            }
            if trimmed
                .strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
            {
                let indent = line.len() - trimmed.len();
                return at + indent..at + indent + 1;
            }
        }
        at += line.len();
    }
    header
}

pub fn closest<'a>(word: &str, candidates: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    candidates
        .map(|c| {
            let edits = strsim::levenshtein(word, c);
            let close_edit = edits <= (c.chars().count() / 4).max(1);
            let score = strsim::jaro_winkler(word, c) + if close_edit { 0.2 } else { 0.0 };
            (score, c)
        })
        .filter(|(score, _)| *score >= 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, c)| c)
}

/// Line number (1-based) of a byte offset, and the key written on that line.
fn locate(text: &str, offset: usize) -> (usize, String) {
    let offset = offset.min(text.len());
    let line_no = text[..offset].matches('\n').count() + 1;
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line = text[line_start..].lines().next().unwrap_or("");
    let table = text[..line_start]
        .lines()
        .rev()
        .find_map(|l| {
            let l = l.trim();
            (l.starts_with('[') && l.ends_with(']')).then(|| l.trim_matches(['[', ']']).to_owned())
        })
        .unwrap_or_default();
    let key = line
        .split('=')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('"')
        .to_owned();
    let key = match (table.is_empty(), key.is_empty() || key.starts_with('[')) {
        (_, true) => {
            if table.is_empty() {
                "<top level>".to_owned()
            } else {
                table
            }
        }
        (true, false) => key,
        (false, false) => format!("{table}.{key}"),
    };
    (line_no, key)
}

/// What the policy lets callers see and call.
#[derive(Debug, Clone)]
pub struct ToolFilter {
    allow: GlobSet,
    deny: GlobSet,
    require_approval: GlobSet,
    exclude: GlobSet,
}

impl ToolFilter {
    pub fn allow_all() -> Self {
        Policy::builtin().tool_filter()
    }

    /// Allowed and not denied.
    pub fn is_visible(&self, tool: &str) -> bool {
        self.allow.is_match(tool) && !self.deny.is_match(tool)
    }

    pub fn requires_approval(&self, tool: &str) -> bool {
        self.require_approval.is_match(tool)
    }

    pub fn is_excluded_from_scripts(&self, tool: &str) -> bool {
        self.exclude.is_match(tool)
    }
}

/// The `[backends]` table: each section parsed by the type of its `kind` (unknown keys
/// refused), then checked by it; errors keep `file:line: backends.NAME.KEY`.
fn parse_backends(
    sections: Spanned<toml::de::DeValue<'_>>,
    text: &str,
    name: &str,
) -> Result<std::collections::BTreeMap<String, BackendConfig>, PolicyError> {
    use toml::de::DeValue;
    let invalid = |span: std::ops::Range<usize>, key: String, message: String| {
        let (line, _) = locate(text, span.start);
        PolicyError::Invalid {
            path: name.to_owned(),
            line,
            key,
            message,
        }
    };
    let span = sections.span();
    let DeValue::Table(table) = sections.into_inner() else {
        return Err(invalid(
            span,
            "backends".to_owned(),
            "must be a table of `[backends.NAME]` sections".to_owned(),
        ));
    };
    let mut backends = std::collections::BTreeMap::new();
    for (backend, section) in table {
        let backend = backend.get_ref().to_string();
        let key = |k: &str| format!("backends.{backend}.{k}");
        let at = section.span();
        let DeValue::Table(mut keys) = section.into_inner() else {
            return Err(invalid(
                at,
                format!("backends.{backend}"),
                "must be a table of the backend's keys".to_owned(),
            ));
        };
        let kinds = BackendConfig::kinds();
        let Some(kind) = keys.remove("kind") else {
            return Err(invalid(
                table_header(text, &format!("backends.{backend}")),
                format!("backends.{backend}"),
                format!("missing field `kind` (one of {})", kinds.join(", ")),
            ));
        };
        let kind_span = kind.span();
        let Some(kind) = kind.get_ref().as_str().map(str::to_owned) else {
            return Err(invalid(
                kind_span,
                key("kind"),
                format!("must be a string, one of {}", kinds.join(", ")),
            ));
        };
        let parsed = BackendConfig::parse(&kind, Spanned::new(at, DeValue::Table(keys)));
        let config = match parsed {
            None => {
                let hint = closest(&kind, kinds.iter().copied())
                    .map(|b| format!("; did you mean \"{b}\"?"))
                    .unwrap_or_default();
                return Err(invalid(
                    kind_span,
                    key("kind"),
                    format!("\"{kind}\" is not one of {}{hint}", kinds.join(", ")),
                ));
            }
            Some(Err(err)) => {
                let span = err.span().unwrap_or(kind_span);
                let (line, located) = locate(text, span.start);
                let message = err.message().trim();
                let canonical = BackendConfig::canonical(&kind).unwrap_or("?");
                return Err(PolicyError::Invalid {
                    path: name.to_owned(),
                    line,
                    key: located,
                    message: does_not_apply(message, canonical)
                        .unwrap_or_else(|| with_suggestion(message)),
                });
            }
            Some(Ok(config)) => config,
        };
        // Said why, before anything else: never a silent downgrade (nor, on docker, a network
        // of that name).
        if let Some(network) = config.network().filter(|n| n.get_ref() == "proxy")
            && let Some(why) = config.proxy_refusal()
        {
            return Err(invalid(
                network.span(),
                key("network"),
                format!("\"proxy\" cannot be had here: {why}"),
            ));
        }
        config.check().map_err(|err| match err {
            SectionError::Invalid {
                span,
                key: k,
                message,
            } => match span {
                Some(span) => invalid(span, key(k), message),
                // The section as a whole: at its `kind`.
                None => invalid(kind_span.clone(), format!("backends.{backend}"), message),
            },
            SectionError::NotOneOf {
                span,
                key: k,
                value,
                allowed,
            } => {
                let hint = closest(&value, allowed.iter().copied())
                    .map(|b| format!("; did you mean \"{b}\"?"))
                    .unwrap_or_default();
                invalid(
                    span,
                    key(k),
                    format!("\"{value}\" is not one of {}{hint}", allowed.join(", ")),
                )
            }
        })?;
        backends.insert(backend, config);
    }
    Ok(backends)
}

/// serde's "unknown field `x`, expected one of `a`, `b`" in a backend section, said as the
/// key that does not apply to that kind (with the closest key when it looks like a typo).
fn does_not_apply(message: &str, kind: &str) -> Option<String> {
    let rest = message.strip_prefix("unknown field `")?;
    let (unknown, expected) = rest.split_once('`')?;
    let keys: Vec<&str> = expected.split('`').skip(1).step_by(2).collect();
    let hint = closest(unknown, keys.iter().copied())
        .map(|best| format!("; did you mean `{best}`?"))
        .unwrap_or_default();
    Some(format!(
        "does not apply to a {kind} backend (its keys: {}){hint}",
        keys.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Policy::parse(text, "p.toml").unwrap_err().to_string()
    }

    /// Asserts `text` is refused with a message that starts with `start` (file:line: key: ...).
    #[track_caller]
    fn refused_starting(text: &str, start: &str) {
        let e = err(text);
        assert!(e.starts_with(start), "{e}");
    }

    #[track_caller]
    fn refused_containing(text: &str, fragment: &str) {
        let e = err(text);
        assert!(e.contains(fragment), "{e}");
    }

    #[track_caller]
    fn refused_ending(text: &str, end: &str) {
        let e = err(text);
        assert!(e.ends_with(end), "{e}");
    }

    #[test]
    fn the_network_section_of_design_parses_and_decides() {
        let policy = Policy::parse(
            r#"
[network]
allow = ["pypi.org", "*.pythonhosted.org"]
deny = ["evil.pythonhosted.org"]
unknown = "ask"
allow_private = false
[network.resolve]
"mirror.internal" = "10.1.2.3"
[[network.credentials]]
host = "api.github.com"
header = "Authorization"
value = "Bearer ${GITHUB_TOKEN}"
"#,
            "p.toml",
        )
        .unwrap();
        let egress = policy.network.egress().unwrap();
        use paddock_network::Verdict;
        assert!(matches!(
            egress.judge_name("files.pythonhosted.org"),
            Verdict::Allow { .. }
        ));
        assert!(matches!(
            egress.judge_name("evil.pythonhosted.org"),
            Verdict::Refuse(_)
        ));
        assert_eq!(egress.judge_name("example.com"), Verdict::Ask);
        assert_eq!(
            egress.pinned_or_literal("mirror.internal"),
            Some("10.1.2.3".parse().unwrap())
        );
    }

    #[test]
    fn e2b_keys_are_checked_and_expanded() {
        let policy = Policy::parse(
            "[e2b]\napi_keys = [\"e2b_00ff\", \"${PADDOCK_POLICY_TEST_E2B_KEY}\"]\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(policy.e2b.api_keys.len(), 2);
        // An unset variable is an error when the keys are used, naming it.
        let unset = policy.e2b.expanded_keys().unwrap_err();
        assert!(unset.contains("PADDOCK_POLICY_TEST_E2B_KEY"), "{unset}");
        let bad = Policy::parse("[e2b]\napi_keys = [\"sk-123\"]\n", "p.toml").unwrap_err();
        assert!(
            bad.to_string().starts_with("p.toml:2: e2b.api_keys:"),
            "{bad}"
        );
        assert!(is_e2b_key("e2b_0a"));
        assert!(!is_e2b_key("e2b_"));
        assert!(!is_e2b_key("e2b_xyz"));
    }

    #[test]
    fn bad_network_entries_are_refused_with_line_and_key() {
        for (text, want) in [
            (
                "[network]\nallow = [\"py*.org\"]\n",
                "p.toml:2: network.allow: host glob `py*.org`",
            ),
            (
                "[network]\nunknown = \"maybe\"\n",
                "p.toml:2: network.unknown: \"maybe\" is not one of deny, ask",
            ),
            (
                "[network.resolve]\n\"m.internal\" = \"somewhere\"\n",
                "p.toml:2: network.resolve.\"m.internal\": \"somewhere\" is not an IP address",
            ),
            (
                "[[network.credentials]]\nhost = \"a.b\"\nheader = \"Bad Header\"\nvalue = \"x\"\n",
                "p.toml:3: network.credentials.header: \"Bad Header\" is not an HTTP header name",
            ),
            (
                "[[network.credentials]]\nhost = \"a.b\"\nheader = \"X-Key\"\nvalue = \"${TOKEN\"\n",
                "p.toml:4: network.credentials.value: `${` without its closing `}`",
            ),
            ("[network]\nallowed = []\n", "unknown field `allowed`"),
        ] {
            let e = err(text);
            assert!(e.contains(want), "{text}\n{e}");
        }
    }

    #[test]
    fn network_proxy_is_had_where_the_route_can_be_taken_away_and_refused_elsewhere() {
        for (kind, extra) in [
            ("local", ""),
            ("docker", "image = \"x\"\n"),
            ("apptainer", "image = \"x.sif\"\n"),
            ("slurm", "image = \"x.sif\"\n"),
        ] {
            let text = format!("[backends.b]\nkind = \"{kind}\"\nnetwork = \"proxy\"\n{extra}");
            assert!(Policy::parse(&text, "p.toml").is_ok(), "{kind}");
        }
        for (kind, extra, why) in [
            ("ssh", "host = \"h\"\n", "an ssh host keeps its own network"),
            ("slurm", "", "a bare slurm job"),
            (
                "slurm",
                "image = \"x.sif\"\nrelay = \"tcp\"\n",
                "with a relay",
            ),
            (
                "slurm",
                "image = \"x.sif\"\nagent = false\n",
                "agent = false",
            ),
            ("local", "sandbox = \"none\"\n", "with sandbox = \"none\""),
            ("docker", "image = \"x\"\nagent = false\n", "agent = false"),
        ] {
            let e = err(&format!(
                "[backends.b]\nkind = \"{kind}\"\nnetwork = \"proxy\"\n{extra}"
            ));
            assert!(
                e.starts_with("p.toml:3: backends.b.network: \"proxy\" cannot be had here: ")
                    && e.contains(why),
                "{kind} {extra}: {e}"
            );
        }
    }

    #[test]
    fn idle_action_is_close_or_pause_and_pausing_comes_before_closing() {
        let p = Policy::parse(
            "[sessions]\nidle_timeout_seconds = 600\nidle_action = \"pause\"\npause_after_seconds = 60\n",
            "p",
        )
        .unwrap();
        assert_eq!(
            p.sessions.pause_after(),
            Some(std::time::Duration::from_secs(60))
        );
        assert_eq!(Policy::builtin().sessions.pause_after(), None);
        refused_starting(
            "[sessions]\nidle_action = \"sleep\"\n",
            "p.toml:2: sessions.idle_action: must be \"close\" or \"pause\"",
        );
        refused_starting(
            "[sessions]\nidle_timeout_seconds = 60\nidle_action = \"pause\"\npause_after_seconds = 60\n",
            "p.toml:4: sessions.pause_after_seconds: must be a positive number of seconds below idle_timeout_seconds (60)",
        );
    }

    #[test]
    fn builtin_default_is_valid_and_allows_everything() {
        let filter = Policy::builtin().tool_filter();
        assert!(filter.is_visible("anything"));
        assert!(!filter.requires_approval("anything"));
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        refused_starting(
            "[codemode]\ntimeout_seconds = 5\nmax_tool_cals = 3\n",
            "p.toml:3: codemode.max_tool_cals: unknown field",
        );
    }

    #[test]
    fn wrong_types_name_file_line_and_key() {
        refused_starting(
            "[codemode]\n\nmax_memory_mb = \"lots\"\n",
            "p.toml:3: codemode.max_memory_mb:",
        );
    }

    #[test]
    fn bad_globs_and_bad_values_are_refused() {
        refused_starting(
            "[tools]\ndeny = [\"ok\", \"bad[\"]\n",
            "p.toml:2: tools.deny: bad glob",
        );
        refused_starting(
            "[codemode]\ntimeout_seconds = -1\n",
            "p.toml:2: codemode.timeout_seconds: must be",
        );
    }

    #[test]
    fn max_result_chars_is_bounded_and_named_with_its_line() {
        refused_starting(
            "[tools]\nallow = [\"*\"]\nmax_result_chars = 10\n",
            "p.toml:3: tools.max_result_chars: must be between 5000 and 1000000",
        );
        refused_starting(
            "[tools]\nmax_result_chars = \"big\"\n",
            "p.toml:2: tools.max_result_chars:",
        );
        let p = Policy::parse("[tools]\nmax_result_chars = 8000\n", "p.toml").unwrap();
        assert_eq!(*p.tools.max_result_chars.get_ref(), 8000);
        let p = Policy::parse("", "p.toml").unwrap();
        assert_eq!(
            *p.tools.max_result_chars.get_ref(),
            DEFAULT_MAX_RESULT_CHARS
        );
    }

    #[test]
    fn unknown_tables_are_refused() {
        refused_containing("[codemod]\nenabled = true\n", "unknown field `codemod`");
    }

    #[test]
    fn unknown_keys_get_a_suggestion() {
        refused_ending(
            "[codemode]\nmax_tool_cals = 3\n",
            "did you mean `max_tool_calls`?",
        );
    }

    #[test]
    fn dangling_routes_name_the_line_and_the_defined_backends() {
        refused_starting(
            "[backends.box]\nkind = \"docker\"\nimage = \"debian:12\"\n[routes]\nterminal = \"bx\"\n",
            "p.toml:5: routes.terminal: no backend named \"bx\" (defined: box, local); did you mean \"box\"?",
        );
    }

    #[test]
    fn slurm_backends_take_job_keys_and_apptainer_keys_only_with_an_image() {
        let ok = "[backends.hpc]\nkind = \"slurm\"\npartition = \"gpu\"\ntime_limit = \"1-00:30:00\"\n\
                  cpus = 4\nmemory_mb = 8192\ngres = \"gpu:1\"\naccount = \"lab\"\n\
                  extra_args = [\"--qos=short\"]\nqueue_timeout_seconds = 60\n\
                  slurm_bin_dir = \"/opt/slurm/bin\"\n";
        assert!(Policy::parse(ok, "p.toml").is_ok());
        let with_image =
            format!("{ok}image = \"x.sif\"\nnetwork = \"host\"\nbinds = [\"/d:/d\"]\n");
        assert!(Policy::parse(&with_image, "p.toml").is_ok());
        let e = err("[backends.hpc]\nkind = \"slurm\"\nnetwork = \"host\"\n");
        assert!(
            e.starts_with(
                "p.toml:3: backends.hpc.network: applies to a slurm backend with `image`"
            ),
            "{e}"
        );
        refused_containing(
            "[backends.hpc]\nkind = \"slurm\"\ncpus = 1.5\n",
            "backends.hpc.cpus: Slurm allocates whole CPUs",
        );
        refused_containing(
            "[backends.hpc]\nkind = \"slurm\"\nagent = false\n",
            "backends.hpc.agent: a slurm session runs",
        );
        refused_containing(
            "[backends.hpc]\nkind = \"slurm\"\ntime_limit = \"1 hour\"\n",
            "is not a Slurm time",
        );
        for relay in ["none", "tcp", "srun"] {
            assert!(Policy::parse(&format!("{ok}relay = \"{relay}\"\n"), "p.toml").is_ok());
        }
        let e = err("[backends.hpc]\nkind = \"slurm\"\nrelay = \"ssh\"\n");
        assert!(
            e.starts_with("p.toml:3: backends.hpc.relay:") && e.contains("srun"),
            "{e}"
        );
        refused_containing(
            "[backends.hpc]\nkind = \"docker\"\nimage = \"i\"\nrelay = \"srun\"\n",
            "backends.hpc.relay: does not apply to a docker backend",
        );
        refused_containing(
            "[backends.hpc]\nkind = \"docker\"\nimage = \"i\"\npartition = \"p\"\n",
            "backends.hpc.partition: does not apply to a docker backend",
        );
    }

    #[test]
    fn backend_keys_must_fit_the_kind() {
        refused_starting(
            "[backends.remote]\nkind = \"ssh\"\nhost = \"h\"\nimage = \"x\"\n",
            "p.toml:4: backends.remote.image: does not apply to a ssh backend",
        );
        refused_containing(
            "[backends.c]\nkind = \"docker\"\n",
            "a docker backend needs `image`",
        );
        let e = err("[backends.l]\nkind = \"local\"\nsandbox = \"none\"\nagent = true\n");
        assert!(
            e.contains(":4: backends.l.agent") && e.contains("sandbox"),
            "{e}"
        );
        let e = err("[backends.d]\nkind = \"docker\"\nimage = \"x\"\nagent = false\nwarm = 2\n");
        assert!(
            e.contains(":5: backends.d.warm") && e.contains("agent = true"),
            "{e}"
        );
        refused_containing(
            "[backends.c]\nkind = \"dokcer\"\n",
            "did you mean \"docker\"",
        );
    }

    #[test]
    fn mcp_servers_need_exactly_one_transport() {
        refused_containing(
            "[mcp.servers.files]\ncommand = \"x\"\nurl = \"http://a\"\n",
            "not both",
        );
        refused_containing("[mcp.servers.files]\nargs = []\n", "needs `command`");
    }

    #[test]
    fn retired_tool_names_are_refused_with_the_reason() {
        refused_starting(
            "[tools]\ndeny = [\"execute_code\"]\n",
            "p.toml:2: tools.deny: tool 'execute_code' no longer exists: it was renamed to 'run_tools_script'",
        );
    }

    #[test]
    fn toolsets_accept_old_names_and_refuse_unknown_ones() {
        Policy::parse("[toolsets]\nenabled = [\"basic\", \"codemode\"]\n", "p").unwrap();
        refused_containing(
            "[toolsets]\ndisabled = [\"enviroment\"]\n",
            "did you mean \"environment\"",
        );
        refused_starting(
            "[toolsets]\npreset = \"tiny\"\n",
            "p.toml:2: toolsets.preset:",
        );
    }

    #[test]
    fn approval_packs_are_checked() {
        refused_starting(
            "[approval]\npacks = [\"core\", \"clod\"]\n",
            "p.toml:2: approval.packs: \"clod\" is not one of core, cloud",
        );
        assert!(Policy::parse("[approval]\npacks = [\"core\", \"databases\"]\n", "p").is_ok());
    }

    #[test]
    fn approval_mode_is_checked() {
        refused_starting(
            "[approval]\nmode = \"maybe\"\n",
            "p.toml:2: approval.mode: \"maybe\" is not one of ask, deny, allow",
        );
    }

    #[test]
    fn sessions_idle_timeout_defaults_and_must_be_positive() {
        let p = Policy::builtin();
        assert_eq!(p.sessions.idle_timeout().as_secs(), 1800);
        let p = Policy::parse("[sessions]\nidle_timeout_seconds = 1\n", "p").unwrap();
        assert_eq!(p.sessions.idle_timeout().as_secs(), 1);
        for bad in ["0", "-5"] {
            refused_starting(
                &format!("[sessions]\n\nidle_timeout_seconds = {bad}\n"),
                "p.toml:3: sessions.idle_timeout_seconds: must be a positive",
            );
        }
        let e = err("[sessions]\nidle_timeout = 5\n");
        assert!(e.starts_with("p.toml:2: sessions.idle_timeout:"), "{e}");
        assert!(e.contains("did you mean `idle_timeout_seconds`?"), "{e}");
    }

    #[test]
    fn filter_applies_globs() {
        let p = Policy::parse(
            "[tools]\nallow = [\"*\"]\ndeny = [\"memory_*\"]\nrequire_approval = [\"wait\"]\n\
             [codemode]\nexclude = [\"current_*\"]\n",
            "p",
        )
        .unwrap();
        let f = p.tool_filter();
        assert!(!f.is_visible("memory_write"));
        assert!(f.is_visible("wait"));
        assert!(f.requires_approval("wait"));
        assert!(f.is_excluded_from_scripts("current_datetime"));
    }
}
