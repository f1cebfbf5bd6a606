//! Code given to an interpreter on the command line (`python3 -c`, `perl -e`, `ruby -e`,
//! `node -e`, `php -r`, or a here-document on its standard input) is read for what it does to
//! the machine: the shell commands it runs (`os.system`, `subprocess`, `system`, backticks,
//! `execSync`) and the files it deletes or writes (`shutil.rmtree`, `FileUtils.rm_rf`,
//! `fs.rmSync`, `open(..., 'w')`). Each is turned into the equivalent shell command line and
//! judged by the same rules. Only literal arguments are read: `os.system(cmd)` with a variable
//! tells nothing.

use std::sync::OnceLock;

use regex::Regex;

use crate::invocation::Invocation;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Language {
    Python,
    Perl,
    Ruby,
    Node,
    Php,
}

fn language_of(program: &str) -> Option<Language> {
    let p = program.trim_end_matches(|c: char| c.is_ascii_digit() || c == '.');
    Some(match p {
        "python" | "pypy" | "python3-" | "uv" => Language::Python,
        "perl" => Language::Perl,
        "ruby" | "jruby" => Language::Ruby,
        "node" | "nodejs" | "bun" | "deno" => Language::Node,
        "php" => Language::Php,
        _ => return None,
    })
}

/// The code `inv` runs, when it is an interpreter given code on its command line or stdin.
pub fn code_of(inv: &Invocation, upstream: &[Invocation]) -> Option<(Language, String)> {
    let language = language_of(&inv.program)?;
    let flags: &[&str] = match language {
        Language::Python => &["-c"],
        Language::Perl => &["-e", "-E"],
        Language::Ruby => &["-e"],
        Language::Node => &["-e", "--eval", "-p", "--print", "eval"],
        Language::Php => &["-r"],
    };
    let mut code = Vec::new();
    let mut script_file = false;
    let mut i = 0;
    while i < inv.args.len() {
        let t = inv.args[i].text.as_str();
        if flags.contains(&t) {
            if let Some(c) = inv.args.get(i + 1) {
                code.push(c.text.clone());
            }
            i += 2;
            continue;
        }
        // `-ce 'code'`, `-le 'code'` (perl bundles).
        if language == Language::Perl && t.starts_with('-') && t.ends_with('e') && t.len() > 2 {
            if let Some(c) = inv.args.get(i + 1) {
                code.push(c.text.clone());
            }
            i += 2;
            continue;
        }
        if !t.starts_with('-') && code.is_empty() {
            script_file = t != "-";
            break;
        }
        i += 1;
    }
    if !code.is_empty() {
        return Some((language, code.join("\n")));
    }
    if script_file {
        return None;
    }
    if let Some(stdin) = &inv.stdin {
        return Some((language, stdin.clone()));
    }
    upstream
        .last()
        .filter(|u| matches!(u.program.as_str(), "echo" | "printf"))
        .map(|u| (language, u.arg_text()))
}

/// Function and method names whose literal arguments say what the code does.
const CALL_NAMES: &[&str] = &[
    "system",
    "popen",
    "getoutput",
    "getstatusoutput",
    "check_output",
    "check_call",
    "call",
    "run",
    "Popen",
    "exec",
    "execSync",
    "spawnSync",
    "spawn",
    "execFileSync",
    "execFile",
    "shell_exec",
    "passthru",
    "proc_open",
    "capture2",
    "capture2e",
    "capture3",
    "popen3",
    "pipeline_r",
    "rmtree",
    "rm_rf",
    "rm_r",
    "remove_tree",
    "remove_dir",
    "remove_entry",
    "remove_entry_secure",
    "rmSync",
    "rmdirSync",
    "removedirs",
    "rm",
    "remove",
    "unlink",
    "unlinkSync",
    "delete",
    "rm_f",
    "remove_file",
    "rmdir",
    "rmdirs",
    "writeFileSync",
    "appendFileSync",
    "writeFile",
    "appendFile",
    "write_text",
    "write_bytes",
    "write",
    "binwrite",
    "file_put_contents",
    "move",
    "rename",
    "renameSync",
    "mv",
];

/// A quoted literal at the start of `text` (`'...'` or `"..."`, backslash escapes): its
/// value and the rest of the text after it.
fn literal_at(text: &str) -> Option<(String, &str)> {
    let quote = text.chars().next().filter(|c| *c == '\'' || *c == '"')?;
    let mut value = String::new();
    let mut chars = text[1..].char_indices();
    while let Some((i, c)) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some((_, 'n')) => value.push('\n'),
                Some((_, 't')) => value.push('\t'),
                Some((_, other)) => value.push(other),
                None => return None,
            }
        } else if c == quote {
            return Some((value, &text[1 + i + 1..]));
        } else {
            value.push(c);
        }
    }
    None
}

