//! The approval gate: what the policy says about a command (the analysis is the
//! `paddock-approval` crate's), and asking a human when it says "ask". With nobody to ask, the
//! answer is deny. While a script's nested call waits for a human, the script's clock is
//! paused. Answers "always" are remembered per session or written into the policy file, and
//! every decision goes to the audit log.

pub mod approvers;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use globset::{Glob, GlobSet, GlobSetBuilder};
use serde::Serialize;
use serde_json::json;

use crate::policy::Policy;
use crate::vocabulary::{CallContext, ErrorCode, ToolApprovals, ToolError};
use approvers::{Answer, ApprovalRequest, Approver, CommandApprover, TerminalApprover};
use paddock_approval::rules::{Catalogue, Finding, PolicyRule, Severity};
pub use paddock_approval::{ApprovalMode, Decision};

/// What the policy decides for a command before anyone is asked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    pub decision: Decision,
    pub reason: String,
    pub rule: Option<String>,
    /// The rule pack the rule belongs to (`core`, `cloud`, ..., `policy` for the policy's
    /// own rules).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pack: Option<String>,
}

/// A human's answer about a host ([`ApprovalGate::check_host`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostDecision {
    Once,
    /// For the rest of the session.
    Session,
    /// From now on (kept in the state directory).
    Always,
    Deny,
}

impl HostDecision {
    pub fn allows(self) -> bool {
        self != HostDecision::Deny
    }

    /// The proxy need not ask again in this session.
    pub fn remembered(self) -> bool {
        matches!(self, HostDecision::Session | HostDecision::Always)
    }
}

/// The approval machinery of one engine.
pub struct ApprovalGate {
    /// Built (regexes compiled, examples checked) on first use: most of an engine's start-up
    /// cost, which calls that never run a command should not pay.
    catalogue: std::sync::OnceLock<Result<Catalogue, String>>,
    packs: Option<Vec<String>>,
    extra_rules: Vec<PolicyRule>,
    mode: ApprovalMode,
    allowlist: GlobSet,
    deny: GlobSet,
    approver: Option<Arc<dyn Approver>>,
    /// The policy named its approver: it is asked even when the call came with its own (an
    /// MCP client's elicitation), because the operator chose it.
    approver_named: bool,
    timeout: Duration,
    state: PathBuf,
    /// The policy file "always" answers are written into (none: the built-in policy).
    policy_file: Option<PathBuf>,
}

impl ApprovalGate {
    /// From the policy's `[approval]` section; the approver is the policy's program, else the
    /// terminal when a person sits at one, else none.
    pub fn from_policy(policy: &Policy, state_root: PathBuf) -> Result<Self, String> {
        let a = &policy.approval;
        let extra: Vec<PolicyRule> = a
            .rules
            .iter()
            .map(|r| PolicyRule {
                id: r.id.clone(),
                pattern: r.pattern.get_ref().clone(),
                severity: if r.severity.as_ref().map(|s| s.get_ref().as_str()) == Some("hardline") {
                    Severity::Hardline
                } else {
                    Severity::Dangerous
                },
                description: r.description.clone().unwrap_or_else(|| r.id.clone()),
                examples: r.examples.clone(),
                counter_examples: r.counter_examples.clone(),
            })
            .collect();
        let approver_named = a
            .approver
            .as_ref()
            .is_some_and(|s| s.get_ref().as_str() != "mcp");
        let approver: Option<Arc<dyn Approver>> =
            match a.approver.as_ref().map(|s| s.get_ref().as_str()) {
                // The agent's MCP client (`paddock serve`); elsewhere nobody.
                Some("none") | Some("mcp") => None,
                Some("terminal") => Some(Arc::new(TerminalApprover)),
                Some(program) => Some(Arc::new(CommandApprover {
                    program: program.to_owned(),
                    args: a.approver_args.clone(),
                })),
                None if TerminalApprover::available() => Some(Arc::new(TerminalApprover)),
                None => None,
            };
        Ok(Self {
            catalogue: std::sync::OnceLock::new(),
            packs: a
                .packs
                .as_ref()
                .map(|p| p.iter().map(|s| s.get_ref().clone()).collect()),
            extra_rules: extra,
            mode: a.mode.get_ref().parse()?,
            allowlist: globs(a.allowlist.iter().map(|s| s.get_ref().as_str())),
            deny: globs(a.deny.iter().map(|s| s.get_ref().as_str())),
            approver,
            approver_named,
            timeout: Duration::from_secs_f64(*a.timeout_seconds.get_ref()),
            state: state_root.join("approvals"),
            policy_file: policy.source.clone(),
        })
    }

