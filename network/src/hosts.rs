//! Host globs of `[network] allow` and `deny`.
//!
//! A glob is `*` (every host), `*.example.com` (every subdomain of example.com, not
//! example.com itself) or an exact name. Names compare without case and without a trailing
//! dot (`PyPI.org.` is `pypi.org`). Anything else with a `*` is refused when the policy is
//! loaded, naming the glob: a silent non-match would be a rule that never applies.

/// A glob that is not one of the three shapes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostGlobError {
    #[error("host glob is empty")]
    Empty,
    #[error(
        "host glob `{0}`: `*` may only stand alone or lead as `*.` (`*.example.com` matches \
         its subdomains)"
    )]
    Wildcard(String),
    #[error("host glob `{0}`: `{1}` is not allowed in a host name")]
    Character(String, char),
    #[error("host glob `{0}` is not a host name (empty labels)")]
    Malformed(String),
}

/// One parsed glob.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostGlob {
    Any,
    /// Subdomains of this name (lower case, no trailing dot).
    SubdomainsOf(String),
    Exact(String),
}

/// `name` as globs and hosts compare: lower case, without a trailing dot.
pub fn normalize(name: &str) -> String {
    name.trim_end_matches('.').to_ascii_lowercase()
}

impl HostGlob {
    pub fn parse(text: &str) -> Result<Self, HostGlobError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(HostGlobError::Empty);
        }
        if trimmed == "*" {
            return Ok(Self::Any);
        }
        let (sub, name) = match trimmed.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        if name.contains('*') || name.is_empty() {
            return Err(HostGlobError::Wildcard(text.to_owned()));
        }
        // Names, and IP literals (`10.0.0.1`, `[::1]` or `::1`).
        if let Some(bad) = name.chars().find(|c| {
            !(c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':' | '[' | ']'))
        }) {
            return Err(HostGlobError::Character(text.to_owned(), bad));
        }
        let name = normalize(name.trim_start_matches('[').trim_end_matches(']'));
        if name.is_empty() || name.starts_with('.') || name.contains("..") {
            return Err(HostGlobError::Malformed(text.to_owned()));
        }
        Ok(if sub {
            Self::SubdomainsOf(name)
        } else {
            Self::Exact(name)
        })
    }

    /// Whether `host` (any case, trailing dot or not) matches.
    pub fn matches(&self, host: &str) -> bool {
        let host = normalize(host.trim_start_matches('[').trim_end_matches(']'));
        match self {
            Self::Any => true,
            Self::Exact(name) => host == *name,
            Self::SubdomainsOf(name) => host
                .strip_suffix(name.as_str())
                .is_some_and(|head| head.len() > 1 && head.ends_with('.')),
        }
    }
}

impl std::fmt::Display for HostGlob {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Any => f.write_str("*"),
            Self::SubdomainsOf(name) => write!(f, "*.{name}"),
            Self::Exact(name) => f.write_str(name),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn glob(text: &str) -> HostGlob {
        HostGlob::parse(text).unwrap()
    }

    #[test]
    fn the_three_shapes_match_as_documented() {
        assert!(glob("pypi.org").matches("PyPI.org."));
        assert!(!glob("pypi.org").matches("files.pypi.org"));
        assert!(glob("*.pythonhosted.org").matches("files.pythonhosted.org"));
        assert!(glob("*.pythonhosted.org").matches("a.b.pythonhosted.org"));
        // Subdomains only, and not a name that merely ends the same way.
        assert!(!glob("*.pythonhosted.org").matches("pythonhosted.org"));
        assert!(!glob("*.pythonhosted.org").matches("evilpythonhosted.org"));
        assert!(glob("*").matches("anything.example"));
        assert!(glob("[::1]").matches("::1"));
        assert!(glob("10.0.0.1").matches("10.0.0.1"));
    }

    #[test]
    fn other_wildcards_and_characters_are_refused_naming_the_glob() {
        for bad in [
            "py*.org",
            "*pypi.org",
            "a.*.org",
            "*.",
            "pypi.org/simple",
            "a b",
            ".",
            "a..b",
            ".pypi.org",
            "[]",
        ] {
            let err = HostGlob::parse(bad).unwrap_err();
            assert!(err.to_string().contains(bad), "{bad}: {err}");
        }
        assert_eq!(HostGlob::parse("  "), Err(HostGlobError::Empty));
    }

    proptest! {
        #[test]
        fn a_subdomain_glob_matches_exactly_the_names_under_it(
            labels in proptest::collection::vec("[a-z0-9-]{1,8}", 1..4),
            base in "[a-z]{1,8}\\.(org|com)",
            upper in any::<bool>(),
        ) {
            let g = glob(&format!("*.{base}"));
            let name = format!("{}.{base}", labels.join("."));
            let name = if upper { name.to_ascii_uppercase() } else { name };
            prop_assert!(g.matches(&name));
            prop_assert!(!g.matches(&base));
            // Glued on without a dot, it is another domain.
            let glued = format!("{}{base}", labels[0]);
            prop_assert!(!g.matches(&glued));
        }

        #[test]
        fn parsing_any_text_never_panics_and_display_parses_back(text in "\\PC{0,24}") {
            if let Ok(g) = HostGlob::parse(&text) {
                prop_assert_eq!(HostGlob::parse(&g.to_string()).unwrap(), g);
            }
        }
    }
}
