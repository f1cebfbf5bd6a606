//! Finding the static `paddock-agent` binary that is placed into containers, instances and
//! remote hosts.
//!
//! In order: `$PADDOCK_AGENT_BIN` (alone: a wrong path is an error, never a quiet fallback), a
//! static `paddock-agent` beside the engine (an operator's own build), and the agent this
//! binary carries (build.rs compiles it with the crate), written once into the state directory
//! as `agent-bin/paddock-agent-<id>` so that environments can bind or copy it.

use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The environment variable that names the agent binary explicitly.
pub const AGENT_BIN_ENV: &str = "PADDOCK_AGENT_BIN";

/// The agent this binary was built with: empty when the build could not make it
/// ([`EMBEDDED_MISSING`] says why).
static EMBEDDED: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/paddock-agent"));
/// A hash of [`EMBEDDED`], computed by build.rs.
const EMBEDDED_ID: &str = env!("PADDOCK_EMBEDDED_AGENT_ID");
/// Why the build carries no agent; empty when it does.
const EMBEDDED_MISSING: &str = env!("PADDOCK_EMBEDDED_AGENT_MISSING");

/// A static agent binary on this machine, and an identity that changes when it is rebuilt
/// (size and modification time: cheap enough for every engine start).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentBinary {
    pub path: PathBuf,
    pub identity: String,
}

/// Where the agent was looked for, for the error that says it is missing.
#[derive(Debug, Clone)]
pub struct NotFound {
    pub looked_in: Vec<PathBuf>,
    /// Why the agent this binary carries could not be used (not built in, or not written out).
    pub embedded: Option<String>,
}

impl NotFound {
    /// How to fix it, for an error message.
    pub fn explain(&self) -> String {
        let places = self
            .looked_in
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ");
        let embedded = self
            .embedded
            .as_deref()
            .map(|why| format!("; the agent this paddock carries: {why}"))
            .unwrap_or_default();
        format!(
            "the static paddock-agent binary was not found (looked in: {places}{embedded}); \
             build it with scripts/build-agent.sh, point {AGENT_BIN_ENV} at it, or set \
             `agent = false` on the backend to run every command through the backend's own client"
        )
    }
}

/// The agent for `engine_exe`, whose state directory is `state_root`: `$PADDOCK_AGENT_BIN`,
/// else a static `paddock-agent` beside the engine, else the one this binary carries.
pub fn find(engine_exe: &Path, state_root: &Path) -> Result<AgentBinary, NotFound> {
    if let Some(explicit) = std::env::var_os(AGENT_BIN_ENV) {
        let path = PathBuf::from(explicit);
        return on_disk(&path).ok_or(NotFound {
            looked_in: vec![path],
            embedded: None,
        });
    }
    let beside = engine_exe.parent().map(|dir| dir.join("paddock-agent"));
    if let Some(found) = beside.as_deref().and_then(on_disk) {
        return Ok(found);
    }
    embedded(state_root).map_err(|why| NotFound {
        looked_in: beside.into_iter().collect(),
        embedded: Some(why),
    })
}

/// `path` when it is a static agent binary, with its identity.
fn on_disk(path: &Path) -> Option<AgentBinary> {
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || !is_static_elf(path) {
        return None;
    }
    let modified = meta
        .modified()
        .ok()
        .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Some(AgentBinary {
        path: path.to_path_buf(),
        identity: format!("{}-{modified}", meta.len()),
    })
}

