//! Where a path lands, judged after `..`, `~`, `$HOME`, the working directory and globs are
//! resolved: `rm -rf /opt/../boot` deletes `/boot`, `rm -rf ./*` after `cd /usr` empties
//! `/usr`, `rm -rf "$DIR"/` deletes `/` when `DIR` is empty.
//!
//! Resolved paths are absolute; the user's home is `/home/~` (a name no real user has), so
//! `~/..` is `/home` as it is on most machines.

use crate::invocation::Arg;

/// The user's home, as resolved paths spell it.
pub const HOME: &str = "/home/~";

/// Top-level directories of the system (a recursive delete of one is never approvable).
const SYSTEM_DIRS: &[&str] = &[
    "etc",
    "usr",
    "var",
    "bin",
    "sbin",
    "boot",
    "lib",
    "lib32",
    "lib64",
    "libx32",
    "root",
    "opt",
    "srv",
    "sys",
    "proc",
    "dev",
    "mnt",
    "media",
    "snap",
    "run",
    "nix",
    "System",
    "Library",
    "Applications",
    "Users",
    "private",
];

/// What a path is, for judging a command that deletes or overwrites it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `/`, or everything at the top level (`/*`, `/u*`).
    Root,
    /// A top-level system directory or everything in it (`/usr`, `/etc/*`).
    SystemDir,
    /// A home directory, all of them, or everything in one (`~`, `~/*`, `/home/*`).
    Home,
    /// Something below a system directory (`/usr/lib`, `/etc/ssh/sshd_config`).
    InSystem,
    /// A top-level entry of the home directory (`~/Pictures`, `~/.ssh`).
    HomeEntry,
    /// A repository's `.git`, or something inside it.
    Git,
    /// The working directory itself or everything in it (`.`, `*`, `./*`).
    Here,
    /// Climbs this many levels above an unknown working directory with nothing after it.
    Above(usize),
    /// Starts with an unknown expansion that could be empty: could be `/`.
    MaybeRoot,
    /// `/tmp` and friends, below the top.
    Temp,
    Ordinary,
}

/// `path` (as written, home as `~`) resolved against `cwd`; `None` when it is relative and
/// the working directory is unknown.
pub fn join(cwd: Option<&str>, path: &str) -> Option<String> {
    let expanded = expand_home(path);
    let base = if expanded.starts_with('/') {
        String::new()
    } else {
        cwd?.to_owned()
    };
    Some(normalise(&format!("{base}/{expanded}")))
}

fn expand_home(path: &str) -> String {
    if path == "~" {
        HOME.to_owned()
    } else if let Some(rest) = path.strip_prefix("~/") {
        format!("{HOME}/{rest}")
    } else {
        path.to_owned()
    }
}

/// Removes `.`, `..` and repeated slashes.
fn normalise(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for c in path.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            other => parts.push(other),
        }
    }
    format!("/{}", parts.join("/"))
}

fn components(path: &str) -> Vec<&str> {
    path.split('/').filter(|c| !c.is_empty()).collect()
}

fn is_glob(component: &str) -> bool {
    component.contains(['*', '?', '['])
}

/// Everything in a directory: `*`, `.*`, `{found}` (what find gives).
fn is_everything(component: &str) -> bool {
    matches!(component, "*" | ".*" | "*.*" | "{*,.*}" | ".[!.]*")
}

/// The class of what `arg` names when run in `cwd`.
pub fn classify(arg: &Arg, cwd: Option<&str>) -> Class {
    if arg.unknown_start {
        let rest = strip_leading_expansion(&arg.text);
        let rest = rest.trim_start_matches('/');
        return if rest.is_empty() || components(rest).iter().all(|c| is_everything(c)) {
            Class::MaybeRoot
        } else {
            Class::Ordinary
        };
    }
    let text = arg.text.as_str();
    match join(cwd, text) {
        Some(abs) => {
            let class = classify_absolute(&abs);
            // The working directory itself, or everything in it.
            if class == Class::Ordinary
                && !text.starts_with('/')
                && !text.starts_with('~')
                && is_here(text)
            {
                return Class::Here;
            }
            class
        }
        None => classify_relative(text),
    }
}

