//! The loaded catalogue: the rule packs a policy picks plus its own rules, matched against
//! the commands a line really runs ([`crate::shell`]).
//!
//! Regular expressions are compiled on first use, one rule at a time, and only for rules
//! whose program appears: judging `git status` compiles git's rules, nothing else. The
//! examples of the built-in packs are checked by this crate's tests (the same binary gives
//! the same answers every time, so checking them again at each start would only cost time);
//! a policy's own rules are checked against their examples when the policy loads.

use std::collections::HashMap;
use std::sync::OnceLock;

use regex::Regex;

use crate::packs::{self, RuleSpec, Test};
use crate::shell::{self, Invocation};

pub use crate::packs::Severity;

/// A rule from a policy file (`[[approval.rules]]`).
#[derive(Debug, Clone)]
pub struct PolicyRule {
    pub id: String,
    /// Over one simple command: `program arg1 arg2 ...` (case-insensitive).
    pub pattern: String,
    pub severity: Severity,
    pub description: String,
    pub examples: Vec<String>,
    pub counter_examples: Vec<String>,
}

enum Matcher {
    Builtin(&'static RuleSpec),
    Policy(Regex),
}

/// One rule of the catalogue.
pub struct Rule {
    pub pack: &'static str,
    pub id: String,
    pub description: String,
    pub severity: Severity,
    matcher: Matcher,
    /// The compiled `args` and `unless` of a built-in command rule.
    compiled: OnceLock<Option<(Regex, Option<Regex>)>>,
}

impl Rule {
    pub fn examples(&self) -> (Vec<String>, Vec<String>) {
        match &self.matcher {
            Matcher::Builtin(spec) => (
                spec.yes.iter().map(|s| (*s).to_owned()).collect(),
                spec.no.iter().map(|s| (*s).to_owned()).collect(),
            ),
            Matcher::Policy(_) => (Vec::new(), Vec::new()),
        }
    }

    fn command_regexes(&self, args: &str, unless: &str) -> Option<&(Regex, Option<Regex>)> {
        self.compiled
            .get_or_init(|| {
                let args = Regex::new(&format!("(?i){args}")).ok()?;
                let unless = if unless.is_empty() {
                    None
                } else {
                    Some(Regex::new(&format!("(?i){unless}")).ok()?)
                };
                Some((args, unless))
            })
            .as_ref()
    }
}

/// A command matched by a rule.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Finding {
    pub pack: String,
    pub rule: String,
    pub description: String,
    pub severity: Severity,
}

/// The loaded rules, indexed by the programs they look at.
pub struct Catalogue {
    rules: Vec<Rule>,
    by_program: HashMap<&'static str, Vec<usize>>,
    /// Rules for program prefixes (`mkfs*`), any program (`*`), whole pipelines and lines.
    general: Vec<usize>,
}

fn program_matches(pattern: &str, program: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some("") => true,
        Some(prefix) => program.starts_with(prefix),
        None => pattern == program,
    }
}

impl Catalogue {
    /// The rules of `packs` (every pack when `None`) plus the policy's own, each policy rule
    /// checked against its examples.
    pub fn load(
        packs_wanted: Option<&[String]>,
        policy_rules: &[PolicyRule],
    ) -> Result<Self, String> {
        let mut rules = Vec::new();
        for pack in packs::PACKS {
            if let Some(wanted) = packs_wanted
                && !wanted.iter().any(|w| w == pack.name)
            {
                continue;
            }
            for spec in pack.rules {
                rules.push(Rule {
                    pack: pack.name,
                    id: spec.id.to_owned(),
                    description: spec.description.to_owned(),
                    severity: spec.severity,
                    matcher: Matcher::Builtin(spec),
                    compiled: OnceLock::new(),
                });
            }
        }
        let first_policy_rule = rules.len();
        for r in policy_rules {
            let regex = Regex::new(&format!("(?i){}", r.pattern))
                .map_err(|e| format!("rule {}: bad pattern {:?}: {e}", r.id, r.pattern))?;
            rules.push(Rule {
                pack: "policy",
                id: r.id.clone(),
                description: r.description.clone(),
                severity: r.severity,
                matcher: Matcher::Policy(regex),
                compiled: OnceLock::new(),
            });
        }
        let mut by_program: HashMap<&'static str, Vec<usize>> = HashMap::new();
        let mut general = Vec::new();
        for (i, rule) in rules.iter().enumerate() {
            match &rule.matcher {
                Matcher::Builtin(RuleSpec {
                    test: Test::Command { programs, .. },
                    ..
                }) if programs.iter().all(|p| !p.ends_with('*')) => {
                    for p in *programs {
                        by_program.entry(p).or_default().push(i);
                    }
                }
                _ => general.push(i),
            }
        }
        let catalogue = Self {
            rules,
            by_program,
            general,
        };
        for (rule, r) in catalogue.rules[first_policy_rule..]
            .iter()
            .zip(policy_rules)
        {
            catalogue.check_rule_examples(&rule.id, &r.examples, &r.counter_examples)?;
        }
        Ok(catalogue)
    }

