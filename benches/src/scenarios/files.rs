//! `files`: the file tools (read_file of a 100 KB file, write_file of it, apply_patch of a
//! 3-file patch, grep over a tree of 2,000 source files) on the local backend (unconfined and
//! in its workspace-write sandbox) and on each docker/ssh/apptainer backend of `--backends`,
//! against the bare tools doing the same in the same environment (`cat` and `rg` on this
//! machine; `docker exec cat`, `ssh cat`, `apptainer exec cat` and their `grep -rc`), sample
//! by sample.

use std::path::Path;
use std::sync::Arc;

use paddock_engine::engine::{Engine, EngineOptions};
use paddock_engine::policy::Policy;
use paddock_engine::registry::Registry;
use serde_json::{Value, json};

use super::measure::{bare_process, timed};
use super::terminal::Scratch;
use crate::error::{BenchError, Result};
use crate::harness::Bench;
use crate::report::{Better, Role, ScenarioReport};

/// The session every place runs in; closed at the end.
const SESSION: &str = "bench-files";
/// Files in the search tree, and the size of the read file.
const TREE_FILES: usize = 2_000;
const BIG_BYTES: usize = 100 * 1024;

/// Where the tools run and how the bare tool reaches the same files.
struct Place {
    name: String,
    engine: Engine,
    /// The directory the files are put in, as the environment sees it.
    dir: String,
    /// The bare tool's argv before the command (empty: this machine).
    prefix: Vec<String>,
}

fn engine(b: &Bench, policy: Policy, backend: Option<&str>) -> Result<Engine> {
    Ok(Engine::with_options(
        policy,
        Registry::with_builtins(),
        Arc::default(),
        EngineOptions {
            session: Some(SESSION.into()),
            backend: backend.map(str::to_owned),
            exe: Some(b.exe.clone()),
        },
    )?)
}

/// A tree of [`TREE_FILES`] small source files in 100 directories, one in ten holding
/// `needle`, and a `.gitignore`d build directory that search skips.
fn make_tree(root: &Path) -> Result<()> {
    for i in 0..TREE_FILES {
        let dir = root.join(format!("pkg{:03}", i % 100));
        std::fs::create_dir_all(&dir).map_err(BenchError::io(format!("{}", dir.display())))?;
        let mut text = String::new();
        for line in 0..60 {
            text.push_str(&format!(
                "fn item_{i}_{line}(x: u32) -> u32 {{ x + {line} }}\n"
            ));
        }
        if i % 10 == 0 {
            text.push_str("// needle: the line search looks for\n");
        }
        let file = dir.join(format!("m{i:04}.rs"));
        std::fs::write(&file, text).map_err(BenchError::io(format!("{}", file.display())))?;
    }
    Ok(())
}

async fn call(engine: &Engine, tool: &str, args: Value, what: &str) -> Result<(f64, Value)> {
    timed(async {
        engine
            .call_tool(tool, args)
            .await
            .map_err(BenchError::tool(format!("{what}: {tool}")))
    })
    .await
}

async fn bare(place: &Place, command: &[&str]) -> Result<f64> {
    let mut argv: Vec<String> = place.prefix.clone();
    argv.extend(command.iter().map(|w| (*w).to_owned()));
    let mut process = tokio::process::Command::new(&argv[0]);
    process.args(&argv[1..]);
    let what = format!("{}: {}", place.name, argv.join(" "));
    bare_process(process, what.clone(), what).await
}

/// The 3-file patch that turns `from` into `to` in each of the place's patch files.
fn patch(dir: &str, from: &str, to: &str) -> String {
    let mut text = String::from("*** Begin Patch\n");
    for i in 0..3 {
        text.push_str(&format!(
            "*** Update File: {dir}/patch/p{i}.rs\n@@\n fn head() {{}}\n-const STATE: &str = \"{from}\";\n+const STATE: &str = \"{to}\";\n fn tail() {{}}\n"
        ));
    }
    text.push_str("*** End Patch\n");
    text
}