fn is_here(text: &str) -> bool {
    let parts = components(text);
    parts.iter().all(|c| *c == "." || is_everything(c))
}

fn classify_relative(text: &str) -> Class {
    let parts = components(text);
    let mut up = 0usize;
    let mut depth = 0usize;
    for c in &parts {
        match *c {
            "." => {}
            ".." => {
                if depth == 0 {
                    up += 1;
                } else {
                    depth -= 1;
                }
            }
            _ => depth += 1,
        }
    }
    let rest: Vec<&&str> = parts.iter().filter(|c| **c != "." && **c != "..").collect();
    if parts.contains(&".git") {
        return Class::Git;
    }
    if up > 0 && (rest.is_empty() || rest.iter().all(|c| is_everything(c)) || up >= 3) {
        return Class::Above(up);
    }
    if up == 0 && is_here(text) {
        return Class::Here;
    }
    Class::Ordinary
}

/// The class of an absolute, normalised path.
pub fn classify_absolute(abs: &str) -> Class {
    let parts = components(abs);
    if parts.contains(&".git") {
        return Class::Git;
    }
    let Some(top) = parts.first() else {
        return Class::Root;
    };
    if parts.len() == 1 && (is_glob(top) || *top == "{found}") {
        return Class::Root;
    }
    let everything_below = |from: usize| parts[from..].iter().all(|c| is_everything(c));
    match *top {
        "home" | "Users" => {
            // /home, /home/*, /home/NAME, /home/NAME/*
            if parts.len() <= 2 || everything_below(2) {
                return Class::Home;
            }
            if parts.len() == 3 {
                return if matches!(parts[2], ".cache" | "tmp" | "Downloads")
                    || parts[2].starts_with("{found}")
                {
                    Class::Ordinary
                } else {
                    Class::HomeEntry
                };
            }
            Class::Ordinary
        }
        "tmp" => {
            if parts.len() == 1 {
                Class::InSystem
            } else {
                Class::Temp
            }
        }
        "var" if parts.get(1) == Some(&"tmp") && parts.len() > 2 => Class::Temp,
        "private" if matches!(parts.get(1), Some(&"tmp") | Some(&"var")) && parts.len() > 2 => {
            Class::Temp
        }
        "dev"
            if parts.len() == 2
                && matches!(parts[1], "null" | "stdout" | "stderr" | "tty" | "zero") =>
        {
            Class::Ordinary
        }
        "dev" if parts.get(1) == Some(&"shm") && parts.len() > 2 => Class::Temp,
        "dev" if parts.get(1) == Some(&"fd") => Class::Ordinary,
        "proc"
            if parts.len() >= 2
                && parts.get(1) != Some(&"sys")
                && parts.get(1) != Some(&"sysrq-trigger") =>
        {
            Class::Ordinary
        }
        t if SYSTEM_DIRS.contains(&t) || is_glob(t) => {
            if parts.len() == 1 || everything_below(1) {
                Class::SystemDir
            } else {
                Class::InSystem
            }
        }
        _ => {
            if parts.len() == 1 || everything_below(1) {
                // /data, /workspace: a top-level directory of its own.
                Class::InSystem
            } else {
                Class::Ordinary
            }
        }
    }
}

fn strip_leading_expansion(text: &str) -> &str {
    let Some(rest) = text.strip_prefix('$') else {
        return text;
    };
    if let Some(inner) = rest.strip_prefix('{') {
        return inner.find('}').map_or("", |i| &inner[i + 1..]);
    }
    if let Some(inner) = rest.strip_prefix('(') {
        return inner.rfind(')').map_or("", |i| &inner[i + 1..]);
    }
    let end = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    &rest[end..]
}

