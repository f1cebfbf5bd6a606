//! The script runtime's own Python modules (this directory), compiled into the binary.
//!
//! A leaf: `interpreter`'s bootstrap loads them by name through `_host.code`, which `host`
//! answers from here; this module imports nothing of the crate.
//!
//! They are compiled to bytecode when the crate is (`py_compile!`), not by the zygote at every
//! start: RustPython's compiler took 35 ms of a cold `paddock run` on them (asyncio.py alone
//! 26 ms), more than building the interpreter. The `include_str!`s below are what makes cargo
//! recompile the crate, and so the bytecode, when a source changes.

const ASYNCIO_SOURCE: &str = include_str!("asyncio.py");
const OS_SOURCE: &str = include_str!("os_stub.py");
const RUNTIME_SOURCE: &str = include_str!("runtime.py");

/// Bytecode of the runtime's modules, compiled from the same files as the sources above; the
/// code's file name is what tracebacks show (`<paddock:NAME>`).
pub fn code(name: &str) -> Option<rustpython_vm::frozen::FrozenCodeObject<&'static [u8]>> {
    match name {
        "asyncio" => Some(rustpython_vm::py_compile!(
            file = "asyncio.py",
            module_name = "<paddock:asyncio>"
        )),
        "os" => Some(rustpython_vm::py_compile!(
            file = "os_stub.py",
            module_name = "<paddock:os>"
        )),
        "_paddock_runtime" => Some(rustpython_vm::py_compile!(
            file = "runtime.py",
            module_name = "<paddock:_paddock_runtime>"
        )),
        _ => None,
    }
}

/// The runtime's own Python modules, by name (their text; scripts and tests can read them).
pub fn source(name: &str) -> Option<&'static str> {
    match name {
        "asyncio" => Some(ASYNCIO_SOURCE),
        "os" => Some(OS_SOURCE),
        "_paddock_runtime" => Some(RUNTIME_SOURCE),
        _ => None,
    }
}
