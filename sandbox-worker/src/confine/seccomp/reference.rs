//! The reference the filters are held to: what Docker's default seccomp profile refuses an
//! unprivileged container (`sandbox-worker/data/docker-default-refused.tsv`, derived from
//! moby's profile; the file's header says from which commit and how), and a check of any
//! filter stack against it.

use seccompiler::sock_filter;

use super::evaluate::{CallData, describe, refuses, stacked};
use super::program::{AUDIT_ARCH_X86_64, X32_SYSCALL_BIT};
use super::syscalls;

const DOCKER_REFUSED: &str = include_str!("../../../data/docker-default-refused.tsv");

/// One call, with the arguments Docker refuses it with.
#[derive(Debug, Clone)]
pub struct RefusedCall {
    pub name: String,
    pub nr: u32,
    /// `any`, or `argN=VALUE NAME`.
    pub arguments: String,
    pub args: [u64; 6],
}

/// Every line of the reference.
pub fn docker_refused() -> Result<Vec<RefusedCall>, String> {
    let mut calls = Vec::new();
    for line in DOCKER_REFUSED
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let mut fields = line.split('\t');
        let (Some(name), Some(nr), Some(arguments)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(format!("reference line without three fields: {line}"));
        };
        let nr: u32 = nr.parse().map_err(|e| format!("{line}: {e}"))?;
        if syscalls::number(name) != Some(nr) {
            return Err(format!("{line}: the call table numbers {name} otherwise"));
        }
        let mut args = [0u64; 6];
        if arguments != "any" {
            let spec = arguments.split_whitespace().next().unwrap_or_default();
            let (index, value) = spec
                .strip_prefix("arg")
                .and_then(|s| s.split_once('='))
                .ok_or_else(|| format!("{line}: arguments are 'any' or 'argN=VALUE'"))?;
            let index: usize = index.parse().map_err(|e| format!("{line}: {e}"))?;
            let slot = args
                .get_mut(index)
                .ok_or_else(|| format!("{line}: no argument {index}"))?;
            *slot = value.parse().map_err(|e| format!("{line}: {e}"))?;
        }
        calls.push(RefusedCall {
            name: name.to_owned(),
            nr,
            arguments: arguments.to_owned(),
            args,
        });
    }
    Ok(calls)
}

/// What a filter stack decides for one probe.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Verdict {
    pub call: String,
    pub nr: u32,
    pub arguments: String,
    pub verdict: String,
    pub refused: bool,
}

/// The stack's verdict on every call of the reference, on the x32 twin of a few calls and on
/// a call through a foreign architecture (i386's `int 0x80`). Every one should be refused.
pub fn check_stack(filters: &[Vec<sock_filter>]) -> Result<Vec<Verdict>, String> {
    let mut probes: Vec<(String, u32, u32, String, [u64; 6])> = docker_refused()?
        .into_iter()
        .map(|c| (c.name, c.nr, AUDIT_ARCH_X86_64, c.arguments, c.args))
        .collect();
    for name in ["unshare", "getpid", "read", "socket", "ptrace", "mount"] {
        let nr = syscalls::number(name).ok_or_else(|| format!("no call {name}"))?;
        probes.push((
            format!("{name} (x32)"),
            nr | X32_SYSCALL_BIT,
            AUDIT_ARCH_X86_64,
            "any".into(),
            [0; 6],
        ));
    }
    // i386's getpid is 20; AUDIT_ARCH_I386.
    probes.push((
        "getpid (i386)".into(),
        20,
        0x4000_0003,
        "any".into(),
        [0; 6],
    ));
    probes
        .into_iter()
        .map(|(call, nr, arch, arguments, args)| {
            let ret = stacked(filters, &CallData { nr, arch, args })?;
            Ok(Verdict {
                call,
                nr,
                arguments,
                verdict: describe(ret),
                refused: refuses(ret),
            })
        })
        .collect()
}

