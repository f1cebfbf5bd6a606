//! Turning a command line into the simple commands it runs, with the usual disguises removed:
//! ANSI codes, Unicode look-alikes and invisible characters, line continuations, quotes and
//! backslashes, `$IFS`, and nesting (`bash -c "..."`, `eval`, `$(...)`, backticks).

/// Maps a look-alike character to ASCII (fullwidth forms, dashes, Cyrillic/Greek look-alikes).
fn fold_char(c: char) -> Option<char> {
    let code = c as u32;
    // Invisible: zero-width spaces and joiners, BOM, soft hyphen.
    if matches!(code, 0x200B..=0x200F | 0x2060..=0x2064 | 0xFEFF | 0x00AD | 0x00 | 0x80..=0x9A | 0x9C..=0x9F)
    {
        return None;
    }
    if (0xFF01..=0xFF5E).contains(&code) {
        return char::from_u32(code - 0xFEE0);
    }
    Some(match c {
        '\u{2010}'..='\u{2015}' | '\u{2212}' | '\u{FE63}' => '-',
        '\u{00A0}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
        '\u{2018}' | '\u{2019}' | '\u{201A}' | '\u{201B}' => '\'',
        '\u{201C}' | '\u{201D}' | '\u{201E}' | '\u{201F}' => '"',
        '\u{2044}' | '\u{2215}' | '\u{29F8}' => '/',
        'а' => 'a',
        'е' => 'e',
        'о' => 'o',
        'р' => 'p',
        'с' => 'c',
        'х' => 'x',
        'у' => 'y',
        'к' => 'k',
        'м' => 'm',
        'т' => 't',
        'н' => 'h',
        'в' => 'b',
        'і' => 'i',
        'ј' => 'j',
        'ѕ' => 's',
        'ԁ' => 'd',
        'ɡ' => 'g',
        'ο' => 'o',
        'ρ' => 'p',
        'ν' => 'v',
        'α' => 'a',
        'А' => 'A',
        'Е' => 'E',
        'О' => 'O',
        'Р' => 'P',
        'С' => 'C',
        'Х' => 'X',
        'Т' => 'T',
        'М' => 'M',
        'К' => 'K',
        'Н' => 'H',
        'В' => 'B',
        other => other,
    })
}

