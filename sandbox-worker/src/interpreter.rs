//! Building the sandbox interpreter once (in the zygote) and running one script in it (in a
//! forked child).
//!
//! The layer below `zygote` and `child`: it knows the `_host` module (`host`) it builds the
//! interpreter with, and the wire types of a script run, but nothing of processes or forks.

use std::time::Instant;

use rustpython_vm::builtins::PyTuple;
use rustpython_vm::signal::{UserSignalSender, user_signal_channel};
use rustpython_vm::{AsObject, Interpreter, PyObjectRef, PyResult, Settings, VirtualMachine};

use crate::SandboxError;
use crate::wire::{LoadedState, NotebookState, RunRequest, ScriptFailure, ScriptOutcome};

/// Installs the runtime modules (their sources come from `crate::runtime`, through
/// `_host.source`). `os` first: standard modules import it at import time.
const BOOTSTRAP: &str = r#"
import sys, _host
sys.path.clear()
sys.path_hooks.clear()
sys.meta_path[:] = [f for f in sys.meta_path if getattr(f, "__name__", "") != "PathFinder"]
def _paddock_load(name):
    module = type(sys)(name)
    module.__file__ = "<paddock:" + name + ">"
    sys.modules[name] = module
    exec(_host.code(name), module.__dict__)
    return module
_paddock_load("os")
# importlib's path machinery imports `posix` by name; it gets the same refusing stub.
sys.modules["posix"] = sys.modules["os"]
for _name in ("asyncio", "_paddock_runtime"):
    _paddock_load(_name)
del _name, _paddock_load
"#;

/// The initialised interpreter plus the sender its watchdog uses to inject exceptions.
pub struct SandboxInterpreter {
    pub interpreter: Interpreter,
    pub signals: UserSignalSender,
    pub init_ms: f64,
}

/// Calls one of the runtime's idle-work functions (`_preload_next`, `_warm_up`): answers
/// whether it says there is more to do. An optimisation no script needs: the zygote calls them
/// when idle, after its first fork. A failure is the runtime's (it would fail a script too),
/// answered as an error.
pub fn idle_step(sandbox: &SandboxInterpreter, function: &str) -> Result<bool, SandboxError> {
    sandbox.interpreter.enter(|vm| {
        vm.import("_paddock_runtime", 0)
            .and_then(|runtime| vm.call_method(&runtime, function, ()))
            .and_then(|more| more.try_to_bool(vm))
            .map_err(|exc| SandboxError::RuntimeInit(describe_exception(vm, &exc)))
    })
}

