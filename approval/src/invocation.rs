//! What a command line is read into: simple commands ([`Invocation`]) of words after quote
//! removal ([`Arg`]) and the files they write ([`Write`]). Imports nothing of the crate: the
//! reader ([`crate::shell`]), the interpreters' code ([`crate::interpreters`]) and the path
//! judge ([`crate::paths`]) all speak it.

/// One word of a command after quote removal. Expansions the analyser cannot know (`$DIR`,
/// `$(...)`) stay in the text as written and make the word `dynamic`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Arg {
    pub text: String,
    pub dynamic: bool,
    /// The word starts with an unknown expansion that could be empty (`$DIR/`, `"$X"`), so it
    /// could resolve to `/`. `${X:?}` cannot be empty and does not count.
    pub unknown_start: bool,
}

impl Arg {
    pub fn literal(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            dynamic: false,
            unknown_start: false,
        }
    }
}

/// A redirection that writes (`>`, `>>`, `>|`, `&>`) to a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub target: Arg,
    pub append: bool,
}

/// One simple command as it will run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invocation {
    /// The program's base name (`/usr/bin/rm` → `rm`).
    pub program: String,
    pub args: Vec<Arg>,
    pub writes: Vec<Write>,
    /// Files read by `<`.
    pub reads: Vec<Arg>,
    /// A here-document or here-string's text.
    pub stdin: Option<String>,
    /// The working directory when it runs: absolute (home is `~`), or unknown.
    pub cwd: Option<String>,
    /// Derived from another command (a wrapper's command, a `find -exec`, an interpreter's
    /// call): not itself on the command line.
    pub derived: bool,
}

impl Invocation {
    /// Arguments' texts joined by single spaces.
    pub fn arg_text(&self) -> String {
        let mut out = String::new();
        for (i, a) in self.args.iter().enumerate() {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(&a.text);
        }
        out
    }

    /// Program and arguments as one line.
    pub fn line(&self) -> String {
        if self.args.is_empty() {
            self.program.clone()
        } else {
            format!("{} {}", self.program, self.arg_text())
        }
    }

    /// Whether an argument is exactly `flag`, or a bundle of short flags containing it
    /// (`-rf` has `r`).
    pub fn has_short(&self, letter: char) -> bool {
        self.options().any(|a| {
            let t = a.text.as_str();
            t.starts_with('-') && !t.starts_with("--") && t.len() > 1 && t[1..].contains(letter)
        })
    }

    pub fn has_long(&self, flag: &str) -> bool {
        self.options()
            .any(|a| a.text == flag || a.text.starts_with(&format!("{flag}=")))
    }

    /// Arguments before `--` (after it, `-rf` is a file name).
    fn options(&self) -> impl Iterator<Item = &Arg> {
        self.args.iter().take_while(|a| a.text != "--")
    }

    /// Arguments that are not options (all after `--`).
    pub fn operands(&self) -> Vec<&Arg> {
        let mut out = Vec::new();
        let mut options_done = false;
        for a in &self.args {
            if !options_done && a.text == "--" {
                options_done = true;
                continue;
            }
            if !options_done && a.text.starts_with('-') && a.text.len() > 1 {
                continue;
            }
            out.push(a);
        }
        out
    }
}
