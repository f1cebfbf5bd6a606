//! Hostile probes: `paddock __sandbox-probe` (being written).

/// Runs one probe; answers the process exit status.
pub fn main(args: &[String]) -> i32 {
    let _ = args;
    2
}
