//! Benchmarks of Paddock. `cargo bench -p paddock-benches` runs the same measurements as
//! `paddock bench` (see the engine's `bench` module) against the built `paddock` binary.
