//! Keeping secrets out of receipts: values of environment variables whose names look like
//! credentials, and common token shapes.

/// Names that mark a variable's value as secret.
const SECRET_NAME_PARTS: &[&str] = &[
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "API_KEY",
    "APIKEY",
    "PRIVATE_KEY",
    "CREDENTIAL",
    "ACCESS_KEY",
    "AUTH",
];

/// Token prefixes and the minimum length of what follows.
const TOKEN_PREFIXES: &[(&str, usize)] = &[
    ("ghp_", 20),
    ("gho_", 20),
    ("ghs_", 20),
    ("ghu_", 20),
    ("github_pat_", 20),
    ("sk-", 20),
    ("xoxb-", 10),
    ("xoxp-", 10),
    ("xoxa-", 10),
    ("AKIA", 16),
    ("glpat-", 20),
    ("Bearer ", 16),
];

pub const MARK: &str = "[REDACTED]";

/// True when an environment variable's name says its value is secret.
pub fn is_secret_name(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    SECRET_NAME_PARTS.iter().any(|p| upper.contains(p)) || upper.ends_with("_KEY")
}

/// Replaces secret values (`secrets`, at least 4 characters long) and token shapes in `text`.
pub fn redact(text: &str, secrets: &[String]) -> String {
    let mut out = text.to_owned();
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        out = out.replace(secret.as_str(), MARK);
    }
    for (prefix, min) in TOKEN_PREFIXES {
        let mut result = String::with_capacity(out.len());
        let mut rest = out.as_str();
        while let Some(at) = rest.find(prefix) {
            let after = &rest[at + prefix.len()..];
            let len = after
                .char_indices()
                .find(|(_, c)| {
                    !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/' | '+' | '='))
                })
                .map_or(after.len(), |(i, _)| i);
            result.push_str(&rest[..at]);
            if len >= *min {
                result.push_str(prefix);
                result.push_str(MARK);
            } else {
                result.push_str(&rest[at..at + prefix.len() + len]);
            }
            rest = &after[len..];
        }
        result.push_str(rest);
        out = result;
    }
    out
}

/// Secret values among `vars`.
pub fn secret_values<'a>(vars: impl Iterator<Item = (&'a str, &'a str)>) -> Vec<String> {
    vars.filter(|(k, v)| is_secret_name(k) && v.len() >= 4)
        .map(|(_, v)| v.to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_values_and_token_shapes_are_replaced() {
        let text = "key=supersecretvalue token ghp_abcdefghijklmnopqrstuvwxyz0123 and sk-short ok";
        let out = redact(text, &["supersecretvalue".into()]);
        assert_eq!(out, "key=[REDACTED] token ghp_[REDACTED] and sk-short ok");
        assert!(
            is_secret_name("GITHUB_TOKEN")
                && is_secret_name("db_password")
                && is_secret_name("AWS_SECRET_ACCESS_KEY")
        );
        assert!(!is_secret_name("PATH"));
    }
}
