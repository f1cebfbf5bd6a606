//! Operator policy files (TOML). See DESIGN.md section 5 and `policies/`.
//!
//! Unknown keys, wrong types and bad globs are errors that name the file, the line and the key.
//! A missing policy is the built-in default.

use std::path::{Path, PathBuf};

use globset::{Glob, GlobSet, GlobSetBuilder};
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
}

impl Default for ToolsConfig {
    fn default() -> Self {
        Self {
            allow: vec![Spanned::new(0..0, "*".into())],
            deny: Vec::new(),
            require_approval: Vec::new(),
        }
    }
}

/// A whole policy file.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Policy {
    pub codemode: CodemodeConfig,
    pub tools: ToolsConfig,
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
        let policy: Policy = toml::from_str(text).map_err(|err| {
            let span = err.span().unwrap_or(0..0);
            let (line, key) = locate(text, span.start);
            PolicyError::Invalid {
                path: name.to_owned(),
                line,
                key,
                message: err.message().trim().to_owned(),
            }
        })?;
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
        if *c.max_concurrency.get_ref() == 0 {
            return Err(invalid(
                c.max_concurrency.span(),
                "codemode.max_concurrency",
                "must be at least 1".into(),
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
            }
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    fn err(text: &str) -> String {
        Policy::parse(text, "p.toml").unwrap_err().to_string()
    }

    #[test]
    fn builtin_default_is_valid_and_allows_everything() {
        let filter = Policy::builtin().tool_filter();
        assert!(filter.is_visible("anything"));
        assert!(!filter.requires_approval("anything"));
    }

    #[test]
    fn unknown_keys_name_file_line_and_key() {
        let e = err("[codemode]\ntimeout_seconds = 5\nmax_tool_cals = 3\n");
        assert!(
            e.starts_with("p.toml:3: codemode.max_tool_cals: unknown field"),
            "{e}"
        );
    }

    #[test]
    fn wrong_types_name_file_line_and_key() {
        let e = err("[codemode]\n\nmax_memory_mb = \"lots\"\n");
        assert!(e.starts_with("p.toml:3: codemode.max_memory_mb:"), "{e}");
    }

    #[test]
    fn bad_globs_and_bad_values_are_refused() {
        let e = err("[tools]\ndeny = [\"ok\", \"bad[\"]\n");
        assert!(e.starts_with("p.toml:2: tools.deny: bad glob"), "{e}");
        let e = err("[codemode]\ntimeout_seconds = -1\n");
        assert!(
            e.starts_with("p.toml:2: codemode.timeout_seconds: must be"),
            "{e}"
        );
    }

    #[test]
    fn unknown_tables_are_refused() {
        let e = err("[codemod]\nenabled = true\n");
        assert!(e.contains("unknown field `codemod`"), "{e}");
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
