//! "Did you mean": the lines of a file most like the text a caller expected, so that a failed
//! edit or patch tells the model what is actually there.

/// The line of `haystack` most similar to `needle` (1-based number) with up to two lines
/// either side, formatted `  12| text`. Empty when the file has no lines.
pub(crate) fn nearest_lines<S: AsRef<str>>(lines: &[S], needle: &str) -> String {
    let needle = needle.trim();
    let mut best: Option<(usize, f64)> = None;
    for (i, line) in lines.iter().enumerate() {
        let score = strsim::normalized_levenshtein(line.as_ref().trim(), needle);
        if best.is_none_or(|(_, s)| score > s) {
            best = Some((i, score));
        }
    }
    let Some((at, _)) = best else {
        return String::new();
    };
    let from = at.saturating_sub(2);
    let to = (at + 3).min(lines.len());
    let mut out = String::new();
    for (i, line) in lines.iter().enumerate().take(to).skip(from) {
        let marker = if i == at { '>' } else { ' ' };
        out.push_str(&format!("{marker}{:>5}| {}\n", i + 1, line.as_ref()));
    }
    out
}

/// The first line of `text` that is not blank (what a search for it should key on).
pub(crate) fn first_non_blank(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn picks_the_closest_line() {
        let lines = ["fn a() {}", "fn bee() {}", "fn c() {}", "x", "y", "z"];
        let got = nearest_lines(&lines, "fn be() {}");
        assert!(got.contains(">    2| fn bee() {}"), "{got}");
        assert!(got.contains("    4| x"));
        assert!(!got.contains("| y"));
    }
}
