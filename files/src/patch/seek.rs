//! Finding a chunk's lines in a file, with decreasing strictness (as codex does): exact, then
//! ignoring trailing whitespace, then ignoring surrounding whitespace, then after folding
//! typographic punctuation to ASCII. Models often get exactly these details wrong.

/// The first index at or after `start` where `pattern` matches `lines`. With `eof`, a match at
/// the very end of the file is the only candidate.
pub(crate) fn seek(lines: &[String], pattern: &[String], start: usize, eof: bool) -> Option<usize> {
    if pattern.is_empty() {
        return Some(start);
    }
    if pattern.len() > lines.len() {
        return None;
    }
    let last = lines.len() - pattern.len();
    let passes: [fn(&str, &str) -> bool; 4] = [
        |a, b| a == b,
        |a, b| a.trim_end() == b.trim_end(),
        |a, b| a.trim() == b.trim(),
        |a, b| normalise(a) == normalise(b),
    ];
    for eq in passes {
        let at = |i: usize| pattern.iter().zip(&lines[i..]).all(|(p, l)| eq(l, p));
        if eof {
            // `*** End of File`: only the end of the file will do.
            if last >= start && at(last) {
                return Some(last);
            }
            continue;
        }
        if let Some(i) = (start..=last).find(|&i| at(i)) {
            return Some(i);
        }
    }
    None
}

fn normalise(s: &str) -> String {
    s.trim()
        .chars()
        .map(|c| match c {
            '\u{2010}'..='\u{2015}' | '\u{2212}' => '-',
            '\u{2018}'..='\u{201B}' => '\'',
            '\u{201C}'..='\u{201F}' => '"',
            '\u{00A0}' | '\u{2002}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}' => ' ',
            other => other,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn strictness_ladder() {
        let lines = v(&["  foo  ", "bar\t", "“q” – x"]);
        assert_eq!(seek(&lines, &v(&["bar"]), 0, false), Some(1));
        assert_eq!(seek(&lines, &v(&["foo", "bar"]), 0, false), Some(0));
        assert_eq!(seek(&lines, &v(&["\"q\" - x"]), 0, false), Some(2));
        assert_eq!(seek(&lines, &v(&["foo"]), 1, false), None);
        assert_eq!(seek(&lines, &v(&["a", "b", "c", "d"]), 0, false), None);
        let lines = v(&["x", "y", "x"]);
        assert_eq!(seek(&lines, &v(&["x"]), 0, true), Some(2));
    }
}
