//! End-to-end suites against the real `paddock` binary (one link step for all of them).

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a failed test"
)]

mod suite;