/// Files whose contents are credentials (reading them out is exfiltration).
pub fn is_credential(abs: &str) -> bool {
    let home_rel = abs.strip_prefix(HOME).map(|r| r.trim_start_matches('/'));
    if let Some(rel) = home_rel.or_else(|| {
        // Other users' homes and root's.
        abs.strip_prefix("/root/").or_else(|| {
            abs.strip_prefix("/home/")
                .and_then(|r| r.split_once('/').map(|(_, rest)| rest))
        })
    }) {
        let ssh_key = rel.strip_prefix(".ssh/").is_some_and(|f| {
            (f.starts_with("id_") && !f.ends_with(".pub")) || f == "*" || f.ends_with(".pem")
        });
        return ssh_key
            || rel == ".ssh"
            || rel.starts_with(".aws")
            || rel.starts_with(".config/gcloud")
            || rel.starts_with(".azure")
            || rel == ".kube/config"
            || rel == ".kube"
            || rel == ".netrc"
            || rel == ".pgpass"
            || rel == ".my.cnf"
            || rel == ".docker/config.json"
            || rel == ".git-credentials"
            || rel.starts_with(".gnupg")
            || rel == ".npmrc"
            || rel == ".pypirc"
            || rel == ".vault-token"
            || rel == ".config/gh/hosts.yml"
            || rel.starts_with(".terraform.d/credentials")
            || rel.starts_with(".password-store")
            || rel.ends_with(".pem")
            || rel == ".env";
    }
    matches!(abs, "/etc/shadow" | "/etc/gshadow" | "/etc/sudoers")
        || abs.starts_with("/etc/ssh/ssh_host_")
        || abs.starts_with("/var/run/secrets")
        || abs.starts_with("/run/secrets")
}

/// Files that change how the user's shell, ssh or git start, or how they log in: writing them
/// plants a command that runs later.
pub fn is_startup_or_access(abs: &str) -> bool {
    let Some(rel) = abs
        .strip_prefix(HOME)
        .map(|r| r.trim_start_matches('/'))
        .or_else(|| abs.strip_prefix("/root/"))
    else {
        return false;
    };
    matches!(
        rel,
        ".bashrc"
            | ".bash_profile"
            | ".bash_login"
            | ".bash_logout"
            | ".profile"
            | ".zshrc"
            | ".zprofile"
            | ".zshenv"
            | ".zlogin"
            | ".cshrc"
            | ".tcshrc"
            | ".kshrc"
            | ".config/fish/config.fish"
            | ".gitconfig"
            | ".ssh/config"
            | ".ssh/rc"
            | ".xinitrc"
            | ".xprofile"
            | ".pam_environment"
    ) || rel.starts_with(".ssh/authorized_keys")
        || rel.starts_with(".config/autostart")
        || rel.starts_with(".config/systemd")
        || rel.starts_with(".local/share/systemd")
        || is_credential(abs)
}

/// Block devices: writing them destroys a filesystem. Loop devices count: the file behind
/// one is often a mounted filesystem (a snap, a container image), and an agent that builds an
/// image can write the file instead. `zram` is usually swap, `nbd`/`rbd` network disks,
/// `zd` ZFS volumes, `pmem` persistent memory, `mtd` flash, `rdisk` macOS's raw disks.
pub fn is_block_device(abs: &str) -> bool {
    let Some(dev) = abs.strip_prefix("/dev/") else {
        return false;
    };
    [
        "sd", "hd", "vd", "xvd", "nvme", "mmcblk", "disk", "rdisk", "md", "dm-", "loop", "sr",
        "mapper/", "nbd", "rbd", "zd", "zram", "pmem", "mtd", "bcache", "block/", "root",
    ]
    .iter()
    .any(|p| dev.starts_with(p))
}

/// `/proc/PID/root` is that process's root directory, in the common case the machine's:
/// `/proc/self/root/dev/sda` is `/dev/sda`.
pub fn through_proc_root(abs: &str) -> String {
    let mut path = abs.to_owned();
    loop {
        let parts = components(&path);
        if parts.len() >= 3 && parts[0] == "proc" && parts[2] == "root" {
            path = format!("/{}", parts[3..].join("/"));
        } else {
            return path;
        }
    }
}

