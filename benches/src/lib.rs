//! Benchmarks crate