    /// A rule must flag each of `yes` and none of `no`.
    pub fn check_rule_examples(
        &self,
        id: &str,
        yes: &[String],
        no: &[String],
    ) -> Result<(), String> {
        for example in yes {
            if !self.findings(example, None).iter().any(|f| f.rule == id) {
                return Err(format!(
                    "rule {id} does not match its own example {example:?}"
                ));
            }
        }
        for example in no {
            if self.findings(example, None).iter().any(|f| f.rule == id) {
                return Err(format!("rule {id} matches its counter-example {example:?}"));
            }
        }
        Ok(())
    }

    /// Every rule's examples (built-in ones included).
    pub fn check_examples(&self) -> Result<(), String> {
        for rule in &self.rules {
            let (yes, no) = rule.examples();
            self.check_rule_examples(&rule.id, &yes, &no)?;
        }
        Ok(())
    }

    pub fn rules(&self) -> &[Rule] {
        &self.rules
    }

    /// Every rule the command matches when run in `cwd` (absolute; home as `/home/~`),
    /// hardline ones first.
    pub fn findings(&self, command: &str, cwd: Option<&str>) -> Vec<Finding> {
        let analysis = shell::analyse(command, cwd);
        let mut hits: Vec<usize> = Vec::new();
        let mut hit = |i: usize| {
            if !hits.contains(&i) {
                hits.push(i);
            }
        };
        for pipeline in &analysis.pipelines {
            for inv in pipeline {
                if let Some(candidates) = self.by_program.get(inv.program.as_str()) {
                    for &i in candidates {
                        if self.command_rule_matches(&self.rules[i], inv) {
                            hit(i);
                        }
                    }
                }
            }
            for &i in &self.general {
                if self.general_rule_matches(&self.rules[i], pipeline) {
                    hit(i);
                }
            }
        }
        // Shapes that only the whole line shows.
        let unmasked = crate::normalize::unmask(command);
        let lowered = unmasked.to_lowercase();
        for &i in &self.general {
            let matched = match &self.rules[i].matcher {
                Matcher::Builtin(RuleSpec {
                    test: Test::Text { pattern, hints },
                    ..
                }) => {
                    hints.iter().any(|h| lowered.contains(h))
                        && self.rules[i]
                            .command_regexes(pattern, "")
                            .is_some_and(|(r, _)| r.is_match(&unmasked))
                }
                Matcher::Builtin(RuleSpec {
                    test: Test::ForkBomb,
                    ..
                }) => is_fork_bomb(&unmasked),
                _ => false,
            };
            if matched {
                hit(i);
            }
        }
        let mut found: Vec<Finding> = hits
            .into_iter()
            .map(|i| {
                let r = &self.rules[i];
                Finding {
                    pack: r.pack.to_owned(),
                    rule: r.id.clone(),
                    description: r.description.clone(),
                    severity: r.severity,
                }
            })
            .collect();
        found.sort_by_key(|f| f.severity != Severity::Hardline);
        found
    }

    fn command_rule_matches(&self, rule: &Rule, inv: &Invocation) -> bool {
        let Matcher::Builtin(RuleSpec {
            test:
                Test::Command {
                    programs,
                    args,
                    unless,
                },
            ..
        }) = &rule.matcher
        else {
            return false;
        };
        if !programs.iter().any(|p| program_matches(p, &inv.program)) {
            return false;
        }
        let Some((args_re, unless_re)) = rule.command_regexes(args, unless) else {
            return false;
        };
        let text = match &inv.stdin {
            Some(stdin) => format!("{} {}", inv.arg_text(), stdin.trim()),
            None => inv.arg_text(),
        };
        args_re.is_match(&text) && !unless_re.as_ref().is_some_and(|u| u.is_match(&text))
    }