    /// The policy's decision for `command` in `session` (no human involved), its working
    /// directory unknown.
    pub fn explain(&self, command: &str, session: &str) -> Explanation {
        self.explain_in(command, session, None)
    }

    /// Same, for a command run in `cwd` (an absolute path of the machine it runs on): relative
    /// paths and `..` are then judged where they land.
    pub fn explain_in(&self, command: &str, session: &str, cwd: Option<&str>) -> Explanation {
        if self.deny.is_match(command) {
            return Explanation {
                decision: Decision::Deny,
                reason: "the command matches [approval] deny".into(),
                rule: Some("policy:deny".into()),
                pack: None,
            };
        }
        let cwd = cwd.filter(|c| c.starts_with('/')).map(home_relative);
        let findings = match self.catalogue() {
            Ok(catalogue) => catalogue.findings(command, cwd.as_deref()),
            Err(err) => {
                // Fail closed: without rules nothing can be judged safe.
                return Explanation {
                    decision: Decision::Deny,
                    reason: format!("the approval rules failed to load: {err}"),
                    rule: None,
                    pack: None,
                };
            }
        };
        let Some(first) = findings.first() else {
            return Explanation {
                decision: Decision::Allow,
                reason: "no rule matches".into(),
                rule: None,
                pack: None,
            };
        };
        let pack = Some(first.pack.clone());
        if first.severity == Severity::Hardline {
            return Explanation {
                decision: Decision::Deny,
                reason: format!("{} (hardline: never approvable)", first.description),
                rule: Some(first.rule.clone()),
                pack: pack.clone(),
            };
        }
        match self.mode {
            ApprovalMode::Allow => Explanation {
                decision: Decision::Allow,
                reason: format!("{} ([approval] mode = allow)", first.description),
                rule: Some(first.rule.clone()),
                pack: pack.clone(),
            },
            ApprovalMode::Deny => Explanation {
                decision: Decision::Deny,
                reason: format!("{} ([approval] mode = deny)", first.description),
                rule: Some(first.rule.clone()),
                pack: pack.clone(),
            },
            ApprovalMode::Ask => {
                if self.allowlist.is_match(command) || self.remembered(session, command, &findings)
                {
                    return Explanation {
                        decision: Decision::Allow,
                        reason: format!("{} (approved earlier)", first.description),
                        rule: Some(first.rule.clone()),
                        pack: pack.clone(),
                    };
                }
                Explanation {
                    decision: Decision::Ask,
                    reason: first.description.clone(),
                    rule: Some(first.rule.clone()),
                    pack: pack.clone(),
                }
            }
        }
    }

    /// Lets `command` run, asking a human when the policy says so. The script's clock (if any)
    /// is paused while the human thinks.
    pub async fn check_command(
        &self,
        tool: &str,
        command: &str,
        cwd: Option<&str>,
        ctx: &CallContext,
    ) -> Result<(), ToolError> {
        let explanation = self.explain_in(command, &ctx.session, cwd);
        match explanation.decision {
            Decision::Allow => Ok(()),
            Decision::Deny => {
                self.audit(
                    tool,
                    command,
                    &explanation,
                    "policy",
                    "deny",
                    Duration::ZERO,
                    &ctx.session,
                );
                Err(ToolError::denied(
                    ErrorCode::ApprovalDenied,
                    format!("denied: {}; the command was not run", explanation.reason),
                ))
            }
            Decision::Ask => {
                let request = ApprovalRequest {
                    kind: "command_approval",
                    tool: tool.to_owned(),
                    subject: command.to_owned(),
                    rule: explanation.rule.clone(),
                    description: explanation.reason.clone(),
                    session: ctx.session.clone(),
                    timeout_seconds: self.timeout.as_secs_f64(),
                };
                let answer = self.ask(&request, ctx).await;
                self.finish(answer, &request, &explanation, command, ctx)
            }
        }
    }

