//! Measuring the rules on command corpora: files of `LABEL<TAB>COMMAND` lines, where `H` is a
//! command that must be denied, `D` one that must not be allowed, and `S` a harmless one that
//! must be allowed. `\n` in a command is a newline, `\e` an escape, `\\` a backslash; lines
//! starting with `#` are comments. Used by `paddock policy corpus` and the tests.

use crate::decision::Decision;

/// Counts of one corpus.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub hardline: usize,
    pub hardline_denied: usize,
    /// Hardline commands that were allowed outright (neither denied nor asked).
    pub hardline_allowed: usize,
    pub dangerous: usize,
    pub dangerous_caught: usize,
    pub harmless: usize,
    pub harmless_flagged: usize,
    pub misses: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, other: &Tally) {
        self.hardline += other.hardline;
        self.hardline_denied += other.hardline_denied;
        self.hardline_allowed += other.hardline_allowed;
        self.dangerous += other.dangerous;
        self.dangerous_caught += other.dangerous_caught;
        self.harmless += other.harmless;
        self.harmless_flagged += other.harmless_flagged;
    }

    /// One line: caught / flagged with percentages.
    pub fn report(&self) -> String {
        let pct = |a: usize, b: usize| {
            if b == 0 {
                0.0
            } else {
                100.0 * a as f64 / b as f64
            }
        };
        let flagged_or_caught = self.dangerous_caught + self.hardline - self.hardline_allowed;
        let all_dangerous = self.dangerous + self.hardline;
        format!(
            "dangerous caught {}/{} ({:.1}%); always-deny denied {}/{}, allowed {}; harmless flagged {}/{} ({:.1}%)",
            flagged_or_caught,
            all_dangerous,
            pct(flagged_or_caught, all_dangerous),
            self.hardline_denied,
            self.hardline,
            self.hardline_allowed,
            self.harmless_flagged,
            self.harmless,
            pct(self.harmless_flagged, self.harmless),
        )
    }
}

pub fn unescape(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('e') => out.push('\u{1b}'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('x') => {
                    let hex: String = chars.by_ref().take(2).collect();
                    match u8::from_str_radix(&hex, 16) {
                        Ok(b) => out.push(char::from(b)),
                        Err(_) => {
                            out.push_str("\\x");
                            out.push_str(&hex);
                        }
                    }
                }
                Some('\\') => out.push('\\'),
                Some(other) => {
                    out.push('\\');
                    out.push(other);
                }
                None => out.push('\\'),
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Judges every command of `text` with `gate` (working directory unknown).
/// Counts one corpus; `judge` answers the policy's decision for a command and the rule that
/// decided it.
pub fn measure(judge: impl Fn(&str) -> (Decision, Option<String>), text: &str) -> Tally {
    let mut t = Tally::default();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        let Some((label, command)) = line.split_once('\t') else {
            continue;
        };
        let command = unescape(command);
        let (decision, rule) = judge(&command);
        let miss = match label.trim() {
            "H" => {
                t.hardline += 1;
                if decision == Decision::Deny {
                    t.hardline_denied += 1;
                } else if decision == Decision::Allow {
                    t.hardline_allowed += 1;
                }
                decision != Decision::Deny
            }
            "D" => {
                t.dangerous += 1;
                let caught = decision != Decision::Allow;
                if caught {
                    t.dangerous_caught += 1;
                }
                !caught
            }
            "S" => {
                t.harmless += 1;
                let flagged = decision != Decision::Allow;
                if flagged {
                    t.harmless_flagged += 1;
                }
                flagged
            }
            _ => false,
        };
        if miss {
            t.misses.push(format!(
                "{label} {command:?} -> {} ({})",
                decision,
                rule.as_deref().unwrap_or("no rule")
            ));
        }
    }
    t
}
