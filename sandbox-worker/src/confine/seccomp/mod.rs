//! seccomp: what a running script or a sandboxed command may still ask of the kernel.
//!
//! The filters are data ([`tables`]), compiled into BPF by [`program`] (architecture and x32
//! checks first, then a search over the table's numbers), checked by [`evaluate`] (the
//! kernel's interpreter, for tests) against the x86-64 call table ([`syscalls`]).

pub mod evaluate;
pub mod program;
pub mod reference;
pub mod syscalls;
pub mod tables;

use seccompiler::BpfProgram;

use super::ConfineError;

/// A code-mode child's filter: [`tables::SCRIPT`], its `tgkill` limited to `pid`. Built per
/// child, since the pid differs: a small program laid out as a search tree, so the kernel
/// converts, JIT-compiles and caches one small filter per script.
pub fn script_program(pid: u32) -> Result<BpfProgram, ConfineError> {
    tables::SCRIPT.compile(pid)
}

/// The zygote's kill-list ([`tables::ZYGOTE_KILL_LIST`]).
pub fn zygote_program() -> Result<BpfProgram, ConfineError> {
    tables::ZYGOTE_KILL_LIST.compile(0)
}

/// A sandboxed shell command's filter ([`tables::COMMAND`]).
pub fn command_program() -> Result<BpfProgram, ConfineError> {
    tables::COMMAND.compile(0)
}

static KILL_LIST: std::sync::OnceLock<Result<BpfProgram, String>> = std::sync::OnceLock::new();

/// Installs the kill-list in the calling process (the zygote, once): it does not depend on the
/// child, and every child inherits it across `fork`. Sets `no_new_privs` first, which
/// installing a filter without `CAP_SYS_ADMIN` requires (the zygote never executes anything, so
/// it loses nothing by it).
pub fn prepare() -> Result<(), ConfineError> {
    if super::simulated_missing("seccomp") {
        return Err(ConfineError::Missing {
            feature: "seccomp",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    let kill = KILL_LIST
        .get_or_init(|| zygote_program().map_err(|e| e.to_string()))
        .as_ref()
        .map_err(|e| ConfineError::Seccomp(e.clone()))?;
    super::set_no_new_privs().map_err(super::step("no_new_privs"))?;
    seccompiler::apply_filter(kill)
        .map_err(|e| ConfineError::Seccomp(format!("kill-list install failed: {e}")))
}

/// Installs the child's filter on every thread of the process (last: it also forbids
/// installing filters). The kill-list is already there, inherited from the zygote. Returns the
/// number of allowed syscalls.
pub fn install() -> Result<usize, ConfineError> {
    if super::simulated_missing("seccomp") {
        return Err(ConfineError::Missing {
            feature: "seccomp",
            reason: "simulated (PADDOCK_SANDBOX_SIMULATE_MISSING)".into(),
        });
    }
    if KILL_LIST.get().is_none() {
        return Err(ConfineError::Seccomp(
            "the kill-list was not installed before the fork (seccomp::prepare)".into(),
        ));
    }
    seccompiler::apply_filter_all_threads(&script_program(std::process::id())?)
        .map_err(|e| ConfineError::Seccomp(format!("install failed: {e}")))?;
    let rules = tables::SCRIPT.rules()?;
    Ok(rules
        .iter()
        .filter(|(_, rule)| *rule == program::Rule::Always(program::Action::Allow))
        .count())
}
