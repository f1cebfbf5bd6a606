//! Process plumbing that needs raw system calls: fork, descriptor handover, the zygote's
//! launch and process attributes.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use nix::sys::socket::{ControlMessage, ControlMessageOwned, MsgFlags, recvmsg, sendmsg};

/// The descriptor number the zygote's control socket has in the zygote, and each child's socket
/// has in that child.
pub const INHERITED_FD: RawFd = 3;

/// Outcome of [`fork`].
pub enum Forked {
    Parent { pid: i32 },
    Child,
}

/// Forks the calling process.
///
/// Only the zygote calls this, and only while it is single-threaded: the child then owns a
/// consistent copy of every lock and allocator state.
pub fn fork() -> io::Result<Forked> {
    // SAFETY: the zygote is single-threaded when it forks (it starts no threads; the VM starts
    // none in this build), so the child cannot inherit a lock held by another thread.
    match unsafe { nix::unistd::fork() }.map_err(io::Error::from)? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent {
            pid: child.as_raw(),
        }),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// Moves `fd` to [`INHERITED_FD`] and closes every other descriptor above stderr.
pub fn keep_only_inherited_fd(fd: OwnedFd) -> io::Result<OwnedFd> {
    let raw = fd.as_raw_fd();
    if raw != INHERITED_FD {
        // SAFETY: dup2 on two descriptor numbers; `raw` is valid (owned by `fd`) and the
        // target is replaced atomically.
        if unsafe { libc::dup2(raw, INHERITED_FD) } < 0 {
            return Err(io::Error::last_os_error());
        }
        drop(fd);
    } else {
        std::mem::forget(fd);
    }
    // SAFETY: close_range only closes descriptors; nothing in this process uses descriptors
    // above INHERITED_FD any more (the caller handed over ownership of everything it needs).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            INHERITED_FD as u32 + 1,
            u32::MAX,
            0u32,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: INHERITED_FD was just made a valid descriptor by dup2 (or was `fd` itself, whose
    // ownership was released with `forget` above), and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(INHERITED_FD) })
}

/// Takes ownership of [`INHERITED_FD`] in a freshly started zygote.
pub fn take_inherited_fd() -> io::Result<OwnedFd> {
    nix::fcntl::fcntl(
        // SAFETY: borrowed only for the F_GETFD probe; validity is what is being checked.
        unsafe { std::os::fd::BorrowedFd::borrow_raw(INHERITED_FD) },
        nix::fcntl::FcntlArg::F_GETFD,
    )
    .map_err(|e| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no control descriptor: {e}"),
        )
    })?;
    // SAFETY: the engine started this process with INHERITED_FD open for it (see
    // `spawn_with_fd`), the probe above proved it is open, and nothing else claims it.
    Ok(unsafe { OwnedFd::from_raw_fd(INHERITED_FD) })
}

/// Spawns `command` with `fd` as its descriptor [`INHERITED_FD`].
pub fn spawn_with_fd(command: &mut Command, fd: &OwnedFd) -> io::Result<std::process::Child> {
    let raw = fd.as_raw_fd();
    // SAFETY: the closure runs between fork and exec and only calls async-signal-safe
    // functions (dup2, fcntl, prctl) on descriptors that are valid in the parent.
    unsafe {
        command.pre_exec(move || {
            if raw == INHERITED_FD {
                let flags = libc::fcntl(raw, libc::F_GETFD);
                if flags < 0 || libc::fcntl(raw, libc::F_SETFD, flags & !libc::FD_CLOEXEC) < 0 {
                    return Err(io::Error::last_os_error());
                }
            } else if libc::dup2(raw, INHERITED_FD) < 0 {
                return Err(io::Error::last_os_error());
            }
            // The zygote dies with the engine.
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    command.spawn()
}

/// Sends one datagram on a SEQPACKET socket, with an optional descriptor attached.
pub fn send_with_fd(socket: &OwnedFd, bytes: &[u8], fd: Option<&OwnedFd>) -> io::Result<()> {
    let iov = [io::IoSlice::new(bytes)];
    let fds;
    let cmsgs: &[ControlMessage<'_>] = match fd {
        Some(fd) => {
            fds = [fd.as_raw_fd()];
            &[ControlMessage::ScmRights(&fds)]
        }
        None => &[],
    };
    sendmsg::<()>(
        socket.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )
    .map_err(io::Error::from)?;
    Ok(())
}

/// Receives one datagram (up to `buf.len()` bytes) and the descriptors attached to it.
/// Returns 0 bytes when the peer closed.
pub fn recv_with_fds(socket: &OwnedFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    let mut iov = [io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; 4]);
    let msg = loop {
        match recvmsg::<()>(
            socket.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(msg) => break msg,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(io::Error::from(e)),
        }
    };
    let mut fds = Vec::new();
    for cmsg in msg.cmsgs().map_err(io::Error::from)? {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            for r in raw {
                // SAFETY: the kernel just installed these descriptors in this process for us
                // (SCM_RIGHTS); nothing else knows their numbers, so ownership is ours.
                fds.push(unsafe { OwnedFd::from_raw_fd(r) });
            }
        }
    }
    if msg.flags.contains(MsgFlags::MSG_TRUNC) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "control message truncated",
        ));
    }
    Ok((msg.bytes, fds))
}

