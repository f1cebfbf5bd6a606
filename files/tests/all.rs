//! Integration tests of paddock-files: one binary, one module per tool family.
// clippy.toml allows unwrap/expect in `#[test]` functions only; the fixtures' helpers
// (tree builders, snapshots, the `rg` runner) are test code too.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failed fixture step should panic the test"
)]

mod suite;
