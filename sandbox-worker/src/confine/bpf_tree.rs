//! An allow-list seccomp program laid out as a binary search over syscall numbers.
//!
//! seccompiler lays a filter out as one comparison per syscall, in a row. Each child installs
//! its own filter (it names the child's pid), and the kernel, when it attaches a filter,
//! evaluates it for every syscall number to build its action cache: a row of ~50 comparisons
//! made that the largest part of a child's seccomp cost. A search tree needs about six
//! comparisons per number, for the same decisions (a unit test checks every number).

use seccompiler::{BpfProgram, sock_filter};

use super::ConfineError;

/// `BPF_LD | BPF_W | BPF_ABS`: load a 32-bit word of `seccomp_data`.
const BPF_LD_W_ABS: u16 = 0x20;
/// `BPF_JMP | BPF_JEQ | BPF_K` and `BPF_JMP | BPF_JGE | BPF_K`.
const BPF_JEQ_K: u16 = 0x15;
const BPF_JGE_K: u16 = 0x35;
/// `BPF_RET | BPF_K`.
const BPF_RET_K: u16 = 0x06;

/// Offsets in `struct seccomp_data`.
const NR_OFFSET: u32 = 0;
const ARCH_OFFSET: u32 = 4;
/// The low 32 bits of the first argument (little-endian).
const ARG0_LOW_OFFSET: u32 = 16;

pub const RET_ALLOW: u32 = 0x7fff_0000;
pub const RET_KILL_PROCESS: u32 = 0x8000_0000;
const RET_ERRNO: u32 = 0x0005_0000;

/// Syscalls in one leaf of the tree, compared one by one.
const LEAF: usize = 4;

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

/// The audit architecture value of the running kernel's native syscalls.
fn audit_arch() -> Result<u32, ConfineError> {
    match std::env::consts::ARCH {
        "x86_64" => Ok(62 | 0x8000_0000 | 0x4000_0000),
        "aarch64" => Ok(183 | 0x8000_0000 | 0x4000_0000),
        other => Err(ConfineError::Seccomp(format!(
            "unsupported architecture: {other}"
        ))),
    }
}

/// A program that kills the process for a foreign architecture, allows `allowed` (and
/// `tgkill` only when its first argument is `own_pid`) and answers `errno` to everything else.
pub fn allow_list(
    allowed: &[libc::c_long],
    tgkill: libc::c_long,
    own_pid: u32,
    errno: u32,
) -> Result<BpfProgram, ConfineError> {
    let mut numbers: Vec<u32> = allowed
        .iter()
        .chain(std::iter::once(&tgkill))
        .map(|&nr| u32::try_from(nr).map_err(|_| ConfineError::Seccomp(format!("syscall {nr}"))))
        .collect::<Result<_, _>>()?;
    numbers.sort_unstable();
    numbers.dedup();
    let deny = RET_ERRNO | (errno & 0xffff);
    let leaf = Leaf {
        tgkill: u32::try_from(tgkill).map_err(|_| ConfineError::Seccomp("tgkill".into()))?,
        own_pid,
        deny,
    };
    let mut program = vec![
        stmt(BPF_LD_W_ABS, ARCH_OFFSET),
        jump(BPF_JEQ_K, audit_arch()?, 1, 0)?,
        stmt(BPF_RET_K, RET_KILL_PROCESS),
        stmt(BPF_LD_W_ABS, NR_OFFSET),
    ];
    program.extend(leaf.tree(&numbers)?);
    Ok(program)
}

struct Leaf {
    tgkill: u32,
    own_pid: u32,
    deny: u32,
}

impl Leaf {
    /// The subtree deciding `numbers` (sorted); the syscall number is in the accumulator.
    /// Every path ends in a return, so subtrees can be laid out one after another.
    fn tree(&self, numbers: &[u32]) -> Result<Vec<sock_filter>, ConfineError> {
        if numbers.len() <= LEAF {
            return self.leaf(numbers);
        }
        let middle = numbers.len() / 2;
        let low = self.tree(&numbers[..middle])?;
        let high = self.tree(&numbers[middle..])?;
        let mut out = Vec::with_capacity(1 + low.len() + high.len());
        out.push(jump(BPF_JGE_K, numbers[middle], low.len(), 0)?);
        out.extend(low);
        out.extend(high);
        Ok(out)
    }