/// Builds the interpreter without host access and loads the runtime (see [`idle_step`]).
pub fn build() -> Result<SandboxInterpreter, SandboxError> {
    let started = Instant::now();
    let mut settings = Settings::default();
    settings.isolated = true;
    settings.ignore_environment = true;
    settings.import_site = false;
    settings.user_site_directory = false;
    settings.install_signal_handlers = false;
    settings.safe_path = true;
    settings.write_bytecode = false;
    settings.path_list = Vec::new();

    let (signals, receiver) = user_signal_channel();
    let builder = Interpreter::builder(settings);
    let mut defs = rustpython_stdlib::stdlib_module_defs(&builder.ctx);
    defs.push(crate::host::module_def(&builder.ctx));
    let interpreter = builder
        .add_native_modules(&defs)
        .add_frozen_modules(rustpython_pylib::FROZEN_STDLIB)
        .init_hook(move |vm| vm.set_user_signal_channel(receiver))
        .build();

    let built_ms = started.elapsed().as_secs_f64() * 1000.0;
    interpreter.enter(|vm| {
        let scope = vm.new_scope_with_builtins();
        vm.run_string(scope, BOOTSTRAP, "<paddock:bootstrap>")
            .map(drop)
            .map_err(|exc| SandboxError::RuntimeInit(describe_exception(vm, &exc)))
    })?;
    tracing::debug!(
        built_ms,
        runtime_ms = started.elapsed().as_secs_f64() * 1000.0 - built_ms,
        "zygote interpreter built, runtime loaded"
    );
    Ok(SandboxInterpreter {
        interpreter,
        signals,
        init_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// Runs one script in the current (forked) process. Never panics on script behaviour.
pub fn run_script(interpreter: &Interpreter, request: &RunRequest) -> ScriptOutcome {
    interpreter.enter(|vm| {
        discard_stale_signals(vm);
        run_entered(vm, request)
    })
}

/// A notebook child's names, for a snapshot (`_paddock_runtime._notebook_dump`). An error
/// names what failed; the names stay as they were either way.
pub fn dump_state(interpreter: &Interpreter) -> Result<NotebookState, String> {
    let text = call_runtime_text(interpreter, "_notebook_dump", None)?;
    serde_json::from_str(&text).map_err(|e| format!("the runtime's dump is not a state: {e}"))
}

/// Makes this child's notebook from `state` (`_paddock_runtime._notebook_load`).
pub fn load_state(interpreter: &Interpreter, state: &NotebookState) -> Result<LoadedState, String> {
    let json = serde_json::to_string(state).map_err(|e| e.to_string())?;
    let text = call_runtime_text(interpreter, "_notebook_load", Some(json))?;
    serde_json::from_str(&text).map_err(|e| format!("the runtime's answer is not a load: {e}"))
}

/// Calls a runtime function of at most one string argument that answers a string.
fn call_runtime_text(
    interpreter: &Interpreter,
    function: &str,
    argument: Option<String>,
) -> Result<String, String> {
    interpreter.enter(|vm| {
        discard_stale_signals(vm);
        let runtime = vm
            .import("_paddock_runtime", 0)
            .map_err(|exc| describe_exception(vm, &exc))?;
        let answer = match argument {
            Some(text) => vm.call_method(&runtime, function, (vm.ctx.new_str(text),)),
            None => vm.call_method(&runtime, function, ()),
        }
        .map_err(|exc| describe_exception(vm, &exc))?;
        string_of(vm, &answer).map_err(|exc| describe_exception(vm, &exc))
    })
}

/// Drops exceptions the heap watchdog queued for the previous script of a notebook child that
/// had ended before they landed: they belong to that script, not to this one.
fn discard_stale_signals(vm: &VirtualMachine) {
    for _ in 0..64 {
        if vm.check_signals().is_ok() {
            return;
        }
    }
}

fn run_entered(vm: &VirtualMachine, request: &RunRequest) -> ScriptOutcome {
    match call_run(vm, request) {
        Ok(outcome) => outcome,
        Err(exc) => ScriptOutcome::Err(ScriptFailure {
            exception: "SandboxError".into(),
            message: describe_exception(vm, &exc),
            line: None,
            traceback: String::new(),
            error_code: Some("codemode:sandbox_failed".into()),
            unknown_tool: None,
        }),
    }
}

/// Takes, in a fresh child, the whole path of a script run without a script: the `Run` frame
/// decoded, the script compiled and run through the runtime, its result encoded as the
/// `Finished` frame (neither frame is sent). Copy-on-write: the pages a script writes are
/// copied now, while the child is idle, instead of while a script waits on them.
pub fn rehearse(interpreter: &Interpreter) {
    let source = "x = {'a': [1, 2.5, 'b']}\nx";
    let Ok(prepared) = crate::prepare::prepare_script(source) else {
        return;
    };
    let run = crate::wire::Message::Run(RunRequest {
        source: prepared.source,
        original_source: source.to_owned(),
        tools: vec![("rehearsal".into(), "rehearsal".into())],
        tool_parameters: vec![("rehearsal".into(), vec!["value".into()])],
        max_memory_bytes: 0,
        keep_state: false,
    });
    let request = match run
        .to_frame()
        .and_then(|f| crate::wire::Message::from_payload(&f[crate::wire::HEADER_BYTES..]))
    {
        Ok(crate::wire::Message::Run(request)) => request,
        _ => return,
    };
    let outcome = run_script(interpreter, &request);
    if let Err(err) = crate::wire::Message::Finished(outcome).to_frame() {
        tracing::debug!(%err, "rehearsal failed");
    }
}

fn call_run(vm: &VirtualMachine, request: &RunRequest) -> PyResult<ScriptOutcome> {
    let runtime = vm.import("_paddock_runtime", 0)?;

    let tools = vm.ctx.new_dict();
    for (ident, name) in &request.tools {
        tools.set_item(ident.as_str(), vm.ctx.new_str(name.as_str()).into(), vm)?;
    }
    let parameters = vm.ctx.new_dict();
    for (ident, names) in &request.tool_parameters {
        let names: Vec<PyObjectRef> = names
            .iter()
            .map(|n| vm.ctx.new_str(n.as_str()).into())
            .collect();
        parameters.set_item(ident.as_str(), vm.ctx.new_tuple(names).into(), vm)?;
    }
    let source: PyObjectRef = vm.ctx.new_str(request.source.as_str()).into();
    let original: PyObjectRef = vm.ctx.new_str(request.original_source.as_str()).into();
    let outcome = vm.call_method(
        &runtime,
        "_run",
        (
            source,
            tools,
            original,
            vm.ctx.new_bool(request.keep_state),
            parameters,
        ),
    )?;
    let outcome = outcome
        .downcast::<PyTuple>()
        .map_err(|_| vm.new_type_error("bad outcome"))?;
    let ok = outcome
        .first()
        .cloned()
        .map(|o| o.try_to_bool(vm))
        .transpose()?
        .unwrap_or(false);
    let payload = outcome.get(1).cloned().unwrap_or_else(|| vm.ctx.none());
    if ok {
        // A third member, true when the script ended with `final_answer(value)`.
        let final_answer = outcome
            .get(2)
            .map(|o| o.clone().try_to_bool(vm))
            .transpose()?
            .unwrap_or(false);
        return Ok(ScriptOutcome::Ok {
            result_json: string_of(vm, &payload)?,
            final_answer,
        });
    }
    let failure = payload
        .downcast::<PyTuple>()
        .map_err(|_| vm.new_type_error("bad failure"))?;
    let field = |i: usize| failure.get(i).cloned().unwrap_or_else(|| vm.ctx.none());
    let opt_string = |o: PyObjectRef| -> PyResult<Option<String>> {
        if vm.is_none(&o) {
            Ok(None)
        } else {
            string_of(vm, &o).map(Some)
        }
    };
    let line = {
        let o = field(2);
        if vm.is_none(&o) {
            None
        } else {
            o.try_into_value::<u32>(vm).ok()
        }
    };
    Ok(ScriptOutcome::Err(ScriptFailure {
        exception: string_of(vm, &field(0))?,
        message: string_of(vm, &field(1))?,
        line,
        traceback: string_of(vm, &field(3))?,
        error_code: opt_string(field(4))?,
        unknown_tool: opt_string(field(5))?,
    }))
}

fn string_of(vm: &VirtualMachine, obj: &PyObjectRef) -> PyResult<String> {
    Ok(obj.str(vm)?.to_string_lossy().into_owned())
}

/// `Type: message` of a Python exception, for errors of the sandbox itself.
pub fn describe_exception(
    vm: &VirtualMachine,
    exc: &rustpython_vm::builtins::PyBaseExceptionRef,
) -> String {
    let mut text = String::new();
    if vm.write_exception(&mut text, exc).is_err() {
        text = exc.class().name().to_string();
    }
    text.trim_end().to_owned()
}