/// Puts the read file, the patch files and the search tree in place.
async fn prepare(place: &Place, tree: &Path) -> Result<()> {
    let big: String = (0..)
        .map(|n| format!("line {n:06} of the file read_file is measured on\n"))
        .take_while({
            let mut total = 0;
            move |l: &String| {
                total += l.len();
                total <= BIG_BYTES
            }
        })
        .collect();
    call(
        &place.engine,
        "write_file",
        json!({"path": format!("{}/big.txt", place.dir), "content": big}),
        &place.name,
    )
    .await?;
    for i in 0..3 {
        call(
            &place.engine,
            "write_file",
            json!({"path": format!("{}/patch/p{i}.rs", place.dir),
                   "content": "fn head() {}\nconst STATE: &str = \"a\";\nfn tail() {}\n"}),
            &place.name,
        )
        .await?;
    }
    place
        .engine
        .upload(tree, &format!("{}/tree", place.dir))
        .await?;
    Ok(())
}

/// The four reports of one place, from one loop alternating every contender.
async fn measure(b: &Bench, place: &Place, have_rg: bool) -> Result<Vec<ScenarioReport>> {
    let big = format!("{}/big.txt", place.dir);
    let tree = format!("{}/tree", place.dir);
    let content = "x".repeat(BIG_BYTES);
    let host = place.prefix.is_empty();
    let grep_bare: Vec<&str> = if host && have_rg {
        vec!["rg", "-l", "needle", &tree]
    } else {
        vec!["grep", "-rl", "needle", &tree]
    };
    let grep_label = if host && have_rg { "rg -l" } else { "grep -rl" };
    // Warm-up (the agent, the master connection, the page cache), and the answers checked.
    let (_, answer) = call(
        &place.engine,
        "grep",
        json!({"pattern": "needle", "path": tree, "max_results": 10000}),
        &place.name,
    )
    .await?;
    let found = answer["files"].as_array().map_or(0, Vec::len);
    if found != TREE_FILES / 10 {
        return Err(BenchError::unexpected(
            format!(
                "{}: grep found {found} files, not {}",
                place.name,
                TREE_FILES / 10
            ),
            &answer,
        ));
    }
    bare(place, &["cat", &big]).await?;
    bare(place, &grep_bare).await?;
    let samples = b.pick(5, 20);
    let (mut read, mut read_bare, mut write, mut grep, mut grep_bare_ms, mut patched) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for n in 0..samples {
        read_bare.push(bare(place, &["cat", &big]).await?);
        read.push(
            call(
                &place.engine,
                "read_file",
                json!({"path": big}),
                &place.name,
            )
            .await?
            .0,
        );
        write.push(
            call(
                &place.engine,
                "write_file",
                json!({"path": format!("{}/written.txt", place.dir), "content": content}),
                &place.name,
            )
            .await?
            .0,
        );
        let (from, to) = if n % 2 == 0 { ("a", "b") } else { ("b", "a") };
        patched.push(
            call(
                &place.engine,
                "apply_patch",
                json!({"patch": patch(&place.dir, from, to)}),
                &place.name,
            )
            .await?
            .0,
        );
        grep_bare_ms.push(bare(place, &grep_bare).await?);
        grep.push(
            call(
                &place.engine,
                "grep",
                json!({"pattern": "needle", "path": tree, "max_results": 10000}),
                &place.name,
            )
            .await?
            .0,
        );
    }
    let bare_method = |cmd: &str| {
        let mut argv = place.prefix.clone();
        argv.push(cmd.to_owned());
        format!("`{}`: host wall time from spawn to exit.", argv.join(" "))
    };
    let tool_method = |what: &str| {
        format!(
            "Engine::call_tool({what}) on backend `{}`: host wall time from call to answer.",
            place.name
        )
    };
    let interleaving = "All contenders of this place alternate sample by sample in one loop.";
    let report = |what: &str, title: String, tool: &str, samples: Vec<f64>| {
        let mut r = ScenarioReport::new(
            &format!("files_{what}_{}", place.name),
            &title,
            "ms",
            Better::Lower,
        );
        r.push_measured("paddock", Role::Paddock, None, tool_method(tool), samples);
        r.note(interleaving);
        r
    };
    let mut out = Vec::new();
    let peer = |r: &mut ScenarioReport, name: &str, command: &str, samples: Vec<f64>| {
        r.push_measured(name, Role::Peer, None, bare_method(command), samples);
    };
    let mut r = report(
        "read",
        format!("read_file of a 100 KB file on `{}`", place.name),
        "read_file",
        read,
    );
    peer(&mut r, "cat", &format!("cat {big}"), read_bare);
    out.push(r);
    let mut r = report(
        "grep",
        format!("grep over {TREE_FILES} source files on `{}`", place.name),
        "grep, files_with_matches",
        grep,
    );
    peer(&mut r, grep_label, &grep_bare.join(" "), grep_bare_ms);
    if !(host && have_rg) {
        r.note(
            "The environment has no `rg`: the peer is its own `grep -rl` (BusyBox's in the \
             test images), which skips no ignored or hidden file.",
        );
    }
    out.push(r);
    out.push(report(
        "write",
        format!(
            "write_file of 100 KB on `{}` (atomic: temp file, fsync, rename)",
            place.name
        ),
        "write_file",
        write,
    ));
    out.push(report(
        "patch",
        format!("apply_patch of a 3-file patch on `{}`", place.name),
        "apply_patch",
        patched,
    ));
    Ok(out)
}

