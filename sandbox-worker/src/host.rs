//! The `_host` native module: the script runtime's only way out of the sandbox.
//!
//! Every function talks to the engine over the child's socketpair (see [`crate::channel`]).
//! There is no other I/O: no files, no sockets, no processes.
//!
//! The layer below `interpreter` (which registers [`module_def`]) and `child` (which lends it
//! the channel for one script); it imports only the leaves and `channel`, none of the layers
//! above it.

use std::cell::RefCell;
use std::time::Duration;

use crate::channel::ChildChannel;
use crate::exit::EXIT_CHANNEL_LOST;
use crate::wire::{Message, ToolReply};

thread_local! {
    /// Set by the child before it runs its script.
    static CHANNEL: RefCell<Option<ChildChannel>> = const { RefCell::new(None) };
    static NEXT_CALL_ID: std::cell::Cell<u64> = const { std::cell::Cell::new(1) };
}

/// Installs the channel the `_host` functions use (in the child, before the script runs).
pub fn install_channel(channel: ChildChannel) {
    CHANNEL.with(|c| *c.borrow_mut() = Some(channel));
}

/// Takes the channel back (to send the final message).
pub fn take_channel() -> Option<ChildChannel> {
    CHANNEL.with(|c| c.borrow_mut().take())
}

/// Runs `f` on the channel. The engine going away mid-script leaves nothing to report to, so the
/// child exits at once.
fn with_channel<R>(f: impl FnOnce(&mut ChildChannel) -> Result<R, crate::wire::WireError>) -> R {
    CHANNEL.with(|c| {
        let mut slot = c.borrow_mut();
        let Some(channel) = slot.as_mut() else {
            tracing::error!("_host used outside a sandbox child");
            crate::confine::exit_immediately(EXIT_CHANNEL_LOST);
        };
        match f(channel) {
            Ok(r) => r,
            Err(err) => {
                tracing::debug!(%err, "engine channel lost");
                crate::confine::exit_immediately(EXIT_CHANNEL_LOST);
            }
        }
    })
}

pub(crate) use _host::module_def;

#[rustpython_vm::pymodule]
mod _host {
    use super::*;
    use rustpython_vm::builtins::{PyBytes, PyCode, PyStrRef};
    use rustpython_vm::{PyObjectRef, PyPayload, PyRef, PyResult, TryFromObject, VirtualMachine};

    /// Streams printed text to the engine.
    #[pyfunction]
    fn write(text: PyStrRef) {
        let text = text.to_string_lossy().into_owned();
        with_channel(|c| c.send(&Message::Output { text }));
    }

    /// Sends a tool call; returns its id.
    #[pyfunction]
    fn submit(tool: PyStrRef, args_json: PyStrRef) -> u64 {
        let id = NEXT_CALL_ID.with(|n| {
            let id = n.get();
            n.set(id + 1);
            id
        });
        let message = Message::ToolCall {
            id,
            tool: tool.to_string_lossy().into_owned(),
            args_json: args_json.to_string_lossy().into_owned(),
        };
        with_channel(|c| c.send(&message));
        id
    }

    /// Waits up to `timeout` seconds (None: until one arrives) for tool replies and returns
    /// every reply available: a list of `(id, value_json, exception, message, error_code)`
    /// tuples where `value_json` is None for a failed call.
    #[pyfunction]
    fn wait(timeout: PyObjectRef, vm: &VirtualMachine) -> PyResult<PyObjectRef> {
        let timeout = if vm.is_none(&timeout) {
            None
        } else {
            let secs = f64::try_from_object(vm, timeout)?;
            Some(Duration::from_secs_f64(secs.clamp(0.0, 86_400.0)))
        };
        let mut replies = Vec::new();
        let mut wait = timeout;
        loop {
            let message = with_channel(|c| c.recv(wait));
            match message {
                Some(Message::ToolReply { id, reply }) => {
                    let item = match reply {
                        ToolReply::Ok { value_json } => vm.new_tuple((
                            id,
                            vm.ctx.new_str(value_json),
                            vm.ctx.none(),
                            vm.ctx.none(),
                            vm.ctx.none(),
                        )),
                        ToolReply::Err {
                            exception,
                            message,
                            error_code,
                        } => vm.new_tuple((
                            id,
                            vm.ctx.none(),
                            vm.ctx.new_str(exception),
                            vm.ctx.new_str(message),
                            vm.ctx.new_str(error_code),
                        )),
                    };
                    replies.push(item.into());
                }
                Some(other) => {
                    tracing::debug!(?other, "unexpected message from the engine ignored");
                }
                None => break,
            }
            // After the first reply, collect only what is already there.
            if !with_channel(|c| c.has_pending()) {
                break;
            }
            wait = Some(Duration::ZERO);
        }
        Ok(vm.ctx.new_list(replies).into())
    }

    /// True when a tool reply can be read without blocking.
    #[pyfunction]
    fn replies_waiting() -> bool {
        with_channel(|c| c.has_pending())
    }

    #[pyfunction]
    fn sleep(seconds: f64) {
        if seconds > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(seconds.min(86_400.0)));
        }
    }

    #[pyfunction]
    fn monotonic() -> f64 {
        crate::host::monotonic_seconds()
    }

    /// Random bytes for `os.urandom` and `random.seed()`.
    #[pyfunction]
    fn urandom(n: usize, vm: &VirtualMachine) -> PyResult<PyObjectRef> {
        if n > 1 << 20 {
            return Err(vm.new_value_error("urandom: at most 1 MiB at a time"));
        }
        let mut buf = vec![0u8; n];
        crate::confine::fill_random(&mut buf)
            .map_err(|e| vm.new_os_error(format!("urandom failed: {e}")))?;
        Ok(PyBytes::from(buf).into_ref(&vm.ctx).into())
    }

    /// Code of one of the runtime's Python modules, compiled with the crate.
    #[pyfunction]
    fn code(name: PyStrRef, vm: &VirtualMachine) -> PyResult<PyRef<PyCode>> {
        crate::runtime::code(&name.to_string_lossy())
            .map(|frozen| PyCode::new_ref_from_frozen(vm, frozen))
            .ok_or_else(|| {
                vm.new_key_error(vm.ctx.new_str(name.to_string_lossy().into_owned()).into())
            })
    }

    /// Source of one of the runtime's Python modules.
    #[pyfunction]
    fn source(name: PyStrRef, vm: &VirtualMachine) -> PyResult<String> {
        crate::runtime::source(&name.to_string_lossy())
            .map(str::to_owned)
            .ok_or_else(|| {
                vm.new_key_error(vm.ctx.new_str(name.to_string_lossy().into_owned()).into())
            })
    }
}

/// Seconds on a monotonic clock (shared epoch within a process and its forks).
pub fn monotonic_seconds() -> f64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    EPOCH
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_secs_f64()
}
