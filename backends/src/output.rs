//! Capping text to `max_output_chars` while keeping its start and its end.

/// Accumulates streamed text; keeps everything up to the cap, then the start and a rolling end.
#[derive(Debug, Clone)]
pub struct CappedText {
    cap: usize,
    head: String,
    head_chars: usize,
    tail: String,
    tail_chars: usize,
    total_chars: usize,
}

impl CappedText {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            head: String::new(),
            head_chars: 0,
            tail: String::new(),
            tail_chars: 0,
            total_chars: 0,
        }
    }

    pub fn total_chars(&self) -> usize {
        self.total_chars
    }

    pub fn push(&mut self, text: &str) {
        let mut rest = text;
        if self.head_chars < self.cap {
            let room = self.cap - self.head_chars;
            let split = rest.char_indices().nth(room).map_or(rest.len(), |(i, _)| i);
            let taken = &rest[..split];
            let n = taken.chars().count();
            self.head.push_str(taken);
            self.head_chars += n;
            self.total_chars += n;
            rest = &rest[split..];
        }
        if rest.is_empty() {
            return;
        }
        let n = rest.chars().count();
        self.total_chars += n;
        self.tail.push_str(rest);
        self.tail_chars += n;
        // Keep at most `cap` characters of tail, trimming in batches.
        if self.tail_chars > self.cap.saturating_mul(2).max(1024) {
            let drop = self.tail_chars - self.cap;
            let cut = self
                .tail
                .char_indices()
                .nth(drop)
                .map_or(self.tail.len(), |(i, _)| i);
            self.tail.drain(..cut);
            self.tail_chars -= drop;
        }
    }

    /// The text, or its start and end around a marker saying how much was omitted.
    pub fn render(&self) -> String {
        if self.total_chars <= self.cap {
            return self.head.clone();
        }
        let keep_start = self.cap / 2;
        let keep_end = self.cap - keep_start;
        let start: String = self.head.chars().take(keep_start).collect();
        // The end is the last `keep_end` characters of everything after the start.
        let after_start = self.head.chars().skip(keep_start).chain(self.tail.chars());
        let after_len = (self.head_chars - keep_start.min(self.head_chars)) + self.tail_chars;
        let end: String = after_start
            .skip(after_len.saturating_sub(keep_end))
            .collect();
        let omitted = self.total_chars - keep_start - end.chars().count();
        format!("{start}\n…[{omitted} characters omitted]…\n{end}")
    }
}

/// Caps one string the same way.
pub fn cap_text(text: &str, cap: usize) -> String {
    let mut capped = CappedText::new(cap);
    capped.push(text);
    capped.render()
}

/// Bytes in, capped text out: UTF-8 decoded incrementally, invalid bytes replaced.
pub struct Utf8Capped {
    cap: usize,
    pending: Vec<u8>,
    text: CappedText,
}

impl Utf8Capped {
    pub fn new(cap: usize) -> Self {
        Self {
            cap,
            pending: Vec::new(),
            text: CappedText::new(cap),
        }
    }

    /// Forgets everything pushed so far (a transport retrying a command).
    pub fn clear(&mut self) {
        *self = Self::new(self.cap);
    }

    /// What was pushed so far, without finishing.
    pub fn peek(&self) -> String {
        self.text.render()
    }

    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        loop {
            match std::str::from_utf8(&self.pending) {
                Ok(s) => {
                    self.text.push(s);
                    self.pending.clear();
                    return;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    // SAFETY-free: the prefix up to `valid` is valid UTF-8 by definition.
                    self.text
                        .push(&String::from_utf8_lossy(&self.pending[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            self.text.push("\u{FFFD}");
                            self.pending.drain(..valid + bad);
                        }
                        None => {
                            // An incomplete sequence at the end: wait for more bytes.
                            self.pending.drain(..valid);
                            return;
                        }
                    }
                }
            }
        }
    }

    pub fn total_chars(&self) -> usize {
        self.text.total_chars()
    }

    pub fn finish(&mut self) -> String {
        if !self.pending.is_empty() {
            let rest = String::from_utf8_lossy(&self.pending).into_owned();
            self.text.push(&rest);
            self.pending.clear();
        }
        self.text.render()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn short_text_is_untouched() {
        let mut t = CappedText::new(10);
        t.push("hello");
        t.push("世界");
        assert_eq!(t.render(), "hello世界");
    }

    #[test]
    fn long_text_keeps_start_and_end_with_count() {
        let text: String = (0..1000)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let mut t = CappedText::new(100);
        for chunk in text.as_bytes().chunks(7) {
            t.push(std::str::from_utf8(chunk).unwrap());
        }
        let out = t.render();
        assert!(out.starts_with(&text[..50]), "{out}");
        assert!(out.ends_with(&text[950..]), "{out}");
        assert!(out.contains("…[900 characters omitted]…"), "{out}");
    }

    #[test]
    fn just_over_the_cap_takes_the_end_from_the_head() {
        let text = "0123456789abc";
        let out = cap_text(text, 10);
        assert!(out.starts_with("01234\n"), "{out}");
        assert!(out.ends_with("\n89abc"), "{out}");
        assert!(out.contains("[3 characters omitted]"), "{out}");
    }

    #[test]
    fn multibyte_boundaries_are_respected() {
        let text = "é".repeat(5000);
        let out = cap_text(&text, 101);
        assert!(out.contains("[4899 characters omitted]"), "{out}");
    }
}