/// The comparison with Docker's profile as Markdown (docs/sandbox.md carries it between its
/// `seccomp-comparison` markers; a unit test keeps the two equal).
pub fn comparison_markdown() -> Result<String, String> {
    use super::program::{Action, Rule};
    use super::tables::{COMMAND, SCRIPT};
    let command = [super::command_program().map_err(|e| e.to_string())?];
    let script = [
        super::script_program(1).map_err(|e| e.to_string())?,
        super::zygote_program().map_err(|e| e.to_string())?,
    ];
    let verdict = |stack: &[Vec<sock_filter>], nr: u32, args: [u64; 6]| {
        stacked(
            stack,
            &CallData {
                nr,
                arch: AUDIT_ARCH_X86_64,
                args,
            },
        )
        .map(describe)
    };
    let docker = docker_refused()?;
    // One row per group of calls that Docker and both filters treat alike, for one reason;
    // a call refused for some arguments gets a row of its own listing them.
    struct Row {
        calls: Vec<String>,
        when: Vec<String>,
        verdicts: [String; 4],
    }
    let mut rows: Vec<Row> = Vec::new();
    for call in &docker {
        let docker_errno = if call.name == "clone3" {
            "errno ENOSYS"
        } else {
            "errno EPERM"
        };
        let verdicts = [
            docker_errno.to_owned(),
            verdict(&command, call.nr, call.args)?,
            verdict(&script, call.nr, call.args)?,
            COMMAND
                .entry_of(&call.name)
                .map_or("", |e| e.reason)
                .replace('|', "/"),
        ];
        let name = format!("`{}`", call.name);
        let when = if call.arguments == "any" {
            "always".to_owned()
        } else {
            format!("`{}`", call.arguments.replace('|', "\\|"))
        };
        let always = call.arguments == "any";
        let same = rows.iter_mut().find(|r| {
            r.verdicts == verdicts
                && if always {
                    r.when == ["always"]
                } else {
                    r.calls == [name.clone()]
                }
        });
        match same {
            Some(row) if always => row.calls.push(name),
            Some(row) => row.when.push(when),
            None => rows.push(Row {
                calls: vec![name],
                when: vec![when],
                verdicts,
            }),
        }
    }
    let mut out = String::from(
        "| calls | refused by Docker when | Docker | command sandbox | code-mode child | why |\n\
         |---|---|---|---|---|---|\n",
    );
    for row in rows {
        let [docker_errno, command, script, why] = row.verdicts;
        out.push_str(&format!(
            "| {} | {} | {docker_errno} | {command} | {script} | {why} |\n",
            row.calls.join(", "),
            row.when.join(", ")
        ));
    }
    out.push_str(
        "\nWhat the command sandbox refuses although Docker's profile allows it:\n\n\
         | call | command sandbox | code-mode child | why |\n|---|---|---|---|\n",
    );
    let refused_by_docker: Vec<&str> = docker
        .iter()
        .filter(|c| c.arguments == "any")
        .map(|c| c.name.as_str())
        .collect();
    for (nr, name) in syscalls::X86_64 {
        if refused_by_docker.contains(name) {
            continue;
        }
        let Some(entry) = COMMAND.entry_of(name) else {
            continue;
        };
        let stricter = match entry.rule {
            Rule::Always(action) => action != Action::Allow,
            // Conditions Docker does not have (socket, personality and clone are Docker's own).
            Rule::When { .. } => !["socket", "personality", "clone"].contains(name),
        };
        if stricter {
            out.push_str(&format!(
                "| `{name}` | {} | {} | {} |\n",
                match entry.rule {
                    Rule::Always(_) => verdict(&command, *nr, [0; 6])?,
                    Rule::When { .. } => "refused for some arguments".to_owned(),
                },
                verdict(&script, *nr, [0; 6])?,
                entry.reason.replace('|', "/"),
            ));
        }
    }
    let script_allowed = SCRIPT
        .rules()
        .map_err(|e| e.to_string())?
        .iter()
        .filter(|(_, rule)| *rule == Rule::Always(Action::Allow))
        .count();
    out.push_str(&format!(
        "\nThe code-mode child allows {script_allowed} calls and `tgkill` towards itself; every \
         other call of the table gets ENOSYS, and the calls marked kill-process end it.\n"
    ));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::super::{command_program, script_program, zygote_program};
    use super::*;

    #[test]
    fn the_docs_carry_the_current_comparison() {
        let docs = include_str!("../../../../docs/sandbox.md");
        let begin = "<!-- seccomp-comparison: begin -->\n";
        let end = "<!-- seccomp-comparison: end -->";
        let (Some(start), Some(stop)) = (docs.find(begin), docs.find(end)) else {
            panic!("docs/sandbox.md lacks the seccomp-comparison markers");
        };
        let current = comparison_markdown().unwrap();
        assert!(
            docs[start + begin.len()..stop].trim() == current.trim(),
            "docs/sandbox.md is out of date; put this between its markers:\n{current}"
        );
    }

    #[test]
    fn the_reference_names_every_call_docker_refuses() {
        let calls = docker_refused().unwrap();
        for name in [
            "pidfd_getfd",
            "kcmp",
            "process_madvise",
            "mbind",
            "file_setattr",
            "lsm_list_modules",
            "io_uring_setup",
            "clone3",
        ] {
            assert!(calls.iter().any(|c| c.name == name), "{name}");
        }
        assert!(calls.iter().any(|c| c.name == "socket" && c.args[0] == 40));
    }

    #[test]
    fn the_command_filter_refuses_everything_docker_refuses() {
        let verdicts = check_stack(&[command_program().unwrap()]).unwrap();
        let let_through: Vec<_> = verdicts.iter().filter(|v| !v.refused).collect();
        assert!(let_through.is_empty(), "{let_through:#?}");
        assert!(verdicts.len() > 90);
    }

    #[test]
    fn the_script_filter_refuses_everything_docker_refuses() {
        let stack = [script_program(4242).unwrap(), zygote_program().unwrap()];
        let verdicts = check_stack(&stack).unwrap();
        let let_through: Vec<_> = verdicts.iter().filter(|v| !v.refused).collect();
        assert!(let_through.is_empty(), "{let_through:#?}");
    }

    #[test]
    fn what_docker_allows_the_command_filter_allows_too_but_the_debugger_calls() {
        // Spot checks of the other side: ordinary programs keep working.
        let program = command_program().unwrap();
        let allowed = |name: &str, args: [u64; 6]| {
            let nr = syscalls::number(name).unwrap();
            let ret = super::super::evaluate::evaluate(
                &program,
                &CallData {
                    nr,
                    arch: AUDIT_ARCH_X86_64,
                    args,
                },
            )
            .unwrap();
            !refuses(ret)
        };
        for name in [
            "openat",
            "execve",
            "wait4",
            "futex",
            "epoll_pwait2",
            "seccomp",
        ] {
            assert!(allowed(name, [0; 6]), "{name}");
        }
        assert!(allowed("socket", [2, 1, 0, 0, 0, 0]));
        assert!(allowed("socket", [1, 1, 0, 0, 0, 0]));
        assert!(allowed("socket", [16, 3, 0, 0, 0, 0]), "netlink");
        // fork and pthread_create
        assert!(allowed("clone", [0x0120_0011, 0, 0, 0, 0, 0]));
        assert!(allowed("clone", [0x003d_0f00, 0, 0, 0, 0, 0]));
        assert!(allowed("ioctl", [1, 0x5401, 0, 0, 0, 0]), "TCGETS");
        assert!(!allowed("ioctl", [1, 0x5412, 0, 0, 0, 0]), "TIOCSTI");
        assert!(!allowed("ptrace", [0; 6]));
        assert!(!allowed("pidfd_getfd", [0; 6]));
        assert!(allowed("personality", [0xffff_ffff, 0, 0, 0, 0, 0]));
    }
}