    /// A tool in `[tools] require_approval`: every call asks.
    pub async fn check_tool(
        &self,
        tool: &str,
        args: &serde_json::Value,
        ctx: &CallContext,
    ) -> Result<(), ToolError> {
        let subject = format!("{tool} {args}");
        let explanation = Explanation {
            decision: Decision::Ask,
            reason: format!("tool '{tool}' needs approval ([tools] require_approval)"),
            rule: Some("policy:require_approval".into()),
            pack: None,
        };
        let request = ApprovalRequest {
            kind: "tool_approval",
            tool: tool.to_owned(),
            subject: subject.clone(),
            rule: explanation.rule.clone(),
            description: explanation.reason.clone(),
            session: ctx.session.clone(),
            timeout_seconds: self.timeout.as_secs_f64(),
        };
        let answer = self.ask(&request, ctx).await;
        self.finish(answer, &request, &explanation, &subject, ctx)
    }

    /// A host in neither `[network]` list, reached by a proxied environment of `session`
    /// (`unknown = "ask"`): asked through the same chain as a command, the script's clock paused,
    /// audited; no when nobody can answer.
    pub async fn check_host(
        &self,
        host: &str,
        port: u16,
        backend: &str,
        ctx: &CallContext,
    ) -> HostDecision {
        let subject = format!("{host}:{port}");
        let explanation = Explanation {
            decision: Decision::Ask,
            reason: format!(
                "{host}:{port} (from backend {backend}) is in neither [network] allow nor deny"
            ),
            rule: Some("network.unknown".into()),
            pack: None,
        };
        let request = ApprovalRequest {
            kind: "host_approval",
            tool: "network".to_owned(),
            subject: subject.clone(),
            rule: explanation.rule.clone(),
            description: explanation.reason.clone(),
            session: ctx.session.clone(),
            timeout_seconds: self.timeout.as_secs_f64(),
        };
        let (answer, who, waited) = self.ask(&request, ctx).await;
        let (decision, word) = match &answer {
            Ok(Answer::Once) => (HostDecision::Once, "once"),
            Ok(Answer::Session) => (HostDecision::Session, "session"),
            Ok(Answer::Always) => (HostDecision::Always, "always"),
            Ok(Answer::Deny) | Err(_) => (HostDecision::Deny, "deny"),
        };
        self.audit(
            "network",
            &subject,
            &explanation,
            &who,
            word,
            waited,
            &ctx.session,
        );
        decision
    }

    async fn ask(
        &self,
        request: &ApprovalRequest,
        ctx: &CallContext,
    ) -> (Result<Answer, String>, String, Duration) {
        let approver = if self.approver_named {
            self.approver.as_ref()
        } else {
            ctx.approver.as_ref().or(self.approver.as_ref())
        };
        let Some(approver) = approver else {
            return (
                Err(
                    "nobody is available to approve it (no approver configured and no terminal)"
                        .into(),
                ),
                "none".into(),
                Duration::ZERO,
            );
        };
        // The human's thinking time is not the script's.
        let _paused = ctx.deadline.as_ref().map(|d| d.pause());
        let started = Instant::now();
        let answer = match tokio::time::timeout(self.timeout, approver.ask(request)).await {
            Ok(answer) => answer,
            Err(_) => Err(format!("no answer within {} s", self.timeout.as_secs_f64())),
        };
        (answer, approver.name(), started.elapsed())
    }

    fn finish(
        &self,
        (answer, who, waited): (Result<Answer, String>, String, Duration),
        request: &ApprovalRequest,
        explanation: &Explanation,
        subject: &str,
        ctx: &CallContext,
    ) -> Result<(), ToolError> {
        let (allowed, word, why) = match &answer {
            Ok(Answer::Deny) => (false, "deny", format!("{who} denied it")),
            Ok(Answer::Once) => (true, "once", String::new()),
            Ok(Answer::Session) => (true, "session", String::new()),
            Ok(Answer::Always) => (true, "always", String::new()),
            Err(e) => (false, "deny", e.clone()),
        };
        self.audit(
            &request.tool,
            subject,
            explanation,
            &who,
            word,
            waited,
            &ctx.session,
        );
        if matches!(answer, Ok(Answer::Session | Answer::Always)) {
            self.remember(
                &ctx.session,
                explanation.rule.as_deref(),
                subject,
                matches!(answer, Ok(Answer::Always)),
            );
        }
        if allowed {
            Ok(())
        } else {
            Err(ToolError::denied(
                ErrorCode::ApprovalDenied,
                format!(
                    "{} needs approval ({}) and was denied: {why}; it was not run",
                    request.tool, explanation.reason
                ),
            ))
        }
    }

