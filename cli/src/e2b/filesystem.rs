//! envd's filesystem service (`/filesystem.Filesystem/*`) on Paddock's file tools, run in the
//! sandbox's session: Stat (`file_info`), ListDir (`list_files`), MakeDir, Move (`move_file`),
//! Remove (`delete_file`); the watchers' methods are [`super::watch`]'s. Paths are answered
//! absolute, relative ones resolved against where the sandbox's commands start.

use std::sync::Arc;

use axum::response::Response;
use paddock_engine::engine::CallExtras;
use serde::Deserialize;
use serde_json::{Value, json};

use super::connect::{Code, RpcError};
use super::state::Sandbox;
use super::wire::{absolute, json_response, rfc3339, rpc_error, rpc_of_tool};

#[derive(Deserialize, Default)]
#[serde(default)]
struct PathRequest {
    path: String,
    depth: Option<u32>,
    source: String,
    destination: String,
}

async fn call(sandbox: &Sandbox, tool: &str, args: Value) -> Result<Value, RpcError> {
    let extras = CallExtras {
        session: Some(sandbox.id.clone()),
        ..CallExtras::default()
    };
    sandbox
        .engine
        .call_tool_with(tool, args, extras)
        .await
        .map_err(|e| rpc_of_tool(&e))
}

/// A unary method of the filesystem service.
pub(crate) async fn unary(sandbox: &Arc<Sandbox>, method: &str, body: &[u8]) -> Response {
    if matches!(
        method,
        "CreateWatcher" | "GetWatcherEvents" | "RemoveWatcher"
    ) {
        return match super::watch::unary(sandbox, method, body).await {
            Ok(value) => json_response(200, &value),
            Err(err) => rpc_error(&err),
        };
    }
    let request: PathRequest = match serde_json::from_slice(body) {
        Ok(r) => r,
        Err(e) => {
            return rpc_error(&RpcError::new(
                Code::InvalidArgument,
                format!("bad request: {e}"),
            ));
        }
    };
    let answer = match method {
        "Stat" => stat(sandbox, &request.path)
            .await
            .map(|entry| json!({"entry": entry})),
        "ListDir" => list_dir(sandbox, &request.path, request.depth.unwrap_or(1)).await,
        "MakeDir" => make_dir(sandbox, &request.path).await,
        "Move" => rename(sandbox, &request.source, &request.destination).await,
        "Remove" => remove(sandbox, &request.path).await,
        other => Err(RpcError::new(
            Code::Unimplemented,
            format!("filesystem.Filesystem/{other} is not served by Paddock yet"),
        )),
    };
    match answer {
        Ok(value) => json_response(200, &value),
        Err(err) => rpc_error(&err),
    }
}

/// `-rwxr-xr-x` of a kind and permission bits.
fn permissions(kind: &str, mode: u32) -> String {
    let mut out = String::from(match kind {
        "directory" => "d",
        "symlink" => "l",
        _ => "-",
    });
    for shift in [6u32, 3, 0] {
        let bits = (mode >> shift) & 7;
        out.push(if bits & 4 != 0 { 'r' } else { '-' });
        out.push(if bits & 2 != 0 { 'w' } else { '-' });
        out.push(if bits & 1 != 0 { 'x' } else { '-' });
    }
    out
}

/// envd's `EntryInfo` in ProtoJSON (int64 as a string, enums by name).
fn entry_info(
    path: &str,
    kind: &str,
    size: u64,
    mode: Option<u32>,
    modified_ms: Option<u64>,
) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    let file_type = match kind {
        "directory" => "FILE_TYPE_DIRECTORY",
        "symlink" => "FILE_TYPE_SYMLINK",
        _ => "FILE_TYPE_FILE",
    };
    let mut entry = json!({
        "name": name,
        "type": file_type,
        "path": path,
        "size": size.to_string(),
        "owner": "",
        "group": "",
    });
    if let Some(mode) = mode {
        entry["mode"] = json!(mode);
        entry["permissions"] = json!(permissions(kind, mode));
    }
    if let Some(ms) = modified_ms {
        entry["modifiedTime"] = json!(rfc3339(ms));
    }
    entry
}

async fn stat(sandbox: &Sandbox, path: &str) -> Result<Value, RpcError> {
    let path = absolute(&sandbox.cwd, path);
    let info = call(sandbox, "file_info", json!({"path": path})).await?;
    let mode = info["mode"]
        .as_str()
        .and_then(|m| u32::from_str_radix(m, 8).ok());
    Ok(entry_info(
        &path,
        info["kind"].as_str().unwrap_or("file"),
        info["size"].as_u64().unwrap_or(0),
        mode,
        info["modified_ms"].as_u64(),
    ))
}

async fn list_dir(sandbox: &Sandbox, path: &str, depth: u32) -> Result<Value, RpcError> {
    let path = absolute(&sandbox.cwd, path);
    let listed = call(
        sandbox,
        "list_files",
        json!({"path": path, "depth": depth.max(1)}),
    )
    .await?;
    let entries: Vec<Value> = listed["entries"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let rel = e["path"].as_str()?;
            Some(entry_info(
                &absolute(&path, rel),
                e["kind"].as_str().unwrap_or("file"),
                e["size"].as_u64().unwrap_or(0),
                None,
                None,
            ))
        })
        .collect();
    Ok(json!({"entries": entries}))
}

async fn make_dir(sandbox: &Sandbox, path: &str) -> Result<Value, RpcError> {
    match stat(sandbox, path).await {
        Ok(_) => {
            return Err(RpcError::new(
                Code::AlreadyExists,
                format!("{path} already exists"),
            ));
        }
        Err(err) if err.code == Code::NotFound => {}
        Err(err) => return Err(err),
    }
    let abs = absolute(&sandbox.cwd, path);
    let made = call(
        sandbox,
        "terminal",
        json!({"command": format!("mkdir -p -- {}", super::rest::shell_quote(&abs))}),
    )
    .await?;
    if made["exit_code"] != json!(0) {
        return Err(RpcError::new(
            Code::Internal,
            made["output"]
                .as_str()
                .unwrap_or("mkdir failed")
                .trim()
                .to_owned(),
        ));
    }
    Ok(json!({"entry": stat(sandbox, &abs).await?}))
}

async fn rename(sandbox: &Sandbox, source: &str, destination: &str) -> Result<Value, RpcError> {
    let from = absolute(&sandbox.cwd, source);
    let to = absolute(&sandbox.cwd, destination);
    call(sandbox, "move_file", json!({"from": from, "to": to})).await?;
    Ok(json!({"entry": stat(sandbox, &to).await?}))
}

async fn remove(sandbox: &Sandbox, path: &str) -> Result<Value, RpcError> {
    let path = absolute(&sandbox.cwd, path);
    match call(
        sandbox,
        "delete_file",
        json!({"path": path, "recursive": true}),
    )
    .await
    {
        // envd removes as `os.RemoveAll` does: a path already gone is removed.
        Ok(_) => Ok(json!({})),
        Err(err) if err.code == Code::NotFound => Ok(json!({})),
        Err(err) => Err(err),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn entries_are_protojson() {
        let entry = entry_info("/w/a.txt", "file", 2, Some(0o644), Some(0));
        assert_eq!(
            entry,
            json!({"name": "a.txt", "type": "FILE_TYPE_FILE", "path": "/w/a.txt", "size": "2",
                   "owner": "", "group": "", "mode": 420, "permissions": "-rw-r--r--",
                   "modifiedTime": "1970-01-01T00:00:00.000Z"})
        );
        assert_eq!(permissions("directory", 0o755), "drwxr-xr-x");
    }
}
