//! A filter table turned into a classic BPF program the kernel runs on every system call.
//!
//! A table lists system calls by name, each with a [`Rule`] and the reason for it; what it does
//! not list gets its default. The program checks, before anything else, that the call comes
//! through the native x86-64 entry (any other audit architecture, i386's `int 0x80` among them,
//! kills the process) and that the x32 bit is clear (an x32 number, `nr | 0x40000000`, kills the
//! process: on a kernel built with x32 those numbers reach the same calls). Then it finds the
//! number's rule by a binary search over runs of numbers that share one rule, so a table of
//! 380 calls is about ten comparisons deep, not 380 in a row; the kernel's per-number action
//! cache is built from the same program.

use seccompiler::{BpfProgram, sock_filter};

use super::super::ConfineError;
use super::syscalls;

/// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `seccomp_data`.
pub(crate) const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JA`, `BPF_JMP | BPF_JEQ | BPF_K`, `BPF_JMP | BPF_JGE | BPF_K`,
/// `BPF_JMP | BPF_JSET | BPF_K`.
pub(crate) const BPF_JA: u16 = 0x05;
pub(crate) const BPF_JEQ_K: u16 = 0x15;
pub(crate) const BPF_JGE_K: u16 = 0x35;
pub(crate) const BPF_JSET_K: u16 = 0x45;
/// `BPF_RET | BPF_K`.
pub(crate) const BPF_RET_K: u16 = 0x06;

/// Offsets in `struct seccomp_data`.
pub(crate) const NR_OFFSET: u32 = 0;
pub(crate) const ARCH_OFFSET: u32 = 4;
pub(crate) const ARGS_OFFSET: u32 = 16;

/// `AUDIT_ARCH_X86_64`.
pub const AUDIT_ARCH_X86_64: u32 = 62 | 0x8000_0000 | 0x4000_0000;
/// `__X32_SYSCALL_BIT`.
pub const X32_SYSCALL_BIT: u32 = 0x4000_0000;

pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
pub const RET_ERRNO: u32 = 0x0005_0000;
pub const RET_ALLOW: u32 = 0x7fff_0000;

/// What a call gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Allow,
    /// Fails with this errno; the process goes on.
    Errno(i32),
    /// The whole process dies of SIGSYS: no innocent program gets there.
    Kill,
}

impl Action {
    pub fn ret(self) -> u32 {
        match self {
            Action::Allow => RET_ALLOW,
            // An errno is below 4096: the mask keeps the value in SECCOMP_RET_DATA.
            Action::Errno(errno) => RET_ERRNO | (errno.unsigned_abs() & 0xffff),
            Action::Kill => RET_KILL_PROCESS,
        }
    }
}

/// A test on the low 32 bits of one argument (every argument these tables test is an `int`
/// or flags that live in the low word; the kernel reads an `int` argument from the low word
/// too, so a value hidden in the high bits changes nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Condition {
    /// Allowed when the argument is one of these.
    OneOf(&'static [u32]),
    /// Allowed unless the argument is one of these.
    NoneOf(&'static [u32]),
    /// Allowed when none of these bits is set.
    BitsClear(u32),
    /// Allowed when the argument is the filtered process's own pid.
    OwnPid,
}

/// A table entry's rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    Always(Action),
    /// Allowed when argument `arg` passes `condition`; otherwise `otherwise`.
    When {
        arg: u8,
        condition: Condition,
        otherwise: Action,
    },
}

/// One line of a filter table: calls, what they get, and why.
#[derive(Debug, Clone, Copy)]
pub struct Entry {
    pub calls: &'static [&'static str],
    pub rule: Rule,
    pub reason: &'static str,
}

/// A whole filter as data.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    pub name: &'static str,
    pub entries: &'static [Entry],
    /// What a call the table does not list gets (new calls of a later kernel among them).
    pub default: Action,
}

impl Table {
    /// The rule of every listed number (a number listed twice is an error: one rule each).
    pub fn rules(&self) -> Result<Vec<(u32, Rule)>, ConfineError> {
        let mut rules: Vec<(u32, Rule)> = Vec::new();
        for entry in self.entries {
            for name in entry.calls {
                let nr = syscalls::number(name).ok_or_else(|| {
                    ConfineError::Seccomp(format!("{}: unknown system call {name}", self.name))
                })?;
                if rules.iter().any(|(n, _)| *n == nr) {
                    return Err(ConfineError::Seccomp(format!(
                        "{}: {name} is listed twice",
                        self.name
                    )));
                }
                rules.push((nr, entry.rule));
            }
        }
        rules.sort_unstable_by_key(|(nr, _)| *nr);
        Ok(rules)
    }

    /// The entry that decides `name`, if the table lists it.
    pub fn entry_of(&self, name: &str) -> Option<&'static Entry> {
        self.entries.iter().find(|e| e.calls.contains(&name))
    }

    /// The BPF program; `own_pid` is what [`Condition::OwnPid`] compares with.
    pub fn compile(&self, own_pid: u32) -> Result<BpfProgram, ConfineError> {
        let rules = self.rules()?;
        // Runs of consecutive numbers with one rule; the last run reaches up to the x32 bit.
        let mut runs: Vec<(u32, Rule)> = Vec::new();
        let mut next = 0u32;
        for (nr, rule) in rules {
            if nr > next {
                push_run(&mut runs, next, Rule::Always(self.default));
            }
            push_run(&mut runs, nr, rule);
            next = nr + 1;
        }
        push_run(&mut runs, next, Rule::Always(self.default));
        let mut program = vec![
            stmt(BPF_LD_W_ABS, ARCH_OFFSET),
            jump(BPF_JEQ_K, AUDIT_ARCH_X86_64, 1, 0)?,
            stmt(BPF_RET_K, RET_KILL_PROCESS),
            stmt(BPF_LD_W_ABS, NR_OFFSET),
            jump(BPF_JGE_K, X32_SYSCALL_BIT, 0, 1)?,
            stmt(BPF_RET_K, RET_KILL_PROCESS),
        ];
        program.extend(search(&runs, own_pid)?);
        if program.len() > usize::from(u16::MAX) {
            return Err(ConfineError::Seccomp(format!(
                "{}: {} instructions is too long a filter",
                self.name,
                program.len()
            )));
        }
        Ok(program)
    }
}

fn push_run(runs: &mut Vec<(u32, Rule)>, start: u32, rule: Rule) {
    if runs.last().is_none_or(|(_, last)| *last != rule) {
        runs.push((start, rule));
    }
}

fn stmt(code: u16, k: u32) -> sock_filter {
    sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

fn jump(code: u16, k: u32, jt: usize, jf: usize) -> Result<sock_filter, ConfineError> {
    let offset = |o: usize| {
        u8::try_from(o).map_err(|_| {
            ConfineError::Seccomp(format!("filter jump of {o} instructions is too long"))
        })
    };
    Ok(sock_filter {
        code,
        jt: offset(jt)?,
        jf: offset(jf)?,
        k,
    })
}

/// The subtree deciding `runs` (the syscall number is in the accumulator). Every path ends in
/// a return, so subtrees are laid out one after another.
fn search(runs: &[(u32, Rule)], own_pid: u32) -> Result<Vec<sock_filter>, ConfineError> {
    let [(_, rule)] = runs else {
        let middle = runs.len() / 2;
        let low = search(&runs[..middle], own_pid)?;
        let high = search(&runs[middle..], own_pid)?;
        let boundary = runs[middle].0;
        let mut out = Vec::with_capacity(2 + low.len() + high.len());
        match u8::try_from(low.len()) {
            Ok(_) => out.push(jump(BPF_JGE_K, boundary, low.len(), 0)?),
            // A conditional jump reaches 255 instructions; a long one goes through `BPF_JA`.
            Err(_) => {
                out.push(jump(BPF_JGE_K, boundary, 0, 1)?);
                let far = u32::try_from(low.len())
                    .map_err(|_| ConfineError::Seccomp("filter too long".into()))?;
                out.push(stmt(BPF_JA, far));
            }
        }
        out.extend(low);
        out.extend(high);
        return Ok(out);
    };
    rule_code(*rule, own_pid)
}

/// The instructions of one rule, ending in returns.
fn rule_code(rule: Rule, own_pid: u32) -> Result<Vec<sock_filter>, ConfineError> {
    let (arg, condition, otherwise) = match rule {
        Rule::Always(action) => return Ok(vec![stmt(BPF_RET_K, action.ret())]),
        Rule::When {
            arg,
            condition,
            otherwise,
        } => (arg, condition, otherwise),
    };
    if arg > 5 {
        return Err(ConfineError::Seccomp(format!(
            "argument {arg} does not exist"
        )));
    }
    let mut out = vec![stmt(BPF_LD_W_ABS, ARGS_OFFSET + 8 * u32::from(arg))];
    let own = [own_pid];
    let (values, listed_allows): (&[u32], bool) = match condition {
        Condition::OneOf(values) => (values, true),
        Condition::OwnPid => (&own, true),
        Condition::NoneOf(values) => (values, false),
        Condition::BitsClear(mask) => {
            out.push(jump(BPF_JSET_K, mask, 1, 0)?);
            out.push(stmt(BPF_RET_K, RET_ALLOW));
            out.push(stmt(BPF_RET_K, otherwise.ret()));
            return Ok(out);
        }
    };
    // Comparisons, then [RET unlisted] [RET listed]: a match jumps to the second.
    let n = values.len();
    for (i, value) in values.iter().enumerate() {
        out.push(jump(BPF_JEQ_K, *value, n - i, 0)?);
    }
    let (listed, unlisted) = if listed_allows {
        (Action::Allow, otherwise)
    } else {
        (otherwise, Action::Allow)
    };
    out.push(stmt(BPF_RET_K, unlisted.ret()));
    out.push(stmt(BPF_RET_K, listed.ret()));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::evaluate::{CallData, evaluate};
    use super::*;

    const ENTRIES: &[Entry] = &[
        Entry {
            calls: &["read", "write", "close"],
            rule: Rule::Always(Action::Allow),
            reason: "I/O",
        },
        Entry {
            calls: &["socket"],
            rule: Rule::When {
                arg: 0,
                condition: Condition::NoneOf(&[38, 40]),
                otherwise: Action::Errno(libc::EPERM),
            },
            reason: "no AF_ALG, no AF_VSOCK",
        },
        Entry {
            calls: &["personality"],
            rule: Rule::When {
                arg: 0,
                condition: Condition::OneOf(&[0, 8]),
                otherwise: Action::Errno(libc::EPERM),
            },
            reason: "personality",
        },
        Entry {
            calls: &["clone"],
            rule: Rule::When {
                arg: 0,
                condition: Condition::BitsClear(0x7E02_0000),
                otherwise: Action::Errno(libc::EPERM),
            },
            reason: "no namespaces",
        },
        Entry {
            calls: &["tgkill"],
            rule: Rule::When {
                arg: 0,
                condition: Condition::OwnPid,
                otherwise: Action::Errno(libc::EPERM),
            },
            reason: "itself only",
        },
        Entry {
            calls: &["ptrace"],
            rule: Rule::Always(Action::Kill),
            reason: "never",
        },
    ];
    const TABLE: Table = Table {
        name: "test",
        entries: ENTRIES,
        default: Action::Errno(libc::ENOSYS),
    };

    fn verdict(program: &[sock_filter], nr: u32, args: [u64; 6]) -> u32 {
        evaluate(
            program,
            &CallData {
                nr,
                arch: AUDIT_ARCH_X86_64,
                args,
            },
        )
        .unwrap()
    }

    #[test]
    fn every_number_gets_its_rule() {
        let program = TABLE.compile(4242).unwrap();
        let eperm = Action::Errno(libc::EPERM).ret();
        let enosys = Action::Errno(libc::ENOSYS).ret();
        for nr in 0..1024u32 {
            let name = syscalls::name(nr).unwrap_or("");
            let expected = match name {
                "read" | "write" | "close" => RET_ALLOW,
                "ptrace" => RET_KILL_PROCESS,
                "socket" | "personality" | "clone" | "tgkill" => continue,
                _ => enosys,
            };
            assert_eq!(verdict(&program, nr, [0; 6]), expected, "{nr} {name}");
        }
        // (call, first argument, verdict)
        let cases: [(&str, u64, u32); 10] = [
            ("socket", 2, RET_ALLOW),
            ("socket", 40, eperm),
            ("socket", 38, eperm),
            // The kernel reads an int: high bits do not hide the family.
            ("socket", (1 << 32) | 40, eperm),
            ("personality", 8, RET_ALLOW),
            ("personality", 0x40000, eperm),
            ("clone", 0x0001_1200, RET_ALLOW),
            ("clone", 0x1000_0000, eperm),
            ("tgkill", 4242, RET_ALLOW),
            ("tgkill", 1, eperm),
        ];
        for (name, arg0, expected) in cases {
            let nr = syscalls::number(name).unwrap();
            assert_eq!(
                verdict(&program, nr, [arg0, 1, 6, 0, 0, 0]),
                expected,
                "{name}({arg0:#x})"
            );
        }
    }

    #[test]
    fn x32_numbers_and_foreign_architectures_are_killed_first() {
        let program = TABLE.compile(1).unwrap();
        for nr in [0, 1, 56, 101, 1000] {
            assert_eq!(
                verdict(&program, nr | X32_SYSCALL_BIT, [0; 6]),
                RET_KILL_PROCESS
            );
        }
        assert_eq!(verdict(&program, u32::MAX, [0; 6]), RET_KILL_PROCESS);
        // i386 (`int 0x80`): AUDIT_ARCH_I386.
        let i386 = evaluate(
            &program,
            &CallData {
                nr: 0,
                arch: 0x4000_0003,
                args: [0; 6],
            },
        )
        .unwrap();
        assert_eq!(i386, RET_KILL_PROCESS);
    }

    #[test]
    fn long_tables_jump_far_and_stay_shallow() {
        // Every other call allowed: the most runs a table can have.
        static NAMES: std::sync::OnceLock<Vec<&'static str>> = std::sync::OnceLock::new();
        let names = NAMES.get_or_init(|| {
            syscalls::X86_64
                .iter()
                .step_by(2)
                .map(|(_, name)| *name)
                .collect()
        });
        let entries: &'static [Entry] = Box::leak(Box::new([Entry {
            calls: names.as_slice(),
            rule: Rule::Always(Action::Allow),
            reason: "test",
        }]));
        let table = Table {
            name: "alternating",
            entries,
            default: Action::Errno(libc::EPERM),
        };
        let program = table.compile(1).unwrap();
        assert!(program.len() > 300, "{}", program.len());
        for (i, (nr, _)) in syscalls::X86_64.iter().enumerate() {
            let expected = if i % 2 == 0 {
                RET_ALLOW
            } else {
                Action::Errno(libc::EPERM).ret()
            };
            assert_eq!(verdict(&program, *nr, [0; 6]), expected, "{nr}");
        }
    }

    #[test]
    fn a_misspelt_or_doubled_call_is_an_error() {
        let misspelt = Table {
            name: "t",
            entries: &[Entry {
                calls: &["raed"],
                rule: Rule::Always(Action::Allow),
                reason: "",
            }],
            default: Action::Kill,
        };
        assert!(
            misspelt
                .compile(1)
                .unwrap_err()
                .to_string()
                .contains("raed")
        );
        let doubled = Table {
            name: "t",
            entries: &[
                Entry {
                    calls: &["read"],
                    rule: Rule::Always(Action::Allow),
                    reason: "",
                },
                Entry {
                    calls: &["read"],
                    rule: Rule::Always(Action::Kill),
                    reason: "",
                },
            ],
            default: Action::Kill,
        };
        assert!(
            doubled
                .compile(1)
                .unwrap_err()
                .to_string()
                .contains("twice")
        );
    }
}
