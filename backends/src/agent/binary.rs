//! Finding the static `paddock-agent` binary that is placed into containers, instances and
//! remote hosts.

use std::path::{Path, PathBuf};

/// The environment variable that names the agent binary explicitly.
pub const AGENT_BIN_ENV: &str = "PADDOCK_AGENT_BIN";

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
        format!(
            "the static paddock-agent binary was not found (looked in: {places}); build it with \
             scripts/build-agent.sh, point {AGENT_BIN_ENV} at it, or set `agent = false` on the \
             backend to run every command through the backend's own client"
        )
    }
}

/// The agent for `engine_exe`: `$PADDOCK_AGENT_BIN`, else a static `paddock-agent` beside the
/// engine, else cargo's static build (`target/x86_64-unknown-linux-gnu/release`) next to the
/// engine's `target/<profile>`.
pub fn find(engine_exe: &Path) -> Result<AgentBinary, NotFound> {
    let mut candidates = Vec::new();
    if let Some(explicit) = std::env::var_os(AGENT_BIN_ENV) {
        candidates.push(PathBuf::from(explicit));
    } else if let Some(dir) = engine_exe.parent() {
        candidates.push(dir.join("paddock-agent"));
        if let Some(target) = dir.parent() {
            candidates.push(
                target
                    .join("x86_64-unknown-linux-gnu")
                    .join("release")
                    .join("paddock-agent"),
            );
        }
    }
    for path in &candidates {
        if let Ok(meta) = std::fs::metadata(path)
            && meta.is_file()
            && is_static_elf(path)
        {
            let modified = meta
                .modified()
                .ok()
                .and_then(|m| m.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            return Ok(AgentBinary {
                path: path.clone(),
                identity: format!("{}-{modified}", meta.len()),
            });
        }
    }
    Err(NotFound {
        looked_in: candidates,
    })
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

    #[test]
    fn a_dynamic_program_is_not_taken_for_a_static_one() {
        // bash on any Debian is dynamically linked.
        assert!(!is_static_elf(Path::new("/bin/bash")));
        assert!(!is_static_elf(Path::new("/etc/passwd")));
        assert!(!is_static_elf(Path::new("/nonexistent")));
    }
}
