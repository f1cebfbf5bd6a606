//! What the approval gate decides, typed: a command is allowed, asked about or denied, and when
//! several answers meet (a rule's severity, the policy's mode, a standing approval) the
//! strictest wins. No decision is ever read from a string after the policy is loaded.

use serde::Serialize;

/// The gate's answer for one command, ordered from most to least permissive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

impl Decision {
    /// The stricter of two decisions.
    pub fn strictest(self, other: Decision) -> Decision {
        self.max(other)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Ask => "ask",
            Decision::Deny => "deny",
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `[approval] mode`: what a command a rule flags gets when nothing else decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ApprovalMode {
    /// Ask a human (denied when nobody can be asked).
    Ask,
    /// Deny without asking.
    Deny,
    /// Allow without asking (hardline rules still deny).
    Allow,
}

impl ApprovalMode {
    /// The decision for a flagged command under this mode.
    pub fn decision(self) -> Decision {
        match self {
            ApprovalMode::Ask => Decision::Ask,
            ApprovalMode::Deny => Decision::Deny,
            ApprovalMode::Allow => Decision::Allow,
        }
    }
}

impl std::str::FromStr for ApprovalMode {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "ask" => Ok(ApprovalMode::Ask),
            "deny" => Ok(ApprovalMode::Deny),
            "allow" => Ok(ApprovalMode::Allow),
            other => Err(format!(
                "[approval] mode \"{other}\" is not one of ask, deny, allow"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strictest_decision_wins_in_any_order() {
        use Decision::*;
        for (a, b, strictest) in [
            (Allow, Ask, Ask),
            (Ask, Deny, Deny),
            (Allow, Deny, Deny),
            (Allow, Allow, Allow),
        ] {
            assert_eq!(a.strictest(b), strictest);
            assert_eq!(b.strictest(a), strictest);
        }
    }

    #[test]
    fn decisions_serialise_as_the_words_callers_read() {
        assert_eq!(serde_json::to_string(&Decision::Ask).unwrap(), "\"ask\"");
        assert_eq!(Decision::Deny.to_string(), "deny");
    }

    #[test]
    fn an_unknown_mode_is_an_error_not_ask() {
        assert_eq!("deny".parse::<ApprovalMode>(), Ok(ApprovalMode::Deny));
        let err = "maybe".parse::<ApprovalMode>().unwrap_err();
        assert!(err.contains("not one of ask, deny, allow"), "{err}");
    }
}