    fn session_file(&self, session: &str) -> PathBuf {
        self.state.join("sessions").join(format!("{session}.json"))
    }

    fn remembered(&self, session: &str, command: &str, findings: &[Finding]) -> bool {
        let read = |path: PathBuf| -> Vec<String> {
            std::fs::read(path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default()
        };
        let session_rules = read(self.session_file(session));
        let always = read(self.state.join("always.json"));
        findings.iter().all(|f| session_rules.contains(&f.rule))
            || always.iter().any(|c| c == command)
    }

    fn remember(&self, session: &str, rule: Option<&str>, command: &str, always: bool) {
        let update = |path: PathBuf, item: &str| {
            let mut items: Vec<String> = std::fs::read(&path)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            if !items.iter().any(|i| i == item) {
                items.push(item.to_owned());
            }
            if let Some(dir) = path.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            let _ = paddock_backends::processes::write_json_atomic(&path, &items);
        };
        if let Some(rule) = rule {
            update(self.session_file(session), rule);
        }
        if always {
            let written = self
                .policy_file
                .as_deref()
                .map(|file| add_to_allowlist(file, command));
            match written {
                Some(Ok(())) => {}
                Some(Err(err)) => {
                    tracing::warn!(%err, "could not write the approval into the policy; kept in the state directory");
                    update(self.state.join("always.json"), command);
                }
                // The built-in policy has no file: the state directory keeps it.
                None => update(self.state.join("always.json"), command),
            }
        }
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "one audit record, written in one place"
    )]
    fn audit(
        &self,
        tool: &str,
        subject: &str,
        explanation: &Explanation,
        who: &str,
        answer: &str,
        waited: Duration,
        session: &str,
    ) {
        let record = json!({
            "at_ms": paddock_backends::processes::now_ms(),
            "session": session,
            "tool": tool,
            "request": paddock_backends::redact::redact(subject, &[]),
            "rule": explanation.rule,
            "reason": explanation.reason,
            "answered_by": who,
            "answer": answer,
            "waited_ms": waited.as_millis() as u64,
        });
        let _ = std::fs::create_dir_all(&self.state);
        if let Ok(mut file) = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.state.join("audit.jsonl"))
        {
            use std::io::Write;
            let _ = writeln!(file, "{record}");
        }
    }

    /// The rule catalogue, loaded (and its examples checked) on first use.
    pub fn catalogue(&self) -> Result<&Catalogue, String> {
        self.catalogue
            .get_or_init(|| Catalogue::load(self.packs.as_deref(), &self.extra_rules))
            .as_ref()
            .map_err(Clone::clone)
    }
}

/// `cwd` with the user's home spelled as the analyser spells it (`/home/~`), so that `..`
/// out of a project in the home lands in the home.
fn home_relative(cwd: &str) -> String {
    let home = std::env::var("HOME").unwrap_or_default();
    let home = home.trim_end_matches('/');
    if !home.is_empty() && home != "/" {
        if cwd == home {
            return paddock_approval::paths::HOME.to_owned();
        }
        if let Some(rest) = cwd.strip_prefix(&format!("{home}/")) {
            return format!("{}/{rest}", paddock_approval::paths::HOME);
        }
    }
    cwd.to_owned()
}

/// Adds `command` (as a literal glob) to `[approval] allowlist` of the policy file, keeping the
/// operator's comments and formatting, and replaces the file atomically.
pub fn add_to_allowlist(file: &std::path::Path, command: &str) -> Result<(), String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e| format!("{}: {e}", file.display()))?;
    let approval = doc
        .entry("approval")
        .or_insert_with(|| toml_edit::Item::Table(toml_edit::Table::new()))
        .as_table_mut()
        .ok_or_else(|| "[approval] is not a table".to_owned())?;
    let list = approval
        .entry("allowlist")
        .or_insert_with(|| toml_edit::value(toml_edit::Array::new()))
        .as_array_mut()
        .ok_or_else(|| "approval.allowlist is not an array".to_owned())?;
    let literal = globset::escape(command);
    if !list.iter().any(|v| v.as_str() == Some(literal.as_str())) {
        list.push(literal);
    }
    let tmp = file.with_extension(format!("toml.tmp.{}", std::process::id()));
    std::fs::write(&tmp, doc.to_string()).map_err(|e| format!("{}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, file).map_err(|e| format!("{}: {e}", file.display()))
}

fn globs<'a>(patterns: impl Iterator<Item = &'a str>) -> GlobSet {
    let mut builder = GlobSetBuilder::new();
    for p in patterns {
        if let Ok(g) = Glob::new(p) {
            builder.add(g);
        }
    }
    builder.build().unwrap_or_else(|_| GlobSet::empty())
}