/// Asks the kernel to SIGKILL this process when its parent dies, then checks the parent is
/// still the expected one (it may have died before the request).
pub fn die_with_parent(expected_parent: i32) -> io::Result<()> {
    // SAFETY: PR_SET_PDEATHSIG takes a signal number and no pointers.
    if unsafe {
        libc::prctl(
            libc::PR_SET_PDEATHSIG,
            libc::SIGKILL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    if nix::unistd::getppid().as_raw() != expected_parent {
        return Err(io::Error::other(
            "parent exited before the child was set up",
        ));
    }
    Ok(())
}

/// Fills `buf` from the kernel's random source.
pub fn fill_random(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        // SAFETY: the pointer and length describe the unfilled tail of `buf`, which is valid
        // for writes.
        let n =
            unsafe { libc::getrandom(buf[filled..].as_mut_ptr().cast(), buf.len() - filled, 0) };
        if n < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        filled += n as usize;
    }
    Ok(())
}

/// Ends the process at once, without running destructors or flushing anything: what a forked
/// child must do, since its copy of the parent's state is not its own to clean up.
pub fn exit_immediately(code: i32) -> ! {
    // SAFETY: _exit has no preconditions and does not return.
    unsafe { libc::_exit(code) }
}

const HUGE_PAGE: usize = 2 << 20;

/// This process's `/proc/self/maps`, kept open for [`collapse_into_huge_pages`] (close-on-exec;
/// a forked child closes it with every fd but its socket).
pub fn open_memory_map() -> Option<std::fs::File> {
    std::fs::File::open("/proc/self/maps").ok()
}

/// `MADV_COLLAPSE` (Linux 6.1): collapse a range into transparent huge pages now.
const MADV_COLLAPSE: libc::c_int = 25;

/// Collapses the zygote's anonymous writable memory (the interpreter's heap, built once) into
/// transparent huge pages, where the kernel allows it. Every fork then copies one page-table
/// entry per 2 MiB instead of one per 4 KiB, and every child's exit tears down as few: on 300
/// trivial scripts this cut the CPU spent by about 7% (children still copy only the 4 KiB
/// pages they write: the kernel splits a shared huge page on the first write). Best effort: a
/// kernel without `MADV_COLLAPSE`, or with huge pages off, leaves memory as it was. Returns the
/// bytes collapsed. `maps` is this process's `/proc/self/maps`, opened with
/// [`open_memory_map`] before the zygote isolated itself (its /proc is gone afterwards); it is
/// read again from the start, so memory mapped since counts.
pub fn collapse_into_huge_pages(maps: &mut std::fs::File) -> usize {
    use std::io::{Read, Seek};
    let mut text = String::new();
    if maps.rewind().is_err() || maps.read_to_string(&mut text).is_err() {
        return 0;
    }
    let maps = text;
    let mut collapsed = 0;
    for (start, end) in maps.lines().filter_map(anonymous_writable_range) {
        let first = start.next_multiple_of(HUGE_PAGE);
        let last = end - end % HUGE_PAGE;
        if last <= first {
            continue;
        }
        // SAFETY: madvise on a range of this process's own mapped anonymous memory; neither
        // advice changes its contents (MADV_COLLAPSE copies them into huge pages while the
        // range is locked), and the zygote is single-threaded here.
        let done = unsafe {
            let range = first as *mut libc::c_void;
            libc::madvise(range, last - first, libc::MADV_HUGEPAGE) == 0
                && libc::madvise(range, last - first, MADV_COLLAPSE) == 0
        };
        if done {
            collapsed += last - first;
        }
    }
    collapsed
}

/// `(start, end)` of a `/proc/self/maps` line for private writable anonymous memory (the brk
/// heap included), else `None`.
fn anonymous_writable_range(line: &str) -> Option<(usize, usize)> {
    let mapping = Mapping::parse(line)?;
    let anonymous = mapping.name.is_empty() || mapping.name == "[heap]";
    (mapping.perms.starts_with("rw") && !mapping.perms.ends_with('s') && anonymous)
        .then_some((mapping.start, mapping.end))
}

/// One line of `/proc/self/maps`: its range, permissions and path (empty when anonymous).
pub(super) struct Mapping<'a> {
    pub start: usize,
    pub end: usize,
    pub perms: &'a str,
    pub name: &'a str,
}

impl<'a> Mapping<'a> {
    pub fn parse(line: &'a str) -> Option<Self> {
        let mut fields = line.split_whitespace();
        let range = fields.next()?;
        let perms = fields.next()?;
        let name = fields.nth(3).unwrap_or("");
        let (start, end) = range.split_once('-')?;
        Some(Self {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            perms,
            name,
        })
    }
}