/// `name(LIT, LIT, ...)`, `name([LIT, ...])` and `name LIT` (Perl, Ruby) for the names of
/// [`CALL_NAMES`]: a hand-written scanner, since a regex of this shape costs a millisecond to
/// compile and the check runs in a fresh process.
fn calls_in(code: &str) -> Vec<(&str, Vec<String>)> {
    let mut out = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = (bytes[i].is_ascii_alphabetic() || bytes[i] == b'_')
            && (i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_'));
        if !starts_word {
            i += 1;
            continue;
        }
        let end = code[i..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(code.len(), |e| i + e);
        let start = i;
        let name = &code[start..end];
        i = end;
        if !CALL_NAMES.contains(&name) {
            continue;
        }
        // Ruby's `File.write(PATH, data)` names its path first; a Python file object's
        // `f.write(data)` does not.
        let name = match ["File.", "IO."]
            .iter()
            .find(|q| name == "write" && code[..start].ends_with(**q))
        {
            Some(q) => &code[start - q.len()..end],
            None => name,
        };
        let after = &code[end..];
        let trimmed = after.trim_start();
        let mut rest = if let Some(r) = trimmed.strip_prefix('(') {
            r.trim_start()
        } else if trimmed.len() < after.len() && trimmed.starts_with(['\'', '"']) {
            trimmed
        } else {
            continue;
        };
        if let Some(r) = rest.strip_prefix('[') {
            rest = r.trim_start();
        }
        let mut args = Vec::new();
        while let Some((value, after_literal)) = literal_at(rest) {
            args.push(value);
            let t = after_literal.trim_start();
            match t.strip_prefix(',') {
                Some(r) => rest = r.trim_start(),
                None => break,
            }
        }
        if !args.is_empty() {
            out.push((name, args));
        }
    }
    out
}

/// What a call does, given its first literal argument(s).
#[derive(Clone, Copy)]
enum Action {
    /// The argument is a shell command line (or a list of argv words).
    Shell,
    /// Deletes the path, recursively or not.
    Delete { recursive: bool },
    /// Writes (or appends to) the path.
    Write,
    /// Moves the first path to the second.
    Move,
}

const LIT: &str = r#"(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")"#;

/// A regex built on first use. Each costs about 0.1 ms to compile, and the check runs in a
/// fresh process, so every one is built only when its hint appears in the code.
fn lazy(
    cell: &'static OnceLock<Option<Regex>>,
    pattern: impl FnOnce() -> String,
) -> Option<&'static Regex> {
    cell.get_or_init(|| Regex::new(&pattern()).ok()).as_ref()
}

/// Backticks, `%x(...)`, `qx(...)`: shell code.
fn backticks() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        r"`([^`]+)`|%x\(([^)]*)\)|qx[({/]([^)}/]*)[)}/]".into()
    })
}

/// `open(PATH, 'w')` (Python), `File.open(PATH, 'w')` (Ruby), `fs.openSync(PATH, 'w')`
/// (Node); `r+` writes without truncating, as `/dev/sda` is opened to overwrite it in place.
fn open_write() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        format!(
            r#"\bopen(?:Sync)?\s*\(\s*(?P<path>{LIT})\s*,\s*['"](?P<mode>[wax][bx+t]*|r[bst]?\+[bt]?)['"]"#
        )
    })
}

/// `os.open(PATH, os.O_WRONLY)` (Python), `sysopen(FH, PATH, O_RDWR)` (Perl).
fn flags_open() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        format!(
            r"\b(?:os\.open|sysopen)\s*\(\s*(?:(?:my\s+)?[$\w]+\s*,\s*)?(?P<path>{LIT})\s*,[^)]*\bO_(?:WRONLY|RDWR)\b"
        )
    })
}

/// Perl's `open(FH, '>PATH')` / `open(my $fh, '>', PATH)`.
fn perl_open() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        format!(
            r#"\bopen\s*\(?\s*(?:my\s+)?[$\w]+\s*,\s*(?:'(?P<inline>>>?[^']+)'|"(?P<inline2>>>?[^"]+)"|['"](?P<mode>>>?)['"]\s*,\s*(?P<path>{LIT}))"#
        )
    })
}

/// `os.kill(-1, ...)`, `Process.kill(..., -1)`, `killpg(0, ...)`: every process.
fn kill_all() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        r"\bkill\s*\(\s*-1\b|\bkill\s*\([^)]*,\s*-1\s*\)|\bkillpg\s*\(\s*0\b".into()
    })
}

/// `Path('/x').write_text(...)`, `.unlink()`, `.rmdir()`, `.touch()`.
fn path_calls() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        format!(
            r"Path\s*\(\s*(?P<path>{LIT})\s*\)\s*\.\s*(?P<op>write_text|write_bytes|unlink|rmdir|touch)"
        )
    })
}

