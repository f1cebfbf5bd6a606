//! Fresh random ids for runs and background processes.

/// A new random id (runs and background processes).
pub fn new_run_id(prefix: &str) -> String {
    let mut random = [0u8; 8];
    let _ = rustix::rand::getrandom(&mut random, rustix::rand::GetRandomFlags::empty());
    format!("{prefix}{}", hex::encode(random))
}
