//! Path arithmetic shared by the operations: lexical resolution against the session's
//! directory, symlink following for writes, and how answers spell paths.

use crate::error::{FileError, Result};
use std::path::{Component, Path, PathBuf};

/// Lexical resolution: no disk access, so approvals see exactly where a call lands. A leading
/// `~` is the environment's home directory (`$HOME` where the operation runs), as a shell
/// would read it: agents write `~/.bashrc`, and the approval rules judge it as the home's.
pub(crate) fn resolve(base: &Path, path: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let joined = match (path.strip_prefix('~'), home) {
        (Some(rest), Some(home)) if rest.is_empty() || rest.starts_with('/') => {
            home.join(rest.trim_start_matches('/'))
        }
        _ => base.join(path),
    };
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push(Component::RootDir.as_os_str()),
            Component::CurDir => {}
            // `..` above the root stays at the root, as the kernel does.
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(n) => out.push(n),
        }
    }
    if out.as_os_str().is_empty() {
        out.push(".");
    }
    out
}

/// Resolves a caller's path, refusing the empty one (it would silently mean the directory).
pub(crate) fn checked(op: &str, base: &Path, path: &str) -> Result<PathBuf> {
    if path.is_empty() {
        return Err(FileError::invalid(format!(
            "{op}: `path` is empty; give a file path"
        )));
    }
    Ok(resolve(base, path))
}

/// Follows symlinks at `path` itself (not its parents) to the file a write should replace, so
/// that writing through a link updates its target and the link stays a link. Works for
/// dangling links too (the target gets created).
pub(crate) fn follow_links(path: &Path) -> PathBuf {
    let mut current = path.to_path_buf();
    // The kernel's own limit on nested links (ELOOP); past it we write the last name we had.
    for _ in 0..40 {
        match std::fs::read_link(&current) {
            Ok(target) => {
                let parent = current.parent().map(Path::to_path_buf).unwrap_or_default();
                current = if target.is_absolute() {
                    target
                } else {
                    parent.join(target)
                };
            }
            Err(_) => break,
        }
    }
    current
}

/// A relative path as answers show it: `/`-separated, lossy for non-UTF-8 names.
pub(crate) fn display_relative(path: &Path) -> String {
    let parts: Vec<String> = path
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_string_lossy().into_owned()),
            Component::Prefix(_)
            | Component::RootDir
            | Component::CurDir
            | Component::ParentDir => None,
        })
        .collect();
    parts.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolve_folds_dots() {
        let b = Path::new("/work/s");
        assert_eq!(resolve(b, "a/./b/../c"), PathBuf::from("/work/s/a/c"));
        assert_eq!(resolve(b, "/etc/../tmp/x"), PathBuf::from("/tmp/x"));
        assert_eq!(resolve(b, "../../../.."), PathBuf::from("/"));
        assert_eq!(resolve(b, "."), PathBuf::from("/work/s"));
        assert_eq!(resolve(Path::new("rel"), ".."), PathBuf::from("."));
    }

    #[test]
    fn a_leading_tilde_is_the_home_directory_and_only_that() {
        let Some(home) = std::env::var_os("HOME").map(PathBuf::from) else {
            return;
        };
        let b = Path::new("/work/s");
        assert_eq!(resolve(b, "~/.bashrc"), home.join(".bashrc"));
        assert_eq!(resolve(b, "~"), resolve(&home, "."));
        // `~user` and a `~` inside a name are not the home directory.
        assert_eq!(resolve(b, "~other/x"), PathBuf::from("/work/s/~other/x"));
        assert_eq!(resolve(b, "a/~/b"), PathBuf::from("/work/s/a/~/b"));
    }
}