/// `os.path.expanduser(LIT)` and `glob(LIT)`: the literal itself.
fn passthrough() -> Option<&'static Regex> {
    static R: OnceLock<Option<Regex>> = OnceLock::new();
    lazy(&R, || {
        format!(r"(?:\bos\.path\.expanduser|\bglob)\(\s*({LIT})\s*\)")
    })
}

fn unquote(literal: &str) -> String {
    let inner = &literal[1..literal.len().saturating_sub(1).max(1)];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c == '\\' {
            match chars.next() {
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some(other) => out.push(other),
                None => {}
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Single-quotes a word for a shell line.
fn quote(word: &str) -> String {
    if !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/._-~*=:@%+,".contains(c))
    {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

/// Home-directory spellings of each language, as the shell's `~`.
fn with_home(code: &str) -> String {
    let code =
        match passthrough().filter(|_| code.contains("expanduser(") || code.contains("glob(")) {
            Some(r) => r.replace_all(code, "$1").into_owned(),
            None => code.to_owned(),
        };
    code.replace("Path.home()", "'~'")
        .replace("os.environ['HOME']", "'~'")
        .replace("os.environ[\"HOME\"]", "'~'")
        .replace("os.getenv('HOME')", "'~'")
        .replace("Dir.home", "'~'")
        .replace("os.homedir()", "'~'")
        .replace("ENV['HOME']", "'~'")
        .replace("$ENV{HOME}", "'~'")
        .replace("$ENV{'HOME'}", "'~'")
}

/// Shell command lines equivalent to what `code` does.
pub fn commands_in(_language: Language, code: &str) -> Vec<String> {
    let code = with_home(code);
    let mut out = Vec::new();
    for (name, args) in calls_in(&code) {
        let Some(first) = args.first() else {
            continue;
        };
        let action = match name {
            "rmtree"
            | "rm_rf"
            | "rm_r"
            | "remove_tree"
            | "remove_dir"
            | "remove_entry"
            | "remove_entry_secure"
            | "rmSync"
            | "rmdirSync"
            | "removedirs"
            | "rm" => Action::Delete { recursive: true },
            "remove" | "unlink" | "unlinkSync" | "delete" | "rm_f" | "remove_file" | "rmdir"
            | "rmdirs" => Action::Delete { recursive: false },
            "writeFileSync" | "appendFileSync" | "writeFile" | "appendFile" | "write_text"
            | "write_bytes" | "write" | "binwrite" | "File.write" | "IO.write"
            | "file_put_contents" => Action::Write,
            "move" | "rename" | "renameSync" | "mv" => Action::Move,
            _ => Action::Shell,
        };
        match action {
            Action::Shell => {
                if args.len() > 1 {
                    out.push(args.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" "));
                } else {
                    out.push(first.clone());
                }
            }
            Action::Delete { recursive } => {
                let flag = if recursive { "-rf" } else { "-f" };
                out.push(format!("rm {flag} -- {}", quote(first)));
            }
            Action::Write => {
                // `Path('x').write_text(...)` names its path before the call; `write('x')`
                // of a file object writes data, not a path: only path-first calls count.
                if matches!(name, "write_text" | "write_bytes" | "write") {
                    continue;
                }
                out.push(format!(": > {}", quote(first)));
            }
            Action::Move => {
                if let Some(second) = args.get(1) {
                    out.push(format!("mv -- {} {}", quote(first), quote(second)));
                }
            }
        }
    }
    // `Path('/etc/x').write_text(...)`, `Path('/usr').unlink()`, `Path(p).rmdir()`.
    if let Some(path_calls) = path_calls().filter(|_| code.contains("Path")) {
        for cap in path_calls.captures_iter(&code) {
            let path = cap
                .name("path")
                .map_or(String::new(), |m| unquote(m.as_str()));
            match cap.name("op").map_or("", |m| m.as_str()) {
                "unlink" | "rmdir" => out.push(format!("rm -f -- {}", quote(&path))),
                _ => out.push(format!(": > {}", quote(&path))),
            }
        }
    }
    let backticks =
        backticks().filter(|_| code.contains('`') || code.contains("%x(") || code.contains("qx"));
    for cap in backticks.iter().flat_map(|r| r.captures_iter(&code)) {
        if let Some(m) = cap.get(1).or_else(|| cap.get(2)).or_else(|| cap.get(3)) {
            out.push(m.as_str().to_owned());
        }
    }
    let opens = code.contains("open");
    for cap in open_write()
        .filter(|_| opens)
        .iter()
        .flat_map(|r| r.captures_iter(&code))
    {
        let path = cap
            .name("path")
            .map_or(String::new(), |m| unquote(m.as_str()));
        // `a` appends and `r+` keeps what is there: neither truncates.
        let append = cap
            .name("mode")
            .is_some_and(|m| m.as_str().starts_with(['a', 'r']));
        out.push(format!(
            ": {} {}",
            if append { ">>" } else { ">" },
            quote(&path)
        ));
    }
    for cap in perl_open()
        .filter(|_| opens)
        .iter()
        .flat_map(|r| r.captures_iter(&code))
    {
        if let Some(inline) = cap.name("inline").or_else(|| cap.name("inline2")) {
            let t = inline.as_str();
            let (op, path) = if let Some(p) = t.strip_prefix(">>") {
                (">>", p)
            } else {
                (">", t.trim_start_matches('>'))
            };
            out.push(format!(": {op} {}", quote(path.trim())));
        } else if let (Some(mode), Some(path)) = (cap.name("mode"), cap.name("path")) {
            out.push(format!(
                ": {} {}",
                mode.as_str(),
                quote(&unquote(path.as_str()))
            ));
        }
    }
    for cap in flags_open()
        .filter(|_| code.contains("os.open") || code.contains("sysopen"))
        .iter()
        .flat_map(|r| r.captures_iter(&code))
    {
        let path = cap
            .name("path")
            .map_or(String::new(), |m| unquote(m.as_str()));
        out.push(format!(": >> {}", quote(&path)));
    }
    if code.contains("kill") && kill_all().is_some_and(|r| r.is_match(&code)) {
        out.push("kill -9 -1".into());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_calls_and_file_operations_become_command_lines() {
        let py = commands_in(
            Language::Python,
            "import os, shutil, subprocess; os.system('rm -rf /usr'); shutil.rmtree(\"/var\"); subprocess.run(['git', 'reset', '--hard'])",
        );
        assert!(py.contains(&"rm -rf /usr".to_owned()), "{py:?}");
        assert!(py.contains(&"rm -rf -- /var".to_owned()), "{py:?}");
        assert!(py.contains(&"git reset --hard".to_owned()), "{py:?}");
        let rb = commands_in(
            Language::Ruby,
            "require \"fileutils\"; FileUtils.rm_rf(\"/var\")",
        );
        assert_eq!(rb, vec!["rm -rf -- /var"]);
        let js = commands_in(
            Language::Node,
            "require('fs').rmSync('/etc',{recursive:true}); require('child_process').execSync('mkfs.ext4 /dev/sdb')",
        );
        assert!(js.contains(&"rm -rf -- /etc".to_owned()), "{js:?}");
        assert!(js.contains(&"mkfs.ext4 /dev/sdb".to_owned()), "{js:?}");
        let pl = commands_in(
            Language::Perl,
            "open(my $f, '>>', \"$ENV{HOME}/.bashrc\"); `rm -rf /srv`",
        );
        assert!(pl.contains(&"rm -rf /srv".to_owned()), "{pl:?}");
        let w = commands_in(
            Language::Python,
            "open(os.path.expanduser('~/.ssh/authorized_keys'), 'a').write(k)",
        );
        assert_eq!(w, vec![": >> ~/.ssh/authorized_keys"]);
        let rb = commands_in(Language::Ruby, "File.write('/proc/sysrq-trigger', 'c')");
        assert_eq!(rb, vec![": > /proc/sysrq-trigger"]);
        let js = commands_in(
            Language::Node,
            "fs.writeFile('/dev/kmsg', 'x', cb); fs.openSync('/dev/sda', 'r+')",
        );
        assert_eq!(js, vec![": > /dev/kmsg", ": >> /dev/sda"]);
        let py = commands_in(
            Language::Python,
            "fd = os.open('/proc/sysrq-trigger', os.O_WRONLY); os.write(fd, b'c')",
        );
        assert_eq!(py, vec![": >> /proc/sysrq-trigger"]);
        let pl = commands_in(Language::Perl, "sysopen(my $fh, '/dev/mem', O_RDWR) or die");
        assert_eq!(pl, vec![": >> /dev/mem"]);
    }

    #[test]
    fn harmless_code_yields_nothing() {
        assert!(commands_in(Language::Python, "print(sum(range(10)))").is_empty());
        assert!(
            commands_in(
                Language::Python,
                "import json; json.load(open('data.json'))"
            )
            .is_empty()
        );
        assert!(commands_in(Language::Node, "console.log(JSON.stringify({a: 1}))").is_empty());
        // Writing data to an open file object names no path.
        assert!(commands_in(Language::Python, "f.write('/proc/sysrq-trigger')").is_empty());
        assert!(commands_in(Language::Python, "os.open('/dev/sda', os.O_RDONLY)").is_empty());
        assert!(commands_in(Language::Node, "fs.openSync('/dev/sda', 'r')").is_empty());
    }
}
