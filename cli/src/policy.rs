//! `paddock tools` (the tool list in each format) and `paddock policy` (check, explain, packs,
//! corpus).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use paddock_engine::engine::Engine;
use paddock_engine::policy::Policy;
use paddock_engine::registry::definitions;

use crate::args::Format;
use crate::common::{load_policy, print_line, usage_error};

pub(crate) async fn tools(policy: Option<PathBuf>, format: Format) -> ExitCode {
    let policy = match load_policy(policy.as_deref()) {
        Ok(p) => p,
        Err(e) => return usage_error(&e),
    };
    let registry = match paddock_mcp::registry_with_bridge(&policy).await {
        Ok((registry, _bridge)) => registry,
        Err(e) => return usage_error(&e),
    };
    let engine = match Engine::new(policy, registry, Arc::default()) {
        Ok(e) => e,
        Err(e) => return usage_error(&e.to_string()),
    };
    engine.start_sweep();
    let specs = engine.tool_specs();
    match format {
        Format::Openai => print_line(&definitions::openai(&specs)),
        Format::Mcp => print_line(&definitions::mcp(&specs)),
        Format::Signatures => {
            let mut out = std::io::stdout().lock();
            for s in &specs {
                let _ = writeln!(out, "{}", definitions::signature(s));
            }
        }
    }
    engine.settle().await;
    ExitCode::SUCCESS
}

pub(crate) fn policy_check(files: &[PathBuf]) -> ExitCode {
    let mut failed = false;
    for file in files {
        if let Err(err) = Policy::load(file) {
            failed = true;
            let _ = writeln!(std::io::stderr(), "{err}");
        }
    }
    if failed {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    }
}

fn approval_gate(
    policy: Option<&Path>,
) -> Result<paddock_engine::approval::ApprovalGate, ExitCode> {
    let policy = load_policy(policy).map_err(|e| usage_error(&e))?;
    paddock_engine::approval::ApprovalGate::from_policy(
        &policy,
        paddock_engine::tools::environment::state_root(),
    )
    .map_err(|e| usage_error(&e))
}

pub(crate) fn policy_explain(
    command: &str,
    policy: Option<&Path>,
    session: &str,
    cwd: Option<PathBuf>,
) -> ExitCode {
    let gate = match approval_gate(policy) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let cwd = cwd
        .or_else(|| std::env::current_dir().ok())
        .and_then(|c| std::path::absolute(c).ok());
    let explanation = gate.explain_in(command, session, cwd.as_deref().and_then(Path::to_str));
    print_line(&serde_json::to_value(&explanation).unwrap_or_default());
    ExitCode::SUCCESS
}

pub(crate) fn policy_packs(policy: Option<&Path>) -> ExitCode {
    let gate = match approval_gate(policy) {
        Ok(g) => g,
        Err(code) => return code,
    };
    match gate.catalogue() {
        Ok(catalogue) => {
            for rule in catalogue.rules() {
                let (examples, counter_examples) = rule.examples();
                print_line(&serde_json::json!({
                    "pack": rule.pack,
                    "rule": rule.id,
                    "severity": rule.severity,
                    "description": rule.description,
                    "examples": examples,
                    "counter_examples": counter_examples,
                }));
            }
            ExitCode::SUCCESS
        }
        Err(e) => usage_error(&e),
    }
}

pub(crate) fn policy_corpus(files: &[PathBuf], policy: Option<&Path>, misses: bool) -> ExitCode {
    let gate = match approval_gate(policy) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let mut total = paddock_approval::corpus::Tally::default();
    let mut out = std::io::stdout().lock();
    for file in files {
        let text = match std::fs::read_to_string(file) {
            Ok(t) => t,
            Err(e) => return usage_error(&format!("{}: {e}", file.display())),
        };
        let tally = paddock_approval::corpus::measure(
            |c| {
                let e = gate.explain(c, "corpus");
                (e.decision, e.rule)
            },
            &text,
        );
        let _ = writeln!(out, "{}: {}", file.display(), tally.report());
        if misses {
            for miss in &tally.misses {
                let _ = writeln!(out, "  {miss}");
            }
        }
        total.add(&tally);
    }
    if files.len() > 1 {
        let _ = writeln!(out, "total: {}", total.report());
    }
    ExitCode::SUCCESS
}