/// The carried agent, written to `<state_root>/agent-bin/paddock-agent-<id>` unless a complete
/// copy is there already (written whole under another name, then renamed: a reader never sees
/// half of it).
fn embedded(state_root: &Path) -> Result<AgentBinary, String> {
    if EMBEDDED.is_empty() {
        return Err(format!("this build has none ({EMBEDDED_MISSING})"));
    }
    let dir = state_root.join("agent-bin");
    let path = dir.join(format!("paddock-agent-{EMBEDDED_ID}"));
    let identity = format!("embedded-{EMBEDDED_ID}");
    if std::fs::metadata(&path).is_ok_and(|m| m.len() == EMBEDDED.len() as u64) {
        return Ok(AgentBinary { path, identity });
    }
    let failed = |e: std::io::Error| format!("cannot write it to {}: {e}", dir.display());
    std::fs::create_dir_all(&dir).map_err(failed)?;
    let partial = dir.join(format!(
        ".paddock-agent-{EMBEDDED_ID}.{}",
        std::process::id()
    ));
    write_executable(&partial, EMBEDDED)
        .and_then(|()| std::fs::rename(&partial, &path))
        .map_err(|e| {
            let _ = std::fs::remove_file(&partial);
            failed(e)
        })?;
    Ok(AgentBinary { path, identity })
}

/// Writes `bytes` to a new file `path`, synced, executable by everyone (the agent runs as
/// whichever user the environment has).
fn write_executable(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o755)
        .open(path)?;
    file.write_all(bytes)?;
    file.sync_all()?;
    // The mode given at creation is masked by the umask.
    file.set_permissions(std::fs::Permissions::from_mode(0o755))
}

/// A 64-bit little-endian ELF executable without an interpreter (`PT_INTERP`): it runs in any
/// x86-64 Linux environment whatever C library that one has (or lacks).
pub fn is_static_elf(path: &Path) -> bool {
    let Ok(bytes) = read_head(path, 64 * 1024) else {
        return false;
    };
    if bytes.len() < 64 || &bytes[..4] != b"\x7fELF" || bytes[4] != 2 || bytes[5] != 1 {
        return false;
    }
    let u16_at = |o: usize| u16::from_le_bytes([bytes[o], bytes[o + 1]]) as usize;
    let phoff = u64::from_le_bytes(bytes[32..40].try_into().unwrap_or([0; 8])) as usize;
    let phentsize = u16_at(54);
    let phnum = u16_at(56);
    if phentsize < 4 {
        return false;
    }
    (0..phnum).all(|i| {
        let at = phoff + i * phentsize;
        // PT_INTERP = 3: the program needs a dynamic loader.
        bytes
            .get(at..at + 4)
            .is_some_and(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]) != 3)
    })
}

fn read_head(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit)
        .read_to_end(&mut bytes)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The agent this crate carries is written out once, whole and executable, under a name
    /// that changes with its contents; a copy already there is used as it is.
    #[test]
    fn the_carried_agent_is_written_out_once_and_is_static() {
        if EMBEDDED.is_empty() {
            panic!("this build carries no agent: {EMBEDDED_MISSING}");
        }
        let home = tempfile::tempdir().unwrap();
        let found = embedded(home.path()).unwrap();
        assert_eq!(
            found.path,
            home.path()
                .join(format!("agent-bin/paddock-agent-{EMBEDDED_ID}"))
        );
        assert!(is_static_elf(&found.path), "{}", found.path.display());
        let meta = std::fs::metadata(&found.path).unwrap();
        assert_eq!(meta.len(), EMBEDDED.len() as u64);
        assert_eq!(meta.permissions().mode() & 0o777, 0o755);
        let written = meta.modified().unwrap();
        let again = embedded(home.path()).unwrap();
        assert_eq!(again, found);
        let meta = std::fs::metadata(&found.path).unwrap();
        assert_eq!(meta.modified().unwrap(), written, "written again");
        let leftovers: Vec<_> = std::fs::read_dir(home.path().join("agent-bin"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(leftovers.len(), 1, "{leftovers:?}");
    }

    #[test]
    fn a_dynamic_program_is_not_taken_for_a_static_one() {
        // bash on any Debian is dynamically linked.
        assert!(!is_static_elf(Path::new("/bin/bash")));
        assert!(!is_static_elf(Path::new("/etc/passwd")));
        assert!(!is_static_elf(Path::new("/nonexistent")));
    }
}
