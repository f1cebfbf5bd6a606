//! Names of what Paddock makes outside its state directory, where other engines see it too
//! (docker containers, Apptainer instances, Slurm jobs): `paddock-<backend>-<owner>-<session>`.
//!
//! The owner is the start of the state directory's digest: two engines with different
//! `PADDOCK_HOME`s (two users of one dockerd, or one user's two projects) that use the same
//! backend and session names get different environments, and neither finds, replaces nor
//! sweeps the other's.

use std::path::Path;

use sha2::{Digest, Sha256};

/// How many hex digits of the state directory's digest a name carries.
pub(crate) const OWNER_CHARS: usize = 8;

/// The owner part of names made by the engine whose state directory is `state_root`.
pub fn owner_of(state_root: &Path) -> String {
    let digest = Sha256::digest(state_root.as_os_str().as_encoded_bytes());
    hex::encode(&digest[..OWNER_CHARS / 2])
}

/// What every name of `backend` made for `owner` starts with.
pub fn name_prefix(backend: &str, owner: &str) -> String {
    format!("paddock-{backend}-{owner}-")
}

/// The environment of `session` (`ID.python`, the session `python_execute` runs in, shares
/// `ID`'s).
pub fn environment_name(backend: &str, owner: &str, session: &str) -> String {
    format!("{}{}", name_prefix(backend, owner), base_session(session))
}

/// The session python_execute of session `id` runs in on every backend: its own shell state
/// (and on the local backend its own sandbox), in `id`'s environment elsewhere, closed and kept
/// alive with `id`.
pub fn python_session(id: &str) -> String {
    format!("{id}{PYTHON_SUFFIX}")
}

const PYTHON_SUFFIX: &str = ".python";

/// The session whose environment `ID.python` uses.
pub fn base_session(session: &str) -> &str {
    session.strip_suffix(PYTHON_SUFFIX).unwrap_or(session)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_state_directory() {
        let one = owner_of(Path::new("/home/a/.local/state/paddock"));
        let two = owner_of(Path::new("/home/b/.local/state/paddock"));
        assert_eq!(one.len(), OWNER_CHARS);
        assert_ne!(one, two);
        assert_ne!(
            environment_name("docker", &one, "default"),
            environment_name("docker", &two, "default")
        );
        assert_eq!(
            environment_name("docker", &one, "s.python"),
            environment_name("docker", &one, "s")
        );
        assert!(environment_name("hpc", &one, "s").starts_with(&name_prefix("hpc", &one)));
    }
}
