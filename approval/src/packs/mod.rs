//! Rule packs: the dangerous-command rules as data, grouped by what they guard. `core` is the
//! machine itself (files, system, processes, privileges, git, credentials, the network);
//! the others are the command-line tools of services an agent can reach. `[approval] packs`
//! picks them (all by default). Every rule carries examples it must flag and look-alikes it
//! must leave alone; the tests run them all.

mod cloud;
mod containers;
mod core;
mod databases;
mod infrastructure;
mod secrets;
mod services;

use crate::shell::Invocation;

/// How bad a match is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Always denied; no human can approve it.
    Hardline,
    /// Needs a human's approval.
    Dangerous,
}

/// What a rule looks at.
pub enum Test {
    /// A simple command run by one of `programs` (a trailing `*` matches a prefix: `mkfs*`;
    /// `*` alone: any program) whose arguments, joined by single spaces, match `args`
    /// (case-insensitive) and not `unless` (when not empty).
    Command {
        programs: &'static [&'static str],
        args: &'static str,
        unless: &'static str,
    },
    /// A check over one simple command, written in code (paths, flags).
    Check(fn(&Invocation) -> bool),
    /// A check over one pipeline (`curl ... | sh`).
    Pipeline(fn(&[Invocation]) -> bool),
    /// A regular expression over the whole command line, disguises removed: for shapes no
    /// parse of single commands shows (`bash <(curl ...)`). It is compiled and run only when
    /// the line contains one of `hints` (lower-cased): most lines never pay for it.
    Text {
        pattern: &'static str,
        hints: &'static [&'static str],
    },
    /// A shell function that pipes itself into itself in the background.
    ForkBomb,
}

pub struct RuleSpec {
    pub id: &'static str,
    pub severity: Severity,
    pub description: &'static str,
    pub test: Test,
    /// Command lines the rule must flag.
    pub yes: &'static [&'static str],
    /// Look-alikes it must leave alone.
    pub no: &'static [&'static str],
}

pub struct Pack {
    pub name: &'static str,
    pub description: &'static str,
    pub rules: &'static [RuleSpec],
}

/// Every pack, `core` first.
pub const PACKS: &[Pack] = &[
    Pack {
        name: "core",
        description: "files, system, processes, privileges, git, credentials, network",
        rules: core::RULES,
    },
    Pack {
        name: "cloud",
        description: "AWS, Google Cloud, Azure and other cloud CLIs",
        rules: cloud::RULES,
    },
    Pack {
        name: "containers",
        description: "Docker, Podman, Kubernetes, Helm",
        rules: containers::RULES,
    },
    Pack {
        name: "infrastructure",
        description: "Terraform, Pulumi, CDK, Ansible, Vagrant and the like",
        rules: infrastructure::RULES,
    },
    Pack {
        name: "databases",
        description: "SQL clients, Redis, MongoDB, Elasticsearch, etcd and the like",
        rules: databases::RULES,
    },
    Pack {
        name: "services",
        description: "backups, queues, CI, CDNs, feature flags, payments, monitoring, package registries",
        rules: services::RULES,
    },
    Pack {
        name: "secrets",
        description: "Vault, cloud secret managers, password stores, keychains",
        rules: secrets::RULES,
    },
];

/// The names of every pack.
pub fn names() -> Vec<&'static str> {
    PACKS.iter().map(|p| p.name).collect()
}

/// A rule over one program family's arguments.
pub const fn command(
    id: &'static str,
    severity: Severity,
    description: &'static str,
    programs: &'static [&'static str],
    args: &'static str,
    yes: &'static [&'static str],
    no: &'static [&'static str],
) -> RuleSpec {
    command_unless(id, severity, description, programs, args, "", yes, no)
}

/// Same, with an exception (`--dry-run`, a `WHERE` clause).
#[expect(clippy::too_many_arguments, reason = "one rule, written as data")]
pub const fn command_unless(
    id: &'static str,
    severity: Severity,
    description: &'static str,
    programs: &'static [&'static str],
    args: &'static str,
    unless: &'static str,
    yes: &'static [&'static str],
    no: &'static [&'static str],
) -> RuleSpec {
    RuleSpec {
        id,
        severity,
        description,
        test: Test::Command {
            programs,
            args,
            unless,
        },
        yes,
        no,
    }
}

pub const fn check(
    id: &'static str,
    severity: Severity,
    description: &'static str,
    f: fn(&Invocation) -> bool,
    yes: &'static [&'static str],
    no: &'static [&'static str],
) -> RuleSpec {
    RuleSpec {
        id,
        severity,
        description,
        test: Test::Check(f),
        yes,
        no,
    }
}

/// Common verbs of deletion in service CLIs' subcommands (`delete-bucket`, `destroy`,
/// `rb`, `purge`): one argument word that is, or starts or ends with, one of them.
pub const DELETE_VERB: &str = r"(?:^|\s)(?:[a-z0-9-]+-)?(?:delete|destroy|remove|terminate|purge|deregister|drop|wipe|erase|rb|rm|del|flush|truncate|reset|unsubscribe|untag|undeploy)(?:-[a-z0-9-]+)?(?:\s|$|=)";
