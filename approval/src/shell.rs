//! Reading a command line the way bash will run it: a real parser (brush-parser, the parser
//! of the brush shell) turns it into pipelines of simple commands with their resolved program,
//! arguments with quotes removed, redirections and standard input. Text in quotes is an
//! argument, never a command; what really runs elsewhere is opened up and read with the same
//! rules: command and process substitution, here-documents fed to a shell, `bash -c`, `eval`,
//! wrappers such as `sudo`, `env`, `xargs` or `find -exec`, and code given to interpreters.
//!
//! The working directory and simple variables are followed through the line (`cd /usr && rm
//! -rf ./*` deletes `/usr/*`), so paths can be judged where they land ([`crate::paths`]).

use std::collections::HashMap;

use brush_parser::ast;
use brush_parser::word::{ParameterExpr, TildeExpr, WordPiece, WordPieceWithSource};

use crate::interpreters;
use crate::normalize;

/// Nesting (`bash -c` inside `$(...)` inside ...) followed before giving up on a branch.
const MAX_DEPTH: usize = 8;
/// Lines longer than this, or nested deeper than [`MAX_NESTING`], are read by the fallback
/// tokenizer: the parser recurses once per level.
const MAX_PARSE_LEN: usize = 64 * 1024;
const MAX_NESTING: usize = 48;

pub use crate::invocation::{Arg, Invocation, Write};

/// What a command line runs: its pipelines (each a list of simple commands, in order), and
/// the raw text of shell functions it defines.
#[derive(Debug, Default)]
pub struct Analysis {
    pub pipelines: Vec<Vec<Invocation>>,
    /// The parser could not read (part of) it; the fallback tokenizer did.
    pub fallback: bool,
}

impl Analysis {
    pub fn invocations(&self) -> impl Iterator<Item = &Invocation> {
        self.pipelines.iter().flatten()
    }
}

/// Analyses `command` run in `cwd` (absolute, home as `/home/~`; `None`: unknown). The
/// command is untrusted input: should the parser ever panic on it, the line is read by the
/// fallback tokenizer instead, never waved through.
pub fn analyse(command: &str, cwd: Option<&str>) -> Analysis {
    let unmasked = normalize::unmask(command);
    let parsed = std::panic::catch_unwind(|| {
        let mut walker = Walker::new(cwd);
        walker.line(&unmasked, 0);
        walker.analysis
    });
    parsed.unwrap_or_else(|_| {
        let mut walker = Walker::new(cwd);
        walker.fallback(&unmasked);
        walker.analysis
    })
}

struct Walker {
    analysis: Analysis,
    vars: HashMap<String, String>,
    cwd: Option<String>,
    /// Inside a loop body walked once per value: loops nested in it are walked once, with
    /// their variable unknown, so that nesting cannot multiply the work (4 values in 12
    /// nested loops would be 16 million walks).
    repeating: bool,
    /// Commands that may still be copied into the pipelines piping into them.
    copies_left: usize,
}

/// Copies of commands one line may make for its pipelines' context.
const MAX_COPIES: usize = 4096;

