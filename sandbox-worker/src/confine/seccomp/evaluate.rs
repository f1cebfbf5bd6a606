//! Runs a seccomp BPF program the way the kernel does, for the tests that check what a filter
//! decides (the tables' own, and a filter read back from a sandboxed process). Covers the
//! instructions seccomp programs use: loads of `seccomp_data` words and constants, the
//! constant ALU operations, every jump and the returns; anything else is an error, never a
//! guess.

use seccompiler::sock_filter;

/// What the kernel hands a filter for one call.
#[derive(Debug, Clone, Copy)]
pub struct CallData {
    pub nr: u32,
    pub arch: u32,
    pub args: [u64; 6],
}

impl CallData {
    /// The 32-bit word at `offset` of `struct seccomp_data` (little-endian).
    fn word(&self, offset: u32) -> Result<u32, String> {
        let low = |v: u64| (v & 0xffff_ffff) as u32;
        let high = |v: u64| (v >> 32) as u32;
        match offset {
            0 => Ok(self.nr),
            4 => Ok(self.arch),
            // instruction_pointer: no filter of ours reads it; zero as a plain process would
            // not have.
            8 | 12 => Ok(0),
            16..=63 if offset.is_multiple_of(4) => {
                let index = ((offset - 16) / 8) as usize;
                let arg = self.args[index];
                Ok(if (offset - 16).is_multiple_of(8) {
                    low(arg)
                } else {
                    high(arg)
                })
            }
            other => Err(format!("load of seccomp_data offset {other}")),
        }
    }
}

/// The return value of `program` for `call`.
pub fn evaluate(program: &[sock_filter], call: &CallData) -> Result<u32, String> {
    let mut pc = 0usize;
    let mut a = 0u32;
    let mut x = 0u32;
    let mut scratch = [0u32; 16];
    // A classic BPF program only jumps forward: it ends within `program.len()` steps.
    for _ in 0..=program.len() {
        let ins = program
            .get(pc)
            .ok_or_else(|| format!("ran off the end of the program at {pc}"))?;
        let k = ins.k;
        pc += 1;
        let class = ins.code & 0x07;
        match class {
            // BPF_LD
            0x00 => match ins.code {
                0x20 => a = call.word(k)?,
                0x00 => a = k,
                0x60 => a = *scratch.get(k as usize).ok_or("scratch index")?,
                other => return Err(format!("load instruction {other:#x}")),
            },
            // BPF_LDX
            0x01 => match ins.code {
                0x01 => x = k,
                0x61 => x = *scratch.get(k as usize).ok_or("scratch index")?,
                other => return Err(format!("ldx instruction {other:#x}")),
            },
            // BPF_ST, BPF_STX
            0x02 => *scratch.get_mut(k as usize).ok_or("scratch index")? = a,
            0x03 => *scratch.get_mut(k as usize).ok_or("scratch index")? = x,
            // BPF_ALU
            0x04 => {
                let operand = if ins.code & 0x08 != 0 { x } else { k };
                a = match ins.code & 0xf0 {
                    0x00 => a.wrapping_add(operand),
                    0x10 => a.wrapping_sub(operand),
                    0x20 => a.wrapping_mul(operand),
                    0x30 if operand != 0 => a / operand,
                    0x40 => a | operand,
                    0x50 => a & operand,
                    0x60 => a.checked_shl(operand).unwrap_or(0),
                    0x70 => a.checked_shr(operand).unwrap_or(0),
                    0x80 => a.wrapping_neg(),
                    0xa0 => a ^ operand,
                    other => return Err(format!("alu operation {other:#x}")),
                };
            }
            // BPF_JMP
            0x05 => {
                let operand = if ins.code & 0x08 != 0 { x } else { k };
                let taken = match ins.code & 0xf0 {
                    0x00 => {
                        pc += k as usize;
                        continue;
                    }
                    0x10 => a == operand,
                    0x20 => a > operand,
                    0x30 => a >= operand,
                    0x40 => a & operand != 0,
                    other => return Err(format!("jump {other:#x}")),
                };
                pc += usize::from(if taken { ins.jt } else { ins.jf });
            }
            // BPF_RET
            0x06 => {
                return match ins.code & 0x18 {
                    0x00 => Ok(k),
                    0x10 => Ok(a),
                    other => Err(format!("return source {other:#x}")),
                };
            }
            // BPF_MISC: TAX, TXA
            _ => match ins.code {
                0x07 => x = a,
                0x87 => a = x,
                other => return Err(format!("instruction {other:#x}")),
            },
        }
    }
    Err("the program did not return".into())
}

/// The action part of a return value (`SECCOMP_RET_ACTION_FULL`).
pub fn action_of(ret: u32) -> u32 {
    ret & 0xffff_0000
}

/// What the kernel does when several filters are stacked: every one runs, and the return
/// whose action comes first in precedence wins (the kernel compares actions as signed
/// numbers: KILL_PROCESS, then KILL_THREAD, TRAP, ERRNO, USER_NOTIF, TRACE, LOG, ALLOW).
pub fn stacked(programs: &[Vec<sock_filter>], call: &CallData) -> Result<u32, String> {
    let mut verdict: Option<u32> = None;
    for program in programs {
        let ret = evaluate(program, call)?;
        let wins = verdict.is_none_or(|v| (action_of(ret) as i32) < (action_of(v) as i32));
        if wins {
            verdict = Some(ret);
        }
    }
    verdict.ok_or_else(|| "no filter".into())
}

/// A return value in words: `allow`, `errno EPERM`, `kill`, ...
pub fn describe(ret: u32) -> String {
    match action_of(ret) {
        0x7fff_0000 => "allow".into(),
        0x8000_0000 => "kill-process".into(),
        0x0000_0000 => "kill-thread".into(),
        0x0005_0000 => match (ret & 0xffff) as i32 {
            libc::EPERM => "errno EPERM".into(),
            libc::ENOSYS => "errno ENOSYS".into(),
            libc::EACCES => "errno EACCES".into(),
            other => format!("errno {other}"),
        },
        other => format!("action {other:#x}"),
    }
}

/// Whether a return value refuses the call (anything but allow, log or trace to nobody).
pub fn refuses(ret: u32) -> bool {
    !matches!(action_of(ret), 0x7fff_0000 | 0x7ffc_0000)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program of one instruction.
    fn only(code: u16, k: u32) -> Vec<sock_filter> {
        vec![sock_filter {
            code,
            jt: 0,
            jf: 0,
            k,
        }]
    }

    #[test]
    fn stacked_filters_take_the_strictest() {
        let allow = only(0x06, 0x7fff_0000);
        let eperm = only(0x06, 0x0005_0001);
        let kill = only(0x06, 0x8000_0000);
        let call = CallData {
            nr: 0,
            arch: 0,
            args: [0; 6],
        };
        assert_eq!(
            stacked(&[allow.clone(), eperm.clone()], &call).unwrap(),
            0x0005_0001
        );
        assert_eq!(stacked(&[eperm, kill, allow], &call).unwrap(), 0x8000_0000);
    }

    #[test]
    fn unknown_instructions_are_errors_not_guesses() {
        let program = only(0xff, 0);
        let call = CallData {
            nr: 0,
            arch: 0,
            args: [0; 6],
        };
        assert!(evaluate(&program, &call).is_err());
    }
}