    fn leaf(&self, numbers: &[u32]) -> Result<Vec<sock_filter>, ConfineError> {
        let mut out = Vec::new();
        for &nr in numbers {
            let then = self.verdict(nr);
            out.push(jump(BPF_JEQ_K, nr, 0, then.len())?);
            out.extend(then);
        }
        out.push(stmt(BPF_RET_K, self.deny));
        Ok(out)
    }

    /// What a matching syscall number gets.
    fn verdict(&self, nr: u32) -> Vec<sock_filter> {
        if nr != self.tgkill {
            return vec![stmt(BPF_RET_K, RET_ALLOW)];
        }
        vec![
            stmt(BPF_LD_W_ABS, ARG0_LOW_OFFSET),
            sock_filter {
                code: BPF_JEQ_K,
                jt: 0,
                jf: 1,
                k: self.own_pid,
            },
            stmt(BPF_RET_K, RET_ALLOW),
            stmt(BPF_RET_K, self.deny),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs `program` the way the kernel does, over the instructions this module emits:
    /// its verdict and how many instructions it executed.
    fn run(program: &[sock_filter], arch: u32, nr: u32, arg0: u32) -> (u32, usize) {
        let mut pc = 0;
        let mut acc = 0u32;
        let mut steps = 0;
        loop {
            steps += 1;
            let ins = &program[pc];
            match ins.code {
                BPF_LD_W_ABS => {
                    acc = match ins.k {
                        NR_OFFSET => nr,
                        ARCH_OFFSET => arch,
                        ARG0_LOW_OFFSET => arg0,
                        other => panic!("load of offset {other}"),
                    };
                    pc += 1;
                }
                BPF_JEQ_K | BPF_JGE_K => {
                    let taken = if ins.code == BPF_JEQ_K {
                        acc == ins.k
                    } else {
                        acc >= ins.k
                    };
                    pc += 1 + usize::from(if taken { ins.jt } else { ins.jf });
                }
                BPF_RET_K => return (ins.k, steps),
                other => panic!("instruction {other:#x}"),
            }
        }
    }

    fn verdict(program: &[sock_filter], arch: u32, nr: u32, arg0: u32) -> u32 {
        run(program, arch, nr, arg0).0
    }

    #[test]
    fn every_syscall_number_gets_the_listed_decision() {
        let allowed = [
            0, 1, 3, 9, 10, 11, 12, 13, 14, 35, 39, 60, 186, 202, 228, 231, 318, 334,
        ];
        let tgkill = 234;
        let pid = 4242;
        let program = allow_list(&allowed, tgkill, pid, 38).unwrap();
        let arch = audit_arch().unwrap();
        let deny = RET_ERRNO | 38;
        for nr in 0..1024u32 {
            let expected = if allowed.contains(&libc::c_long::from(nr)) {
                RET_ALLOW
            } else {
                deny
            };
            if nr == 234 {
                assert_eq!(verdict(&program, arch, nr, pid), RET_ALLOW);
                assert_eq!(verdict(&program, arch, nr, 1), deny);
                continue;
            }
            assert_eq!(verdict(&program, arch, nr, 0), expected, "syscall {nr}");
        }
        // x32 numbers (bit 30 set) and anything huge are denied.
        assert_eq!(verdict(&program, arch, 0x4000_0000, 0), deny);
        assert_eq!(verdict(&program, arch, u32::MAX, 0), deny);
        // A foreign architecture is killed.
        assert_eq!(verdict(&program, 0x4000_0003, 0, 0), RET_KILL_PROCESS);
    }

    #[test]
    fn the_tree_is_far_shorter_to_walk_than_a_row() {
        let allowed: Vec<libc::c_long> = (0..60).map(|n| n * 3).collect();
        let program = allow_list(&allowed, 234, 1, 38).unwrap();
        let arch = audit_arch().unwrap();
        // The worst syscall number, in instructions executed.
        let worst = (0..400)
            .map(|nr| run(&program, arch, nr, 0).1)
            .max()
            .unwrap();
        assert!(worst <= 16, "{worst} instructions for one syscall");
    }
}