impl ToolApprovals for ApprovalGate {
    fn check_tool<'a>(
        &'a self,
        tool: &'a str,
        args: &'a serde_json::Value,
        ctx: &'a CallContext,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<(), ToolError>> + Send + 'a>>
    {
        Box::pin(ApprovalGate::check_tool(self, tool, args, ctx))
    }
}

#[cfg(test)]
#[path = "hardline_tests.rs"]
mod hardline_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn corpus(name: &str) -> String {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/corpus")
            .join(name);
        std::fs::read_to_string(path).unwrap()
    }

    fn gate() -> ApprovalGate {
        let mut policy = Policy::builtin();
        policy.approval.approver = Some(toml::Spanned::new(0..0, "none".into()));
        ApprovalGate::from_policy(&policy, std::env::temp_dir().join("paddock-approval-test"))
            .unwrap()
    }

    #[test]
    fn the_policy_accepts_exactly_the_packs_there_are() {
        let mut ours = paddock_approval::packs::names();
        let mut policy = crate::policy::RULE_PACKS.to_vec();
        ours.sort_unstable();
        policy.sort_unstable();
        assert_eq!(ours, policy);
    }

    #[test]
    fn always_goes_into_the_policy_file_keeping_comments() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("p.toml");
        std::fs::write(&file, "# operator's note\n[approval]\nmode = \"ask\"  # keep asking\nallowlist = [\"ls *\"]\n").unwrap();
        add_to_allowlist(&file, "git push --force origin main").unwrap();
        add_to_allowlist(&file, "git push --force origin main").unwrap();
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            text.contains("# operator's note") && text.contains("# keep asking"),
            "{text}"
        );
        let policy = Policy::load(&file).unwrap();
        let list: Vec<&str> = policy
            .approval
            .allowlist
            .iter()
            .map(|s| s.get_ref().as_str())
            .collect();
        assert_eq!(list, vec!["ls *", "git push --force origin main"]);
        let gate = ApprovalGate::from_policy(&policy, dir.path().to_path_buf()).unwrap();
        assert_eq!(
            gate.explain("git push --force origin main", "s").decision,
            Decision::Allow
        );
        assert_eq!(
            gate.explain("git push --force origin other", "s").decision,
            Decision::Ask
        );
    }

    #[test]
    fn the_dangerous_corpus_is_caught_and_no_hardline_case_is_missed() {
        let gate = gate();
        let tally = paddock_approval::corpus::measure(
            |c| {
                let e = gate.explain(c, "corpus");
                (e.decision, e.rule)
            },
            &corpus("dangerous.txt"),
        );
        assert!(
            tally.hardline + tally.dangerous >= 250,
            "{}",
            tally.report()
        );
        assert!(
            tally.misses.is_empty(),
            "{}\n{}",
            tally.report(),
            tally.misses.join("\n")
        );
    }

    #[test]
    fn the_safe_corpus_raises_at_most_one_percent_false_alarms() {
        let gate = gate();
        let tally = paddock_approval::corpus::measure(
            |c| {
                let e = gate.explain(c, "corpus");
                (e.decision, e.rule)
            },
            &corpus("safe.txt"),
        );
        assert!(tally.harmless >= 170, "{}", tally.report());
        assert!(
            tally.harmless_flagged * 100 <= tally.harmless,
            "{}\n{}",
            tally.report(),
            tally.misses.join("\n")
        );
    }

    #[test]
    fn explain_names_the_pack_and_rule() {
        let e = gate().explain("aws s3 rb s3://b --force", "s");
        assert_eq!(e.decision, Decision::Ask);
        assert_eq!(e.pack.as_deref(), Some("cloud"));
        assert_eq!(e.rule.as_deref(), Some("aws-delete"));
        let e = gate().explain("rm -rf /", "s");
        assert_eq!(
            (e.decision, e.pack.as_deref()),
            (Decision::Deny, Some("core"))
        );
    }
}
