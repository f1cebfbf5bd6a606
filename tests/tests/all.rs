//! End-to-end suites against the real `paddock` binary (one link step for all of them).

mod suite;