fn too_nested(text: &str) -> bool {
    let mut depth = 0usize;
    let mut max = 0usize;
    for c in text.chars() {
        match c {
            '(' | '{' | '[' => {
                depth += 1;
                max = max.max(depth);
            }
            ')' | '}' | ']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max > MAX_NESTING
}

impl Walker {
    fn new(cwd: Option<&str>) -> Self {
        Self {
            analysis: Analysis::default(),
            vars: HashMap::new(),
            cwd: cwd.map(str::to_owned),
            repeating: false,
            copies_left: MAX_COPIES,
        }
    }

    /// A whole command line (or the code of `bash -c`, a here-document fed to a shell, ...).
    fn line(&mut self, text: &str, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        if text.len() > MAX_PARSE_LEN || too_nested(text) {
            self.fallback(text);
            return;
        }
        let options = brush_parser::ParserOptions::default();
        // Bash runs nothing of a line whose quote is never closed; read as if it were closed,
        // its text is an argument (data), not commands.
        let mut text = text.to_owned();
        let mut tokens = brush_parser::tokenize_str(&text);
        for _ in 0..2 {
            let close = match &tokens {
                Err(brush_parser::TokenizerError::UnterminatedSingleQuote(_)) => "'",
                Err(brush_parser::TokenizerError::UnterminatedDoubleQuote(_)) => "\"",
                Err(brush_parser::TokenizerError::UnterminatedBackquote(_)) => "`",
                _ => break,
            };
            text.push_str(close);
            tokens = brush_parser::tokenize_str(&text);
        }
        let text = text.as_str();
        let parsed = tokens.map_err(|e| e.to_string()).and_then(|tokens| {
            brush_parser::parse_tokens(&tokens, &options).map_err(|e| e.to_string())
        });
        match parsed {
            Ok(program) => {
                for list in &program.complete_commands {
                    self.list(list, depth);
                }
            }
            Err(_) => self.fallback(text),
        }
    }

    /// What the parser cannot read (an unterminated quote, syntax brush does not know) is
    /// split the old way: quotes dropped, words on spaces. Judging it is better than not.
    fn fallback(&mut self, text: &str) {
        self.analysis.fallback = true;
        let flat = normalize::flatten(text);
        // Without structure, anything on the line may be what a command reads.
        let whole = Some(flat.clone());
        for pipeline in normalize::pipelines(&flat) {
            let mut out = Vec::new();
            for simple in pipeline {
                let mut words = simple.split_whitespace().map(Arg::literal);
                let Some(program) = words.next() else {
                    continue;
                };
                let mut inv = self.invocation(&program.text, words.collect());
                inv.derived = false;
                inv.stdin = whole.clone();
                out.push(inv);
            }
            if !out.is_empty() {
                self.analysis.pipelines.push(out);
            }
        }
    }

    fn invocation(&self, program: &str, args: Vec<Arg>) -> Invocation {
        Invocation {
            program: base_name(program),
            args,
            writes: Vec::new(),
            reads: Vec::new(),
            stdin: None,
            cwd: self.cwd.clone(),
            derived: true,
        }
    }

    fn list(&mut self, list: &ast::CompoundList, depth: usize) {
        for ast::CompoundListItem(and_or, _) in &list.0 {
            self.pipeline(&and_or.first, depth);
            for next in &and_or.additional {
                match next {
                    ast::AndOr::And(p) | ast::AndOr::Or(p) => self.pipeline(p, depth),
                }
            }
        }
    }

    fn pipeline(&mut self, pipeline: &ast::Pipeline, depth: usize) {
        let mut out: Vec<Invocation> = Vec::new();
        for command in &pipeline.seq {
            match command {
                ast::Command::Simple(simple) => {
                    if let Some(inv) = self.simple(simple, depth) {
                        out.push(inv);
                    }
                }
                ast::Command::Compound(compound, redirects) => {
                    // Its commands are both pipelines of their own and, for what reads the
                    // pipe (`curl x | (cd /tmp; sh)`), part of this one.
                    let before = self.analysis.pipelines.len();
                    self.compound(compound, depth);
                    if pipeline.seq.len() > 1 {
                        let inner = self.copies_of(before);
                        out.extend(inner);
                    }
                    if let Some(redirects) = redirects {
                        let mut holder = self.invocation(":", Vec::new());
                        for r in &redirects.0 {
                            self.redirect(r, &mut holder, depth);
                        }
                        if !holder.writes.is_empty() {
                            out.push(holder);
                        }
                    }
                }
                ast::Command::Function(function) => {
                    let ast::FunctionBody(body, _) = &function.body;
                    self.compound(body, depth);
                }
                ast::Command::ExtendedTest(..) => {}
            }
        }
        // What `echo`/`printf` print, or a here-document `cat` passes on, is the next
        // command's standard input (`echo 'DROP TABLE x' | psql`).
        for i in 1..out.len() {
            if out[i].stdin.is_none() {
                let up = &out[i - 1];
                let fed = match up.program.as_str() {
                    "echo" | "printf" => Some(
                        up.operands()
                            .iter()
                            .map(|a| a.text.replace("\\n", "\n"))
                            .collect::<Vec<_>>()
                            .join(" "),
                    ),
                    "cat" if up.operands().is_empty() => up.stdin.clone(),
                    _ => None,
                };
                out[i].stdin = fed;
            }
        }
        // Wrappers, interpreters and pipes into shells open up into more commands.
        let mut expanded = Vec::new();
        for i in 0..out.len() {
            let upstream: Vec<Invocation> = out[..i].to_vec();
            expanded.push(out[i].clone());
            self.open_up(&out[i], &upstream, &mut expanded, depth);
        }
        if !expanded.is_empty() {
            self.analysis.pipelines.push(expanded);
        }
    }

    fn compound(&mut self, compound: &ast::CompoundCommand, depth: usize) {
        match compound {
            ast::CompoundCommand::BraceGroup(g) => self.list(&g.list, depth),
            ast::CompoundCommand::Subshell(s) => {
                let cwd = self.cwd.clone();
                self.list(&s.list, depth);
                self.cwd = cwd;
            }
            ast::CompoundCommand::ForClause(f) => {
                let values: Vec<Arg> = f
                    .values
                    .iter()
                    .flatten()
                    .map(|w| self.word(&w.value, depth))
                    .collect();
                // Each literal value in turn (a few), else the variable is unknown.
                let literal: Vec<&Arg> = values.iter().filter(|a| !a.dynamic).collect();
                let repeat = !self.repeating
                    && !literal.is_empty()
                    && literal.len() == values.len()
                    && values.len() <= 4;
                if repeat {
                    self.repeating = true;
                    for value in literal {
                        self.vars
                            .insert(f.variable_name.clone(), value.text.clone());
                        self.list(&f.body.list, depth);
                    }
                    self.repeating = false;
                } else {
                    self.vars.remove(&f.variable_name);
                    self.list(&f.body.list, depth);
                }
            }
            ast::CompoundCommand::CaseClause(c) => {
                for item in &c.cases {
                    if let Some(cmd) = &item.cmd {
                        self.list(cmd, depth);
                    }
                }
            }
            ast::CompoundCommand::IfClause(i) => {
                self.list(&i.condition, depth);
                self.list(&i.then, depth);
                for e in i.elses.iter().flatten() {
                    if let Some(c) = &e.condition {
                        self.list(c, depth);
                    }
                    self.list(&e.body, depth);
                }
            }
            ast::CompoundCommand::WhileClause(w) | ast::CompoundCommand::UntilClause(w) => {
                let ast::WhileOrUntilClauseCommand(condition, body, _) = w;
                self.list(condition, depth);
                self.list(&body.list, depth);
            }
            ast::CompoundCommand::ArithmeticForClause(a) => self.list(&a.body.list, depth),
            ast::CompoundCommand::Coprocess(c) => {
                let pipeline = ast::Pipeline {
                    timed: None,
                    bang: false,
                    seq: vec![(*c.body).clone()],
                };
                self.pipeline(&pipeline, depth);
            }
            ast::CompoundCommand::Arithmetic(_) => {}
        }
    }

    fn simple(&mut self, simple: &ast::SimpleCommand, depth: usize) -> Option<Invocation> {
        let mut holder = self.invocation(":", Vec::new());
        holder.derived = false;
        let mut assignments: Vec<(String, Arg)> = Vec::new();
        let mut words: Vec<Arg> = Vec::new();
        for item in simple.prefix.iter().flat_map(|p| p.0.iter()) {
            self.item(item, &mut holder, &mut assignments, &mut words, depth);
        }
        if let Some(name) = &simple.word_or_name {
            words.push(self.word(&name.value, depth));
        }
        for item in simple.suffix.iter().flat_map(|s| s.0.iter()) {
            self.item(item, &mut holder, &mut assignments, &mut words, depth);
        }
        if words.is_empty() {
            // `X=/usr` alone sets a shell variable for the rest of the line.
            for (name, value) in assignments {
                if value.dynamic {
                    self.vars.remove(&name);
                } else {
                    self.vars.insert(name, value.text);
                }
            }
            return (!holder.writes.is_empty()).then_some(holder);
        }
        let program = words.remove(0);
        let mut inv = holder;
        inv.program = base_name(&program.text);
        inv.args = words;
        self.track(&inv);
        Some(inv)
    }

    fn item(
        &mut self,
        item: &ast::CommandPrefixOrSuffixItem,
        holder: &mut Invocation,
        assignments: &mut Vec<(String, Arg)>,
        words: &mut Vec<Arg>,
        depth: usize,
    ) {
        match item {
            ast::CommandPrefixOrSuffixItem::Word(w) => words.push(self.word(&w.value, depth)),
            ast::CommandPrefixOrSuffixItem::IoRedirect(r) => self.redirect(r, holder, depth),
            ast::CommandPrefixOrSuffixItem::AssignmentWord(a, w) => {
                if words.is_empty() {
                    let name = match &a.name {
                        ast::AssignmentName::VariableName(n) => n.clone(),
                        ast::AssignmentName::ArrayElementName(n, _) => n.clone(),
                    };
                    let value = match &a.value {
                        ast::AssignmentValue::Scalar(v) => self.word(&v.value, depth),
                        ast::AssignmentValue::Array(items) => {
                            for (_, v) in items {
                                self.word(&v.value, depth);
                            }
                            Arg {
                                text: String::new(),
                                dynamic: true,
                                unknown_start: true,
                            }
                        }
                    };
                    assignments.push((name, value));
                } else {
                    // `export X=1`, `declare X=$(...)`: an argument.
                    words.push(self.word(&w.value, depth));
                }
            }
            ast::CommandPrefixOrSuffixItem::ProcessSubstitution(_, sub) => {
                let cwd = self.cwd.clone();
                self.list(&sub.list, depth + 1);
                self.cwd = cwd;
                words.push(Arg {
                    text: "/dev/fd/63".into(),
                    dynamic: true,
                    unknown_start: false,
                });
            }
        }
    }

    fn redirect(&mut self, r: &ast::IoRedirect, inv: &mut Invocation, depth: usize) {
        match r {
            ast::IoRedirect::File(_, kind, target) => match target {
                ast::IoFileRedirectTarget::Filename(w) => {
                    let arg = self.word(&w.value, depth);
                    match kind {
                        ast::IoFileRedirectKind::Write | ast::IoFileRedirectKind::Clobber => {
                            inv.writes.push(Write {
                                target: arg,
                                append: false,
                            })
                        }
                        ast::IoFileRedirectKind::Append | ast::IoFileRedirectKind::ReadAndWrite => {
                            inv.writes.push(Write {
                                target: arg,
                                append: true,
                            })
                        }
                        ast::IoFileRedirectKind::Read => inv.reads.push(arg),
                        _ => {}
                    }
                }
                ast::IoFileRedirectTarget::ProcessSubstitution(_, sub) => {
                    let cwd = self.cwd.clone();
                    self.list(&sub.list, depth + 1);
                    self.cwd = cwd;
                }
                // `>& FILE` is `&> FILE`.
                ast::IoFileRedirectTarget::Duplicate(w)
                    if matches!(kind, ast::IoFileRedirectKind::DuplicateOutput) =>
                {
                    let arg = self.word(&w.value, depth);
                    if !arg.text.chars().all(|c| c.is_ascii_digit() || c == '-') {
                        inv.writes.push(Write {
                            target: arg,
                            append: false,
                        });
                    }
                }
                ast::IoFileRedirectTarget::Fd(_) | ast::IoFileRedirectTarget::Duplicate(_) => {}
            },
            ast::IoRedirect::OutputAndError(w, append) => {
                let arg = self.word(&w.value, depth);
                inv.writes.push(Write {
                    target: arg,
                    append: *append,
                });
            }
            ast::IoRedirect::HereDocument(_, doc) => {
                if doc.requires_expansion {
                    // `$(...)` in an unquoted here-document runs.
                    if let Ok(pieces) = brush_parser::word::parse_heredoc(
                        &doc.doc.value,
                        &brush_parser::ParserOptions::default(),
                    ) {
                        self.substitutions(&pieces, depth);
                    }
                }
                inv.stdin = Some(doc.doc.value.clone());
            }
            ast::IoRedirect::HereString(_, w) => {
                let arg = self.word(&w.value, depth);
                inv.stdin = Some(arg.text);
            }
        }
    }

    fn substitutions(&mut self, pieces: &[WordPieceWithSource], depth: usize) {
        for p in pieces {
            match &p.piece {
                WordPiece::CommandSubstitution(code)
                | WordPiece::BackquotedCommandSubstitution(code) => {
                    let cwd = self.cwd.clone();
                    self.line(code, depth + 1);
                    self.cwd = cwd;
                }
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => self.substitutions(inner, depth),
                _ => {}
            }
        }
    }

    /// A word with quotes removed and what is known expanded; command substitutions inside
    /// it are analysed as commands of their own.
    fn word(&mut self, raw: &str, depth: usize) -> Arg {
        let options = brush_parser::ParserOptions::default();
        let Ok(pieces) = brush_parser::word::parse(raw, &options) else {
            let text: String = raw.chars().filter(|c| !matches!(c, '\'' | '"')).collect();
            return Arg {
                dynamic: text.contains('$') || text.contains('`'),
                unknown_start: text.starts_with('$') || text.starts_with('`'),
                text,
            };
        };
        self.substitutions(&pieces, depth);
        let mut arg = Arg::literal(String::new());
        self.pieces(&pieces, &mut arg);
        arg
    }

    fn pieces(&self, pieces: &[WordPieceWithSource], arg: &mut Arg) {
        for p in pieces {
            let at_start = arg.text.is_empty() && !arg.dynamic;
            match &p.piece {
                WordPiece::Text(t) | WordPiece::SingleQuotedText(t) => arg.text.push_str(t),
                WordPiece::AnsiCQuotedText(t) => arg.text.push_str(&ansi_c(t)),
                WordPiece::EscapeSequence(t) => arg.text.push_str(t.trim_start_matches('\\')),
                WordPiece::DoubleQuotedSequence(inner)
                | WordPiece::GettextDoubleQuotedSequence(inner) => self.pieces(inner, arg),
                WordPiece::TildeExpansion(t) => match t {
                    TildeExpr::Home => arg.text.push('~'),
                    TildeExpr::UserHome(user) => arg.text.push_str(&format!("/home/{user}")),
                    TildeExpr::WorkingDir => match &self.cwd {
                        Some(cwd) => arg.text.push_str(cwd),
                        None => {
                            arg.text.push('.');
                        }
                    },
                    _ => {
                        arg.text.push_str("$OLDPWD");
                        arg.dynamic = true;
                        arg.unknown_start |= at_start;
                    }
                },
                WordPiece::ParameterExpansion(expr) => {
                    let (name, guarded) = parameter_name(expr);
                    match name.as_deref().and_then(|n| self.known_var(n)) {
                        Some(value) => arg.text.push_str(&value),
                        None => {
                            arg.text
                                .push_str(&format!("${}", name.as_deref().unwrap_or("{...}")));
                            arg.dynamic = true;
                            arg.unknown_start |= at_start && !guarded;
                        }
                    }
                }
                WordPiece::CommandSubstitution(code)
                | WordPiece::BackquotedCommandSubstitution(code) => {
                    arg.text.push_str(&format!("$({code})"));
                    arg.dynamic = true;
                    arg.unknown_start |= at_start;
                }
                WordPiece::ArithmeticExpression(e) => {
                    arg.text.push_str(&format!("$(({}))", e.value));
                    arg.dynamic = true;
                }
            }
        }
    }

    fn known_var(&self, name: &str) -> Option<String> {
        if let Some(v) = self.vars.get(name) {
            return Some(v.clone());
        }
        match name {
            "HOME" => Some("~".into()),
            "PWD" => self.cwd.clone(),
            "TMPDIR" => Some("/tmp".into()),
            "USER" | "LOGNAME" => Some("user".into()),
            _ => None,
        }
    }

    /// Copies of the commands of the pipelines recorded since `before`, for the pipeline that
    /// pipes into them, within a budget: nested piped subshells would otherwise double the
    /// copies at every level.
    fn copies_of(&mut self, before: usize) -> Vec<Invocation> {
        let inner: Vec<Invocation> = self.analysis.pipelines[before..]
            .iter()
            .flatten()
            .cloned()
            .map(|mut i| {
                i.derived = true;
                i
            })
            .collect();
        if inner.len() > self.copies_left {
            return Vec::new();
        }
        self.copies_left -= inner.len();
        inner
    }

    /// `cd`, `pushd` and `export X=...` change what later commands of the line see.
    fn track(&mut self, inv: &Invocation) {
        match inv.program.as_str() {
            "cd" | "pushd" => {
                let target = inv.operands().first().map(|a| (*a).clone());
                self.cwd = match target {
                    None => Some(crate::paths::HOME.into()),
                    Some(a) if a.dynamic || a.text == "-" => None,
                    Some(a) => crate::paths::join(self.cwd.as_deref(), &a.text),
                };
            }
            "popd" => self.cwd = None,
            "export" | "declare" | "typeset" | "local" | "readonly" => {
                for a in &inv.args {
                    if let Some((name, value)) = a.text.split_once('=') {
                        if a.dynamic {
                            self.vars.remove(name);
                        } else {
                            self.vars.insert(name.to_owned(), value.to_owned());
                        }
                    }
                }
            }
            _ => {}
        }
    }

    /// Commands that run other commands: the inner command is added after `inv` (same
    /// place in the pipeline), and code for shells and interpreters is analysed.
    fn open_up(
        &mut self,
        inv: &Invocation,
        upstream: &[Invocation],
        out: &mut Vec<Invocation>,
        depth: usize,
    ) {
        if depth > MAX_DEPTH {
            return;
        }
        let program = inv.program.as_str();
        if let Some(inner) = unwrap(inv, upstream) {
            let mut inner = inner;
            inner.derived = true;
            out.push(inner.clone());
            self.open_up(&inner, upstream, out, depth + 1);
            return;
        }
        if program == "find" {
            for inner in find_actions(inv) {
                out.push(inner.clone());
                self.open_up(&inner, upstream, out, depth + 1);
            }
            return;
        }
        // Shell code: `bash -c CODE`, `eval ...`, `su -c CODE`, `ssh host CODE`, `watch CODE`,
        // a shell reading a here-document or what `echo`/`printf` pipe into it.
        if let Some(code) = shell_code(inv, upstream) {
            let saved_cwd = self.cwd.clone();
            self.cwd = inv.cwd.clone();
            let before = self.analysis.pipelines.len();
            self.line(&code, depth + 1);
            // Inner commands are also part of this pipeline (`curl x | bash -c 'sh'`).
            if !upstream.is_empty() {
                let inner = self.copies_of(before);
                out.extend(inner);
            }
            self.cwd = saved_cwd;
            return;
        }
        if let Some((language, code)) = interpreters::code_of(inv, upstream) {
            for line in interpreters::commands_in(language, &code) {
                let saved_cwd = self.cwd.clone();
                self.cwd = inv.cwd.clone();
                let before = self.analysis.pipelines.len();
                self.line(&line, depth + 1);
                for p in &mut self.analysis.pipelines[before..] {
                    for i in p {
                        i.derived = true;
                    }
                }
                self.cwd = saved_cwd;
            }
        }
    }
}

/// `/usr/bin/rm` → `rm`; `\rm` → `rm`.
pub fn base_name(program: &str) -> String {
    let p = program.trim_start_matches('\\');
    let p = p.rsplit(['/', '\\']).next().unwrap_or(p);
    // `git.exe`, `python3.11.exe` on Windows shells are the same programs.
    p.strip_suffix(".exe").unwrap_or(p).to_owned()
}

fn ansi_c(text: &str) -> String {
    text.replace("\\n", "\n")
        .replace("\\t", "\t")
        .replace("\\'", "'")
        .replace("\\\\", "\\")
}

/// The variable a parameter expansion reads, and whether it can never be empty (`${X:?}`,
/// `${X:-default}` with a literal default).
fn parameter_name(expr: &ParameterExpr) -> (Option<String>, bool) {
    use brush_parser::word::Parameter;
    let (parameter, guarded) = match expr {
        ParameterExpr::Parameter { parameter, .. } => (parameter, false),
        ParameterExpr::IndicateErrorIfNullOrUnset { parameter, .. } => (parameter, true),
        ParameterExpr::UseDefaultValues {
            parameter,
            default_value,
            ..
        }
        | ParameterExpr::AssignDefaultValues {
            parameter,
            default_value,
            ..
        } => (
            parameter,
            default_value.as_deref().is_some_and(|d| !d.is_empty()),
        ),
        _ => return (None, false),
    };
    match parameter {
        Parameter::Named(n) => (Some(n.clone()), guarded),
        _ => (None, guarded),
    }
}

const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "ash", "mksh", "fish", "busybox",
];

pub fn is_shell(program: &str) -> bool {
    SHELLS.contains(&program)
}

/// Skips options of a wrapper: `with_value` lists the short and long options that take the
/// next word as their value. Returns the index of the first word after the options.
fn skip_options(args: &[Arg], with_value: &[&str]) -> usize {
    let mut i = 0;
    while i < args.len() {
        let t = args[i].text.as_str();
        if t == "--" {
            return i + 1;
        }
        if !t.starts_with('-') || t == "-" {
            return i;
        }
        if with_value.contains(&t) {
            i += 2;
        } else {
            i += 1;
        }
    }
    i
}

fn rest(inv: &Invocation, from: usize) -> Option<Invocation> {
    let program = inv.args.get(from)?;
    let mut inner = inv.clone();
    inner.program = base_name(&program.text);
    inner.args = inv.args[from + 1..].to_vec();
    Some(inner)
}

/// The command a wrapper runs (`sudo rm ...` → `rm ...`); `xargs` gets the path-like words
/// of the commands piped into it as its arguments (`ls -d /* | xargs rm -rf`).
fn unwrap(inv: &Invocation, upstream: &[Invocation]) -> Option<Invocation> {
    let args = &inv.args;
    let start = match inv.program.as_str() {
        "sudo" | "doas" | "pkexec" | "run0" => {
            if inv.has_short('s') || inv.has_short('i') {
                // `sudo -s`/`-i CMD`: CMD is shell code, handled by shell_code.
                return None;
            }
            skip_options(
                args,
                &[
                    "-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "--user",
                    "--group", "--chdir", "--prompt", "--host",
                ],
            )
        }
        "env" => {
            let mut i = skip_options(
                args,
                &["-u", "--unset", "-C", "--chdir", "-S", "--split-string"],
            );
            while i < args.len() && args[i].text.contains('=') && !args[i].text.starts_with('=') {
                i += 1;
            }
            i
        }
        "nohup" | "exec" | "builtin" | "unbuffer" | "fakeroot" | "catchsegv" | "proxychains"
        | "proxychains4" | "torsocks" | "firejail" | "nocache" | "eatmydata" | "time" => {
            skip_options(args, &["-a", "-o", "-f"])
        }
        "command" => {
            if inv.has_short('v') || inv.has_short('V') {
                return None;
            }
            skip_options(args, &[])
        }
        // `busybox sh -c CODE`, `busybox reboot`: the applet is the program.
        "busybox" | "toybox" => {
            if args.first().is_none_or(|a| a.text.starts_with('-')) {
                return None;
            }
            0
        }
        "nice" => skip_options(args, &["-n", "--adjustment"]),
        "ionice" => skip_options(
            args,
            &["-c", "-n", "-p", "-P", "-u", "--class", "--classdata"],
        ),
        "timeout" => skip_options(args, &["-s", "-k", "--signal", "--kill-after"]) + 1,
        "setsid" | "stdbuf" | "strace" | "ltrace" => {
            skip_options(args, &["-o", "-e", "-p", "-s", "-E", "-u"])
        }
        "taskset" | "chrt" => skip_options(args, &["-p"]) + 1,
        "chroot" | "gosu" | "su-exec" | "sg" => skip_options(args, &["--userspec", "--groups"]) + 1,
        "flock" => {
            if inv.has_short('c') {
                return None;
            }
            skip_options(args, &["-w", "-E", "--timeout", "--conflict-exit-code"]) + 1
        }
        "runuser" => {
            if inv.has_short('c') {
                return None;
            }
            skip_options(args, &["-u", "-g", "-G", "--user", "--group"])
        }
        "xargs" | "parallel" => {
            let i = skip_options(
                args,
                &[
                    "-I",
                    "-i",
                    "-n",
                    "-P",
                    "-d",
                    "-a",
                    "-L",
                    "-s",
                    "-E",
                    "-e",
                    "--delimiter",
                    "--arg-file",
                    "--max-args",
                    "--max-procs",
                    "-j",
                    "--replace",
                ],
            );
            let mut inner = rest(inv, i).unwrap_or_else(|| {
                let mut echo = inv.clone();
                echo.program = "echo".into();
                echo.args.clear();
                echo
            });
            // What the pipe gives xargs: the upstream commands' path-like words, or
            // something unknown.
            let fed: Vec<Arg> = upstream
                .iter()
                .flat_map(|u| u.operands().into_iter().cloned())
                .filter(|a| a.text.contains('/') || a.text.contains('*') || a.text.starts_with('~'))
                .collect();
            if fed.is_empty() {
                inner.args.push(Arg {
                    text: "$XARGS".into(),
                    dynamic: true,
                    unknown_start: true,
                });
            } else {
                inner.args.extend(fed);
            }
            return Some(inner);
        }
        _ => return None,
    };
    rest(inv, start)
}

/// `find ROOTS ... -delete` and `-exec CMD {} ;`: the commands find runs on what it finds.
/// `{}` stands for the roots (or their contents when a name filter narrows the search).
fn find_actions(inv: &Invocation) -> Vec<Invocation> {
    let args = &inv.args;
    let first_expr = args
        .iter()
        .position(|a| a.text.starts_with('-') || a.text == "(" || a.text == "!")
        .unwrap_or(args.len());
    let mut roots: Vec<Arg> = args[..first_expr].to_vec();
    if roots.is_empty() {
        roots.push(Arg::literal("."));
    }
    // A filter that narrows what is found (`-name '*.pyc'`) makes the action touch some
    // files inside the roots, not the roots themselves.
    let narrowed = args.windows(2).any(|w| {
        matches!(
            w[0].text.as_str(),
            "-name"
                | "-iname"
                | "-path"
                | "-ipath"
                | "-regex"
                | "-iregex"
                | "-newer"
                | "-mtime"
                | "-mmin"
                | "-size"
                | "-user"
                | "-perm"
                | "-empty"
                | "-wholename"
                | "-ctime"
                | "-atime"
                | "-inum"
                | "-samefile"
                | "-links"
        ) && w[1].text != "*"
    }) || args.iter().any(|a| a.text == "-empty");
    let targets: Vec<Arg> = roots
        .iter()
        .map(|r| {
            if narrowed {
                Arg {
                    text: format!("{}/{{found}}", r.text.trim_end_matches('/')),
                    ..r.clone()
                }
            } else {
                r.clone()
            }
        })
        .collect();
    let mut out = Vec::new();
    if args.iter().any(|a| a.text == "-delete") {
        let mut rm = inv.clone();
        rm.program = "rm".into();
        rm.args = std::iter::once(Arg::literal(if narrowed { "-f" } else { "-rf" }))
            .chain(targets.iter().cloned())
            .collect();
        rm.derived = true;
        out.push(rm);
    }
    let mut i = 0;
    while i < args.len() {
        if matches!(
            args[i].text.as_str(),
            "-exec" | "-execdir" | "-ok" | "-okdir"
        ) {
            let end = args[i + 1..]
                .iter()
                .position(|a| a.text == ";" || a.text == "+" || a.text == "\\;")
                .map_or(args.len(), |p| i + 1 + p);
            if let Some(program) = args.get(i + 1).filter(|_| i + 1 < end) {
                let mut cmd = inv.clone();
                cmd.program = base_name(&program.text);
                cmd.args = Vec::new();
                for a in &args[i + 2..end] {
                    if a.text == "{}" {
                        cmd.args.extend(targets.iter().cloned());
                    } else {
                        cmd.args.push(a.clone());
                    }
                }
                // Everything under an unnarrowed root is handed over, one by one: as
                // recursive as `rm -r ROOT`.
                if !narrowed && cmd.program == "rm" && !cmd.has_short('r') {
                    cmd.args.insert(0, Arg::literal("-r"));
                }
                cmd.derived = true;
                out.push(cmd);
            }
            i = end;
        }
        i += 1;
    }
    out
}

/// Shell code that `inv` runs, when it is a shell given code or a wrapper of shell code.
fn shell_code(inv: &Invocation, upstream: &[Invocation]) -> Option<String> {
    let program = inv.program.as_str();
    let args = &inv.args;
    let code_after_c = || -> Option<String> {
        let i = args.iter().position(|a| {
            let t = a.text.as_str();
            t == "--command" || (t.starts_with('-') && !t.starts_with("--") && t[1..].contains('c'))
        })?;
        args.get(i + 1).map(|a| a.text.clone())
    };
    // The wrapped command: the arguments from the `i`th on, when there are any.
    let words_from = |i: usize| -> Option<String> {
        (i < args.len()).then(|| {
            args[i..]
                .iter()
                .map(|a| a.text.as_str())
                .collect::<Vec<_>>()
                .join(" ")
        })
    };
    match program {
        p if is_shell(p) => {
            if p == "busybox" {
                return None;
            }
            if let Some(code) = code_after_c() {
                return Some(code);
            }
            let reads_script = inv
                .args
                .iter()
                .any(|a| !a.text.starts_with('-') && a.text != "-s");
            if reads_script {
                return None;
            }
            if let Some(stdin) = &inv.stdin {
                return Some(stdin.clone());
            }
            // `echo 'rm -rf /' | sh`: what the upstream command prints is the script.
            upstream
                .last()
                .filter(|u| matches!(u.program.as_str(), "echo" | "printf"))
                .map(|u| {
                    u.operands()
                        .iter()
                        .map(|a| a.text.replace("\\n", "\n"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
        }
        "eval" => Some(inv.arg_text()),
        "su" | "runuser" | "flock" | "script" => code_after_c(),
        "sudo" | "doas" => {
            // `sudo -s CMD` / `sudo -i CMD` run CMD through a shell.
            let i = skip_options(
                args,
                &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"],
            );
            words_from(i)
        }
        "watch" => {
            let i = skip_options(args, &["-n", "--interval", "-d", "--differences"]);
            words_from(i)
        }
        "ssh" => {
            // `ssh [options] host CMD...`: CMD runs on the other machine.
            let i = skip_options(
                args,
                &[
                    "-p", "-i", "-l", "-o", "-F", "-J", "-L", "-R", "-D", "-W", "-b", "-c", "-E",
                    "-e", "-I", "-m", "-O", "-Q", "-S", "-w", "-B",
                ],
            );
            words_from(i + 1)
        }
        "env" => {
            // `env -S 'rm -rf /'`
            let i = args
                .iter()
                .position(|a| a.text == "-S" || a.text == "--split-string")?;
            args.get(i + 1).map(|a| a.text.clone())
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(command: &str) -> Vec<String> {
        analyse(command, None)
            .invocations()
            .map(Invocation::line)
            .collect()
    }

    #[test]
    fn quoted_text_is_an_argument_not_a_command() {
        assert_eq!(
            lines("git commit -m \"don't git push --force\""),
            vec!["git commit -m don't git push --force"]
        );
        let a = analyse("grep 'rm -rf /' notes.txt", None);
        assert_eq!(a.pipelines.len(), 1);
        assert_eq!(a.pipelines[0][0].program, "grep");
    }

    #[test]
    fn substitutions_wrappers_and_shell_code_are_opened_up() {
        assert!(lines("echo $(rm -rf ~)").contains(&"rm -rf ~".to_owned()));
        assert!(lines("sudo -u root nice -n 5 rm -rf /x").contains(&"rm -rf /x".to_owned()));
        assert!(lines("bash -c 'cd /usr && rm -rf ./*'").contains(&"rm -rf ./*".to_owned()));
        assert!(lines("sh <<< \"mkfs.ext4 /dev/vdb\"").contains(&"mkfs.ext4 /dev/vdb".to_owned()));
        assert!(lines("ls -d /* | xargs rm -rf").contains(&"rm -rf /*".to_owned()));
        assert!(lines("find /var -delete").contains(&"rm -rf /var".to_owned()));
        assert!(lines("diff <(rm -rf /y) b").contains(&"rm -rf /y".to_owned()));
        assert!(lines("busybox sh -c 'rm -rf /z'").contains(&"rm -rf /z".to_owned()));
        assert_eq!(lines("busybox --list"), vec!["busybox --list"]);
    }

    #[test]
    fn the_working_directory_and_variables_are_followed() {
        let a = analyse("cd /usr && rm -rf ./*", None);
        let rm = a.invocations().find(|i| i.program == "rm").unwrap();
        assert_eq!(rm.cwd.as_deref(), Some("/usr"));
        assert!(lines("D=/etc; rm -rf $D").contains(&"rm -rf /etc".to_owned()));
        let a = analyse("rm -rf \"$DIR\"/", None);
        let rm = a.invocations().next().unwrap();
        assert!(rm.args[1].unknown_start && rm.args[1].dynamic);
        let a = analyse("rm -rf \"${DIR:?}\"/", None);
        assert!(!a.invocations().next().unwrap().args[1].unknown_start);
    }

    #[test]
    fn redirections_and_here_documents() {
        let a = analyse("echo key >> ~/.ssh/authorized_keys2", None);
        assert_eq!(
            a.pipelines[0][0].writes[0].target.text,
            "~/.ssh/authorized_keys2"
        );
        let a = analyse("cat <<EOF > notes.txt\nrm -rf /\nEOF", None);
        assert_eq!(lines("cat <<EOF > notes.txt\nrm -rf /\nEOF"), vec!["cat"]);
        assert_eq!(a.pipelines[0][0].stdin.as_deref(), Some("rm -rf /\n"));
        assert!(lines("bash <<'EOF'\nrm -rf /srv\nEOF").contains(&"rm -rf /srv".to_owned()));
    }

    /// Mangled versions of every corpus line (cut, quotes and brackets inserted, bytes
    /// repeated) never make the analyser panic or hang.
    #[test]
    fn mangled_command_lines_are_survived() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/corpus");
        let mut lines = Vec::new();
        for file in ["dangerous.txt", "safe.txt"] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            lines.extend(
                text.lines()
                    .filter_map(|l| l.split_once('\t'))
                    .map(|(_, c)| crate::corpus::unescape(c)),
            );
        }
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let inserts = [
            "'", "\"", "`", "$(", "(", ")", "{", "}", "<<EOF\n", "\\", "\n", "|", "&", ";", "${",
            "<(", "\0", "\u{1b}[",
        ];
        for line in &lines {
            for _ in 0..8 {
                let mut mangled: Vec<char> = line.chars().collect();
                let at = (next() as usize) % (mangled.len() + 1);
                match next() % 3 {
                    0 => mangled.truncate(at),
                    1 => {
                        let ins = inserts[(next() as usize) % inserts.len()];
                        for (k, c) in ins.chars().enumerate() {
                            mangled.insert(at + k, c);
                        }
                    }
                    _ => {
                        let copy: Vec<char> = mangled[at..].to_vec();
                        mangled.extend(copy.iter().cycle().take(copy.len() * 3));
                    }
                }
                let text: String = mangled.into_iter().collect();
                let _ = analyse(&text, Some("/home/~/src"));
            }
        }
    }

    #[test]
    fn nested_loops_cannot_multiply_the_work() {
        // Fewer than `limit` invocations, and the `rm` still among them.
        let within = |line: &str, limit: usize| {
            let a = analyse(line, None);
            assert!(
                a.invocations().count() < limit,
                "{}",
                a.invocations().count()
            );
            assert!(a.invocations().any(|i| i.program == "rm"));
        };
        let mut line = String::new();
        for i in 0..12 {
            line.push_str(&format!("for v{i} in a b c d; do "));
        }
        line.push_str("rm -rf /$v0");
        line.push_str(&"; done".repeat(12));
        within(&line, 1000);
        // Piped subshells nested deep copy within a budget too.
        within(
            &format!("{}rm -rf /x{}", "true | (".repeat(40), ")".repeat(40)),
            10_000,
        );
    }

    #[test]
    fn unparsable_lines_fall_back_to_words() {
        // An unterminated quote runs nothing: its text stays an argument.
        let a = analyse("echo 'unterminated; rm -rf /", None);
        assert!(!a.fallback);
        assert!(!a.invocations().any(|i| i.program == "rm"));
        let deep = format!("{}rm -rf /{}", "(".repeat(500), ")".repeat(500));
        assert!(
            analyse(&deep, None)
                .invocations()
                .any(|i| i.program == "rm")
        );
    }
}
