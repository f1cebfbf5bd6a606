//! The proptest settings of every property suite in the workspace: the agent's protocol frames
//! here, and the engine's policy files and tool arguments, which include this file with
//! `#[path]` (test crates share no library to hold it).

use proptest::test_runner::Config;

/// 256 cases per property, unless `PROPTEST_CASES` says otherwise.
pub fn config() -> Config {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(256);
    Config {
        cases,
        // Failures are reported with their shrunk input; no regression files in the tree.
        failure_persistence: None,
        ..Config::default()
    }
}
