//! Landlock: no file-system or network right at all.

use landlock::{
    ABI, Access, AccessFs, AccessNet, CompatLevel, Compatible, RulesetAttr, RulesetStatus, Scope,
};

use super::ConfineError;

/// Handles every file-system (ABI 5) and TCP (ABI 4) right with no rule, and scopes abstract
/// UNIX sockets and signals (ABI 6). Requires full enforcement.
pub fn restrict_everything() -> Result<&'static str, ConfineError> {
    if super::simulated_missing("landlock") {
        return Err(ConfineError::Missing {
            feature: "landlock",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    let not_enforced = |e: landlock::RulesetError| ConfineError::LandlockNotEnforced(e.to_string());
    let status = landlock::Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::from_all(ABI::V5))
        .map_err(not_enforced)?
        .handle_access(AccessNet::from_all(ABI::V4))
        .map_err(not_enforced)?
        .scope(Scope::from_all(ABI::V6))
        .map_err(not_enforced)?
        .create()
        .map_err(not_enforced)?
        .restrict_self()
        .map_err(not_enforced)?;
    match status.ruleset {
        RulesetStatus::FullyEnforced => Ok("fully-enforced"),
        RulesetStatus::PartiallyEnforced => Err(ConfineError::LandlockNotEnforced(
            "partially enforced".into(),
        )),
        RulesetStatus::NotEnforced => Err(ConfineError::LandlockNotEnforced("not enforced".into())),
    }
}