/// Kernel controls a write to which stops, crashes, suspends or reboots the machine at once,
/// corrupts its memory, or arms the kernel to panic or reboot: the SysRq trigger and switch,
/// the panic settings, kernel memory and I/O ports, the kernel log (a flood hides what the
/// kernel says and forges its messages), the watchdog (opening it arms a reboot), CPU
/// registers, the power state and hibernation image, and PID 1's memory (init dies, the
/// kernel panics).
pub fn is_machine_fatal(abs: &str) -> bool {
    if let Some(name) = abs.strip_prefix("/proc/sys/kernel/") {
        return name == "sysrq" || name.contains("panic");
    }
    if let Some(name) = abs.strip_prefix("/dev/watchdog") {
        return name.chars().all(|c| c.is_ascii_digit());
    }
    if let Some(rest) = abs.strip_prefix("/dev/cpu/") {
        return rest
            .split_once('/')
            .is_some_and(|(cpu, file)| cpu.chars().all(|c| c.is_ascii_digit()) && file == "msr");
    }
    matches!(
        abs,
        "/proc/sysrq-trigger"
            | "/proc/sys/vm/panic_on_oom"
            | "/proc/1/mem"
            | "/dev/mem"
            | "/dev/kmem"
            | "/dev/port"
            | "/dev/kmsg"
            | "/sys/power/state"
            | "/sys/power/disk"
            | "/sys/power/resume"
            | "/sys/power/autosleep"
    )
}

/// EFI variables (`efivarfs`, and the old `/sys/firmware/efi/vars`, whose `del_var` deletes
/// one): firmware reads them to boot, and some machines do not boot once one is gone. The
/// `dump-*` entries are kernel crash records; deleting them is how NVRAM is freed.
pub fn is_efi_variable(abs: &str) -> bool {
    ["/sys/firmware/efi/efivars/", "/sys/firmware/efi/vars/"]
        .iter()
        .any(|dir| {
            abs.strip_prefix(dir)
                .is_some_and(|name| !name.is_empty() && !name.starts_with("dump-"))
        })
}

/// Directories a recursive delete of which removes EFI variables (`/sys` itself is a
/// system directory, denied on its own).
pub fn holds_efi_variables(abs: &str) -> bool {
    matches!(
        abs,
        "/sys/firmware"
            | "/sys/firmware/efi"
            | "/sys/firmware/efi/efivars"
            | "/sys/firmware/efi/vars"
    )
}

/// A few real paths of each class above, for judging a glob (`> /proc/sysrq-t*`, `tee
/// /dev/[sv]da`) by what it could expand to: bash expands a glob in a redirection when it
/// names one file.
const SAMPLES: &[&str] = &[
    "/proc/sysrq-trigger",
    "/proc/sys/kernel/sysrq",
    "/proc/sys/kernel/panic",
    "/proc/sys/kernel/panic_on_oops",
    "/proc/sys/vm/panic_on_oom",
    "/dev/mem",
    "/dev/kmem",
    "/dev/port",
    "/dev/kmsg",
    "/dev/watchdog",
    "/dev/watchdog0",
    "/dev/cpu/0/msr",
    "/sys/power/state",
    "/sys/power/disk",
    "/sys/power/resume",
    "/dev/sda",
    "/dev/sda1",
    "/dev/vda",
    "/dev/xvda",
    "/dev/nvme0n1",
    "/dev/nvme0n1p1",
    "/dev/mmcblk0",
    "/dev/dm-0",
    "/dev/md0",
    "/dev/loop0",
    "/dev/zram0",
    "/sys/firmware/efi",
    "/sys/firmware/efi/efivars",
    "/sys/firmware/efi/efivars/Boot0000-8be4df61-93ca-11d2-aa0d-00e098032b8c",
];

