//! End-to-end test crate: see tests/all.rs
