mod edit;
mod grep;
mod ops;
mod patch;
mod read;
mod write;

use paddock_files::{FileError, FileRequest, execute};
use std::collections::BTreeMap;
use std::path::Path;

/// Runs a request written as JSON (as it arrives from a tool call).
pub fn run(base: &Path, request: serde_json::Value) -> Result<serde_json::Value, FileError> {
    let request: FileRequest = serde_json::from_value(request).expect("request parses");
    execute(&request, base)
}

/// Every file (with its bytes), symlink and directory under `root`, for before/after checks.
pub fn snapshot(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let rel = path
            .strip_prefix(root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let meta = std::fs::symlink_metadata(&path).unwrap();
        if meta.file_type().is_symlink() {
            out.insert(
                format!("{rel} -> link"),
                std::fs::read_link(&path)
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
                    .into_bytes(),
            );
        } else if meta.is_dir() {
            out.insert(format!("{rel}/"), Vec::new());
            walk(root, &path, out);
        } else {
            out.insert(rel, std::fs::read(&path).unwrap());
        }
    }
}

/// The text of the file at `path` under `root`.
pub fn text_of(root: &Path, path: &str) -> String {
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// Creates files (parents made) from `(path, content)` pairs.
pub fn populate(root: &Path, files: &[(&str, &str)]) {
    for (path, content) in files {
        let p = root.join(path);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }
}