/// Whether `abs` is, or as a glob could expand to, a path `class` holds.
pub fn may_be(abs: &str, class: fn(&str) -> bool) -> bool {
    if class(abs) {
        return true;
    }
    if !abs.contains(['*', '?', '[', '{']) {
        return false;
    }
    // Compiled only for a glob, which a write to a system path seldom is.
    let Ok(glob) = globset::GlobBuilder::new(abs)
        .literal_separator(true)
        .build()
    else {
        return false;
    };
    let glob = glob.compile_matcher();
    SAMPLES.iter().any(|s| class(s) && glob.is_match(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(path: &str, cwd: Option<&str>) -> Class {
        classify(&Arg::literal(path), cwd)
    }

    #[test]
    fn paths_are_judged_where_they_land() {
        assert_eq!(class("/", None), Class::Root);
        assert_eq!(class("/*", None), Class::Root);
        assert_eq!(class("/opt/../boot", None), Class::SystemDir);
        assert_eq!(class("/usr/*", None), Class::SystemDir);
        assert_eq!(class("./*", Some("/usr")), Class::SystemDir);
        assert_eq!(class("./../../../..", Some("/home/~/src")), Class::Root);
        assert_eq!(class("./../../../..", None), Class::Above(4));
        assert_eq!(class("~", None), Class::Home);
        assert_eq!(class("~/Pictures", None), Class::HomeEntry);
        assert_eq!(class("~/src/app/build", None), Class::Ordinary);
        assert_eq!(class(".git/objects", None), Class::Git);
        assert_eq!(class("*", None), Class::Here);
        assert_eq!(class("build", None), Class::Ordinary);
        assert_eq!(class("/tmp/build-1", None), Class::Temp);
        assert_eq!(class("/var/lib/docker", None), Class::InSystem);
    }

    #[test]
    fn unknown_variables_could_be_the_root() {
        let unknown = |text: &str| Arg {
            text: text.into(),
            dynamic: true,
            unknown_start: true,
        };
        assert_eq!(classify(&unknown("$DIR/"), None), Class::MaybeRoot);
        assert_eq!(classify(&unknown("$DIR/*"), None), Class::MaybeRoot);
        assert_eq!(classify(&unknown("${DIR}"), None), Class::MaybeRoot);
        assert_eq!(classify(&unknown("$DIR/build"), None), Class::Ordinary);
    }

    #[test]
    fn credentials_and_start_up_files() {
        assert!(is_credential("/home/~/.ssh/id_ed25519"));
        assert!(!is_credential("/home/~/.ssh/id_ed25519.pub"));
        assert!(is_credential("/home/~/.aws/credentials"));
        assert!(is_startup_or_access("/home/~/.ssh/authorized_keys2"));
        assert!(is_startup_or_access("/home/~/.profile"));
        assert!(!is_startup_or_access("/home/~/notes.txt"));
        assert!(is_block_device("/dev/nvme0n1"));
        assert!(!is_block_device("/dev/null"));
    }

    #[test]
    fn files_whose_writes_end_the_machine() {
        for fatal in [
            "/proc/sysrq-trigger",
            "/proc/sys/kernel/sysrq",
            "/proc/sys/kernel/panic_on_warn",
            "/proc/sys/kernel/hung_task_panic",
            "/dev/mem",
            "/dev/kmsg",
            "/dev/watchdog1",
            "/dev/cpu/3/msr",
            "/sys/power/state",
        ] {
            assert!(is_machine_fatal(fatal), "{fatal}");
        }
        for harmless in [
            "/proc/sys/kernel/hostname",
            "/proc/sys/vm/drop_caches",
            "/proc/self/status",
            "/dev/null",
            "/dev/watchdog-notes",
            "/dev/cpu/0/cpuid",
            "/sys/power/pm_async",
            "/proc/sysrq-trigger.bak",
        ] {
            assert!(!is_machine_fatal(harmless), "{harmless}");
        }
        assert_eq!(
            through_proc_root("/proc/self/root/proc/1/root/dev/sda"),
            "/dev/sda"
        );
        assert_eq!(through_proc_root("/proc/self/status"), "/proc/self/status");
        assert!(may_be("/proc/sysrq-t*", is_machine_fatal));
        assert!(may_be("/dev/[sv]da", is_block_device));
        assert!(may_be("/sys/firmware/*", holds_efi_variables));
        assert!(!may_be("/dev/tty*", is_machine_fatal));
        assert!(!may_be("/tmp/*", is_block_device));
        assert!(is_efi_variable("/sys/firmware/efi/efivars/*"));
        assert!(!is_efi_variable("/sys/firmware/efi/efivars/dump-type0-1"));
        assert!(!is_efi_variable("/sys/firmware/efi/efivars"));
    }
}