/// The places: local unconfined, local sandboxed, and each docker/ssh/apptainer backend of
/// the `--backends` policy.
fn places(b: &Bench, scratch: &Scratch) -> Result<Vec<Place>> {
    let local_dir = scratch.0.join("local");
    let sandbox_dir = scratch.0.join("workspace");
    for dir in [&local_dir, &sandbox_dir] {
        std::fs::create_dir_all(dir).map_err(BenchError::io(format!("{}", dir.display())))?;
    }
    let unconfined = Policy::parse(
        "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n",
        "<bench files: unconfined>",
    )?;
    let sandboxed = Policy::parse(
        &format!(
            "[backends.local]\nkind = \"local\"\nsandbox = \"workspace-write\"\nworkspace = {}\n",
            Value::String(sandbox_dir.display().to_string())
        ),
        "<bench files: sandboxed>",
    )?;
    let mut out = vec![
        Place {
            name: "local".into(),
            engine: engine(b, unconfined, None)?,
            dir: local_dir.display().to_string(),
            prefix: vec![],
        },
        Place {
            name: "sandboxed".into(),
            engine: engine(b, sandboxed, None)?,
            dir: sandbox_dir.display().to_string(),
            prefix: vec![],
        },
    ];
    let Some(path) = &b.backends else {
        return Ok(out);
    };
    let policy = Policy::load(path)?;
    let owner =
        paddock_backends::naming::owner_of(&paddock_engine::tools::environment::state_root());
    for (name, config) in &policy.backends {
        let environment = paddock_backends::naming::environment_name(name, &owner, SESSION);
        let Some(mut prefix) = super::backends::bare_argv_in(name, config, &environment) else {
            continue;
        };
        prefix.pop();
        out.push(Place {
            name: name.clone(),
            engine: engine(b, policy.clone(), Some(name))?,
            // Not this machine's scratch name: the ssh target is often this machine, as
            // another user.
            dir: format!("/tmp/paddock-bench-files-{name}-{}", std::process::id()),
            prefix,
        });
    }
    Ok(out)
}

pub async fn files(b: &Bench) -> Result<Vec<ScenarioReport>> {
    let scratch = Scratch::new("files")?;
    let tree = scratch.0.join("tree");
    make_tree(&tree)?;
    let have_rg = std::process::Command::new("rg")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let places = places(b, &scratch)?;
    let mut out = Vec::new();
    for place in &places {
        let measured = match prepare(place, &tree).await {
            Ok(()) => measure(b, place, have_rg).await,
            Err(err) => Err(err),
        };
        match measured {
            Ok(reports) => out.extend(reports),
            Err(err) => {
                let mut failed = ScenarioReport::new(
                    &format!("files_{}", place.name),
                    &format!("the file tools on `{}`", place.name),
                    "ms",
                    Better::Lower,
                );
                failed.error = Some(err.to_string());
                out.push(failed);
            }
        }
        // The files go with a container or instance, but not from an ssh host.
        if !place.prefix.is_empty() {
            let _ = place
                .engine
                .call_tool("delete_file", json!({"path": place.dir, "recursive": true}))
                .await;
        }
        if let Err(err) = place.engine.close_session(SESSION).await {
            tracing::warn!(place = %place.name, %err, "bench: closing the files session");
        }
    }
    Ok(out)
}
