//! The decision for one destination of a proxied environment: its name against `deny` (wins)
//! and `allow`, a name in neither against `unknown`; then the addresses it resolved to (or the
//! literal it is) against `allow_private`, where a pinned name (`[network.resolve]`) may be
//! private: the operator said where it goes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use crate::address::{classify, parse_ip_literal};
use crate::hosts::{HostGlob, HostGlobError, normalize};

/// What a host in neither list gets (`[network] unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unknown {
    #[default]
    Deny,
    /// A human is asked (once / session / always); denied when nobody answers.
    Ask,
}

/// `[network]` as the proxy uses it.
#[derive(Debug, Clone, Default)]
pub struct EgressPolicy {
    pub allow: Vec<HostGlob>,
    pub deny: Vec<HostGlob>,
    pub unknown: Unknown,
    pub allow_private: bool,
    /// Pinned names, normalised, and where they go.
    pub pins: BTreeMap<String, IpAddr>,
}

/// Why a destination is refused: the rule (as `network.deny: GLOB` and the like) and a
/// sentence for the 403 body and the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub rule: String,
    pub reason: String,
}

/// The decision on a host's name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Allowed by this rule (`network.allow: GLOB`); its addresses are checked next.
    Allow {
        rule: String,
    },
    /// In neither list and `unknown = "ask"`: a human decides; its addresses are checked
    /// after a yes.
    Ask,
    Refuse(Refusal),
}

impl EgressPolicy {
    /// The policy of `[network]`'s keys, each glob and pin checked (an error names the entry).
    pub fn new(
        allow: &[String],
        deny: &[String],
        unknown: Unknown,
        allow_private: bool,
        pins: &BTreeMap<String, String>,
    ) -> Result<Self, PolicyEntryError> {
        let globs = |list: &[String], key: &'static str| {
            list.iter()
                .map(|g| HostGlob::parse(g).map_err(|e| PolicyEntryError::Glob(key, e)))
                .collect::<Result<Vec<_>, _>>()
        };
        let mut pinned = BTreeMap::new();
        for (name, addr) in pins {
            let ip = parse_ip_literal(addr).ok_or_else(|| PolicyEntryError::Pin {
                name: name.clone(),
                value: addr.clone(),
            })?;
            pinned.insert(normalize(name), ip);
        }
        Ok(Self {
            allow: globs(allow, "allow")?,
            deny: globs(deny, "deny")?,
            unknown,
            allow_private,
            pins: pinned,
        })
    }

    /// The name's rules: `deny` first (it wins), then `allow`, then `unknown`.
    pub fn judge_name(&self, host: &str) -> Verdict {
        if let Some(glob) = self.deny.iter().find(|g| g.matches(host)) {
            return Verdict::Refuse(Refusal {
                rule: format!("network.deny: {glob}"),
                reason: format!("{host} matches `{glob}` in [network] deny"),
            });
        }
        if let Some(glob) = self.allow.iter().find(|g| g.matches(host)) {
            return Verdict::Allow {
                rule: format!("network.allow: {glob}"),
            };
        }
        match self.unknown {
            Unknown::Ask => Verdict::Ask,
            Unknown::Deny => Verdict::Refuse(Refusal {
                rule: "network.unknown".into(),
                reason: format!(
                    "{host} is in neither [network] allow nor deny, and unknown = \"deny\"; add \
                     it to allow in the policy"
                ),
            }),
        }
    }

    /// Where `host` goes without asking a resolver: its pin, or the literal address it is.
    pub fn pinned_or_literal(&self, host: &str) -> Option<IpAddr> {
        self.pins
            .get(&normalize(host))
            .copied()
            .or_else(|| parse_ip_literal(host))
    }

    /// The addresses a name resolved to (or its literal): every one must be public, unless
    /// the name is pinned or `allow_private` is set. Answers the addresses to connect to.
    pub fn judge_addresses(&self, host: &str, resolved: &[IpAddr]) -> Result<(), Refusal> {
        if self.allow_private || self.pins.contains_key(&normalize(host)) {
            return Ok(());
        }
        if resolved.is_empty() {
            return Err(Refusal {
                rule: "network.resolve".into(),
                reason: format!("{host} resolves to no address"),
            });
        }
        match resolved
            .iter()
            .map(|a| (a, classify(*a)))
            .find(|(_, class)| !class.is_public())
        {
            None => Ok(()),
            Some((addr, class)) => Err(Refusal {
                rule: "network.allow_private".into(),
                reason: format!(
                    "{host} resolves to {addr}, {}; such destinations are refused unless the \
                     name is pinned in [network.resolve] or allow_private = true",
                    class.describe()
                ),
            }),
        }
    }
}