    fn general_rule_matches(&self, rule: &Rule, pipeline: &[Invocation]) -> bool {
        match &rule.matcher {
            Matcher::Builtin(spec) => match &spec.test {
                Test::Command { .. } => pipeline
                    .iter()
                    .any(|inv| self.command_rule_matches(rule, inv)),
                Test::Check(f) => pipeline.iter().any(f),
                Test::Pipeline(f) => f(pipeline),
                Test::Text { .. } | Test::ForkBomb => false,
            },
            Matcher::Policy(regex) => pipeline.iter().any(|inv| regex.is_match(&inv.line())),
        }
    }
}

/// A function that pipes itself into itself in the background: `:(){ :|:& };:`.
fn is_fork_bomb(text: &str) -> bool {
    // No function definition, no fork bomb: most lines stop here, before any regex is built.
    if !text.contains('(') || !text.contains('{') || !text.contains('&') {
        return false;
    }
    let Ok(definition) = Regex::new(r"([A-Za-z_:.][\w:.]*)\s*\(\s*\)\s*\{") else {
        return false;
    };
    definition.captures_iter(text).any(|c| {
        let name = regex::escape(c.get(1).map_or("", |m| m.as_str()));
        Regex::new(&format!(r"{name}\s*\|\s*{name}\s*&")).is_ok_and(|b| b.is_match(text))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_pack_passes_its_own_examples() {
        let catalogue = Catalogue::load(None, &[]).unwrap();
        let mut failures = Vec::new();
        for rule in catalogue.rules() {
            let (yes, no) = rule.examples();
            for y in &yes {
                if !catalogue
                    .findings(y, None)
                    .iter()
                    .any(|f| f.rule == rule.id)
                {
                    failures.push(format!("{}/{} misses {y:?}", rule.pack, rule.id));
                }
            }
            for n in &no {
                if catalogue
                    .findings(n, None)
                    .iter()
                    .any(|f| f.rule == rule.id)
                {
                    failures.push(format!("{}/{} flags {n:?}", rule.pack, rule.id));
                }
            }
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn every_rule_has_examples_both_ways_and_a_unique_id() {
        let catalogue = Catalogue::load(None, &[]).unwrap();
        let mut ids = std::collections::HashSet::new();
        for rule in catalogue.rules() {
            let (yes, no) = rule.examples();
            assert!(!yes.is_empty() && !no.is_empty(), "{}", rule.id);
            assert!(ids.insert(rule.id.clone()), "duplicate rule id {}", rule.id);
        }
    }

    #[test]
    fn packs_can_be_left_out() {
        let core_only = Catalogue::load(Some(&["core".to_owned()]), &[]).unwrap();
        assert!(
            core_only
                .findings("aws s3 rb s3://b --force", None)
                .is_empty()
        );
        assert!(
            !Catalogue::load(None, &[])
                .unwrap()
                .findings("aws s3 rb s3://b --force", None)
                .is_empty()
        );
        assert!(!core_only.findings("rm -rf /", None).is_empty());
    }

    #[test]
    fn a_policy_rule_is_checked_against_its_examples() {
        let rule = |yes: &str, no: &str| PolicyRule {
            id: "deploy".into(),
            pattern: r"^make deploy\b".into(),
            severity: Severity::Dangerous,
            description: "deploying".into(),
            examples: vec![yes.into()],
            counter_examples: vec![no.into()],
        };
        assert!(Catalogue::load(None, &[rule("make deploy", "make test")]).is_ok());
        let err = Catalogue::load(None, &[rule("make test", "make build")])
            .err()
            .unwrap();
        assert!(err.contains("does not match its own example"), "{err}");
    }

    #[test]
    fn the_working_directory_changes_the_verdict() {
        let c = Catalogue::load(None, &[]).unwrap();
        let hardline = |cmd: &str, cwd: Option<&str>| {
            c.findings(cmd, cwd)
                .first()
                .is_some_and(|f| f.severity == Severity::Hardline)
        };
        assert!(hardline("rm -rf ./../../../..", Some("/home/~/src")));
        assert!(!hardline("rm -rf ./../../../..", None));
        assert!(!c.findings("rm -rf ./../../../..", None).is_empty());
        assert!(
            c.findings("rm -r ./target", Some("/home/~/src/app"))
                .is_empty()
        );
    }
}