/// Removes ANSI escape sequences (CSI and OSC).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        // The 8-bit CSI is ESC [ in one character.
        if c == '\u{9b}' {
            for d in chars.by_ref() {
                if ('@'..='~').contains(&d) {
                    break;
                }
            }
            continue;
        }
        if c == '\u{1b}' {
            match chars.peek() {
                Some('[') => {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('@'..='~').contains(&d) {
                            break;
                        }
                    }
                }
                Some(']') => {
                    chars.next();
                    while let Some(d) = chars.next() {
                        if d == '\u{7}' || (d == '\u{1b}' && chars.peek() == Some(&'\\')) {
                            break;
                        }
                    }
                }
                _ => {}
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Disguises removed, structure (quotes, `$(...)`, `<(...)`, tabs, newlines) kept: what the
/// parser reads. `$IFS` in any spelling is the space bash splits it into.
pub fn unmask(command: &str) -> String {
    replace_ifs(&undisguised(command))
}

/// What both readings start from: ANSI escapes stripped, look-alike characters folded, line
/// continuations joined.
fn undisguised(command: &str) -> String {
    let text = strip_ansi(command);
    let text: String = text.chars().filter_map(fold_char).collect();
    text.replace("\\\r\n", "").replace("\\\n", "")
}

fn replace_ifs(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("$IFS").or_else(|| rest.find("${IFS")) {
        let i = [rest.find("$IFS"), rest.find("${IFS")]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(i);
        out.push_str(&rest[..i]);
        let after = &rest[i..];
        let len = if after.starts_with("${IFS") {
            after.find('}').map_or(after.len(), |e| e + 1)
        } else {
            4
        };
        out.push(' ');
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// The command line as the shell would roughly see it, flattened: one string, nesting opened
/// up, separators kept. Lower-cased copies are made by the caller where case does not matter.
pub fn flatten(command: &str) -> String {
    let text = undisguised(command)
        .replace("${IFS}", " ")
        .replace("$IFS", " ")
        .replace("${IFS%?}", " ");
    // Nesting: command substitution and backticks are commands of their own.
    let text = text
        .replace("$(", " ; ")
        .replace("<(", " ; ")
        .replace(">(", " ; ")
        .replace('`', " ; ");
    // Quotes and escapes hide words from naive matching: drop them.
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\'' | '"' | '\\' => {}
            other => out.push(other),
        }
    }
    // Wrappers that run their argument as a command line.
    let mut flat = out;
    for wrapper in [
        "bash -c",
        "sh -c",
        "zsh -c",
        "dash -c",
        "ksh -c",
        "bash -lc",
        "sh -lc",
        "bash -ic",
        "eval",
        "sudo -s",
        "xargs -0 sh -c",
        "su -c",
    ] {
        flat = flat.replace(wrapper, " ; ");
    }
    collapse_spaces(&flat)
}

fn collapse_spaces(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut last_space = false;
    for c in text.chars() {
        let space = c == ' ' || c == '\t';
        if space {
            if !last_space {
                out.push(' ');
            }
        } else {
            out.push(c);
        }
        last_space = space;
    }
    out.trim().to_owned()
}

/// Pipelines (split on `;`, `&&`, `||`, `&`, newlines), each a list of simple commands (split
/// on `|`).
pub fn pipelines(flat: &str) -> Vec<Vec<String>> {
    let mut result = Vec::new();
    let mut current = String::new();
    let mut chars = flat.chars().peekable();
    let push = |current: &mut String, result: &mut Vec<Vec<String>>| {
        let pipeline: Vec<String> = current
            .split('|')
            .map(|s| s.trim().to_owned())
            .filter(|s| !s.is_empty())
            .collect();
        if !pipeline.is_empty() {
            result.push(pipeline);
        }
        current.clear();
    };
    while let Some(c) = chars.next() {
        match c {
            ';' | '\n' | '\r' => push(&mut current, &mut result),
            '&' => {
                if chars.peek() == Some(&'&') {
                    chars.next();
                } else if chars.peek() == Some(&'>') {
                    // `&>` is a redirection, not a separator.
                    current.push('&');
                    continue;
                }
                if current.ends_with('>') || current.ends_with('<') {
                    current.push('&');
                    continue;
                }
                push(&mut current, &mut result);
            }
            '|' => {
                if chars.peek() == Some(&'|') {
                    chars.next();
                    push(&mut current, &mut result);
                } else {
                    current.push('|');
                }
            }
            '(' | ')' | '{' | '}' => current.push(' '),
            other => current.push(other),
        }
    }
    push(&mut current, &mut result);
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disguises_are_removed() {
        assert_eq!(flatten("r\"m\" -r'f' /"), "rm -rf /");
        assert_eq!(flatten("rm${IFS}-rf${IFS}/"), "rm -rf /");
        assert_eq!(flatten("\u{1b}[31mrm\u{1b}[0m -rf /"), "rm -rf /");
        assert_eq!(flatten("ｒｍ －ｒｆ /"), "rm -rf /");
        assert_eq!(flatten("r\u{200B}m -rf /"), "rm -rf /");
        assert_eq!(flatten("rm \\\n -rf /"), "rm -rf /");
        assert_eq!(flatten("bash -c \"rm -rf /\""), "; rm -rf /");
    }

    #[test]
    fn separators_split_and_pipes_stay_in_a_pipeline() {
        let p = pipelines(&flatten("make && curl x | sh; echo ok || true & ls 2>&1"));
        assert_eq!(
            p,
            vec![
                vec!["make".to_owned()],
                vec!["curl x".to_owned(), "sh".to_owned()],
                vec!["echo ok".to_owned()],
                vec!["true".to_owned()],
                vec!["ls 2>&1".to_owned()]
            ]
        );
    }
}