/// A `[network]` entry that is not valid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyEntryError {
    #[error("{0}: {1}")]
    Glob(&'static str, HostGlobError),
    #[error("resolve.\"{name}\" = \"{value}\" is not an IP address")]
    Pin { name: String, value: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str], unknown: Unknown) -> EgressPolicy {
        let owned = |l: &[&str]| l.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        let pins = BTreeMap::from([("mirror.internal".to_owned(), "10.1.2.3".to_owned())]);
        EgressPolicy::new(&owned(allow), &owned(deny), unknown, false, &pins).unwrap()
    }

    #[test]
    fn deny_wins_over_allow_and_unknown_decides_the_rest() {
        let p = policy(
            &["*.pythonhosted.org", "pypi.org"],
            &["evil.pythonhosted.org"],
            Unknown::Deny,
        );
        assert_eq!(
            p.judge_name("files.pythonhosted.org"),
            Verdict::Allow {
                rule: "network.allow: *.pythonhosted.org".into()
            }
        );
        let Verdict::Refuse(r) = p.judge_name("EVIL.pythonhosted.org") else {
            panic!("deny must win")
        };
        assert_eq!(r.rule, "network.deny: evil.pythonhosted.org");
        let Verdict::Refuse(r) = p.judge_name("example.com") else {
            panic!("unknown = deny")
        };
        assert_eq!(r.rule, "network.unknown");
        assert!(r.reason.contains("example.com"), "{}", r.reason);
        let ask = policy(&[], &[], Unknown::Ask);
        assert_eq!(ask.judge_name("example.com"), Verdict::Ask);
    }

    #[test]
    fn private_destinations_are_refused_unless_pinned() {
        let p = policy(&["*"], &[], Unknown::Deny);
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        let public: IpAddr = "151.101.0.223".parse().unwrap();
        assert_eq!(p.judge_addresses("pypi.org", &[public]), Ok(()));
        // A public name whose answer points inside (DNS rebinding) is refused, naming why.
        let err = p
            .judge_addresses("rebind.example", &[public, loopback])
            .unwrap_err();
        assert_eq!(err.rule, "network.allow_private");
        assert!(
            err.reason.contains("127.0.0.1, a loopback address"),
            "{}",
            err.reason
        );
        // A literal, however spelled.
        let literal = p.pinned_or_literal("0x7f.1").unwrap();
        assert!(p.judge_addresses("0x7f.1", &[literal]).is_err());
        let metadata = p.pinned_or_literal("169.254.169.254").unwrap();
        assert!(p.judge_addresses("169.254.169.254", &[metadata]).is_err());
        // A pin goes where the operator said, private or not.
        let pinned = p.pinned_or_literal("Mirror.Internal.").unwrap();
        assert_eq!(pinned, "10.1.2.3".parse::<IpAddr>().unwrap());
        assert_eq!(p.judge_addresses("mirror.internal", &[pinned]), Ok(()));
        assert!(p.judge_addresses("nothing.example", &[]).is_err());
    }

    #[test]
    fn bad_entries_are_named() {
        let err = EgressPolicy::new(
            &["py*.org".into()],
            &[],
            Unknown::Deny,
            false,
            &BTreeMap::new(),
        )
        .unwrap_err();
        assert!(
            err.to_string().starts_with("allow: host glob `py*.org`"),
            "{err}"
        );
        let pins = BTreeMap::from([("m".to_owned(), "not-an-ip".to_owned())]);
        let err = EgressPolicy::new(&[], &[], Unknown::Deny, false, &pins).unwrap_err();
        assert_eq!(
            err.to_string(),
            "resolve.\"m\" = \"not-an-ip\" is not an IP address"
        );
    }
}
