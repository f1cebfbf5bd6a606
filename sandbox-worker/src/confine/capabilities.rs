//! Capabilities: none kept. Root keeps none across exec once the bounding set is empty, and a
//! process in a user namespace of its own (Paddock run by an ordinary user) loses the full set
//! that namespace gave it.

/// Empties the bounding, ambient, inheritable, permitted and effective sets: even a command
/// running as root keeps no capability across its exec.
pub fn drop_all() -> std::io::Result<()> {
    for cap in 0..64 {
        // SAFETY: integer-only prctl; EINVAL past the last capability is expected.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    // SAFETY: integer-only prctl.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let header = Header {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset reads one header and two data structs (version 3) from valid memory.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &header, data.as_ptr()) };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
