//! HTML as compact text for an agent (`http_request`'s `render`): what a page says and what can
//! be done on it, in few tokens. Kept: the title, headings (`#`), paragraphs, links with their
//! URLs (`[text](url)`), lists, tables (`| a | b |`), forms and their inputs, images' alt text,
//! preformatted blocks. Dropped: scripts, styles, templates, SVG, comments, classes and every
//! other attribute. Parsed by html5ever (through `scraper`), the parser browsers' rules follow.

use scraper::{ElementRef, Html, Node};

/// Elements whose content is never text for a reader.
const SKIPPED: &[&str] = &[
    "script", "style", "noscript", "template", "svg", "head", "iframe", "object", "canvas",
];
/// Elements that start and end a block.
const BLOCKS: &[&str] = &[
    "p",
    "div",
    "section",
    "article",
    "header",
    "footer",
    "main",
    "nav",
    "aside",
    "blockquote",
    "figure",
    "figcaption",
    "dl",
    "dt",
    "dd",
    "address",
    "details",
    "summary",
    "fieldset",
    "legend",
    "body",
    "html",
];

/// `html` as text; relative links are made absolute against `base` (the page's URL).
pub fn html_to_text(html: &str, base: &str) -> String {
    let document = Html::parse_document(html);
    let mut out = Writer {
        text: String::new(),
        base: base.to_owned(),
        lists: Vec::new(),
        pre: 0,
    };
    let title = document
        .root_element()
        .descendants()
        .filter_map(ElementRef::wrap)
        .find(|e| e.value().name() == "title")
        .map(|t| collapse(&t.text().collect::<String>()));
    if let Some(title) = title.filter(|t| !t.is_empty()) {
        out.text.push_str(&format!("Title: {title}\n\n"));
    }
    out.children(document.root_element());
    tidy(&out.text)
}

struct Writer {
    text: String,
    base: String,
    /// The lists being written: `None` unordered, `Some(n)` the next number.
    lists: Vec<Option<usize>>,
    /// Inside `<pre>`: whitespace kept.
    pre: usize,
}

/// Runs of whitespace as one space.
fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Blank lines at most one in a row, no trailing spaces, no blank start or end.
fn tidy(text: &str) -> String {
    let mut out = String::new();
    let mut blank = 0;
    for line in text.lines().map(str::trim_end) {
        if line.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(line);
    }
    if !out.is_empty() {
        out.push('\n');
    }
    out
}

/// `href` made absolute against the page's URL (scheme-relative, host-relative, relative).
fn absolute(base: &str, href: &str) -> String {
    let href = href.trim();
    if href.contains("://") || href.starts_with("mailto:") || href.starts_with('#') {
        return href.to_owned();
    }
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let scheme = &base[..scheme_end.saturating_sub(3)];
    if let Some(rest) = href.strip_prefix("//") {
        return format!("{scheme}://{rest}");
    }
    let after = &base[scheme_end..];
    let host_end = after.find('/').map_or(base.len(), |i| scheme_end + i);
    let origin = &base[..host_end];
    if href.starts_with('/') {
        return format!("{origin}{href}");
    }
    let path = base[host_end..].split(['?', '#']).next().unwrap_or("");
    let dir = path.rfind('/').map_or("/", |i| &path[..=i]);
    format!("{origin}{dir}{href}")
}

impl Writer {
    fn block(&mut self) {
        if !self.text.ends_with('\n') && !self.text.is_empty() {
            self.text.push('\n');
        }
    }

    fn paragraph(&mut self) {
        self.block();
        if !self.text.ends_with("\n\n") && !self.text.is_empty() {
            self.text.push('\n');
        }
    }

    fn words(&mut self, text: &str) {
        if self.pre > 0 {
            self.text.push_str(text);
            return;
        }
        let collapsed = collapse(text);
        if collapsed.is_empty() {
            if text.chars().next().is_some_and(char::is_whitespace)
                && !self.text.ends_with([' ', '\n'])
                && !self.text.is_empty()
            {
                self.text.push(' ');
            }
            return;
        }
        let space_before = text.starts_with(char::is_whitespace);
        if space_before && !self.text.ends_with([' ', '\n', '(', '[']) && !self.text.is_empty() {
            self.text.push(' ');
        }
        self.text.push_str(&collapsed);
        if text.ends_with(char::is_whitespace) {
            self.text.push(' ');
        }
    }

    fn children(&mut self, element: ElementRef<'_>) {
        for child in element.children() {
            match child.value() {
                Node::Text(text) => self.words(text),
                Node::Element(_) => {
                    if let Some(child) = ElementRef::wrap(child) {
                        self.element(child);
                    }
                }
                _ => {}
            }
        }
    }

    /// The text inside an element, on one line.
    fn inline_text(element: ElementRef<'_>) -> String {
        collapse(&element.text().collect::<String>())
    }

    fn attr<'a>(element: &'a ElementRef<'_>, name: &str) -> Option<&'a str> {
        element.value().attr(name).filter(|v| !v.trim().is_empty())
    }

    /// `[kind name=... type=... value=...]` for a form control.
    fn control(element: &ElementRef<'_>, kind: &str, keys: &[&str]) -> String {
        let mut out = format!("[{kind}");
        for key in keys {
            if let Some(value) = Self::attr(element, key) {
                out.push_str(&format!(" {key}={}", collapse(value)));
            }
        }
        out
    }

    fn element(&mut self, element: ElementRef<'_>) {
        let name = element.value().name();
        if SKIPPED.contains(&name) {
            return;
        }
        match name {
            "h1" | "h2" | "h3" | "h4" | "h5" | "h6" => {
                let level = usize::from(name.as_bytes()[1] - b'0');
                self.paragraph();
                self.text.push_str(&"#".repeat(level));
                self.text.push(' ');
                self.text.push_str(&Self::inline_text(element));
                self.paragraph();
            }
            "br" => self.text.push('\n'),
            "hr" => {
                self.block();
                self.text.push_str("---\n");
            }
            "pre" => {
                self.paragraph();
                self.pre += 1;
                self.text.push_str("```\n");
                self.children(element);
                self.block();
                self.text.push_str("```\n");
                self.pre -= 1;
                self.paragraph();
            }
            "a" => {
                let text = Self::inline_text(element);
                match Self::attr(&element, "href") {
                    Some(href) if !href.starts_with("javascript:") => {
                        let url = absolute(&self.base, href);
                        let label = if text.is_empty() { url.clone() } else { text };
                        self.words(&format!(" [{label}]({url})"));
                    }
                    _ => self.words(&format!(" {text}")),
                }
            }
            "img" => {
                if let Some(alt) = Self::attr(&element, "alt") {
                    self.words(&format!(" [image: {}]", collapse(alt)));
                }
            }
            "ul" | "ol" => {
                self.block();
                self.lists.push((name == "ol").then_some(1));
                self.children(element);
                self.lists.pop();
                self.block();
            }
            "li" => {
                self.block();
                let depth = self.lists.len().saturating_sub(1);
                let marker = match self.lists.last_mut() {
                    Some(Some(n)) => {
                        let marker = format!("{n}. ");
                        *n += 1;
                        marker
                    }
                    _ => "- ".to_owned(),
                };
                self.text.push_str(&"  ".repeat(depth));
                self.text.push_str(&marker);
                self.children(element);
                self.block();
            }
            "table" => {
                self.paragraph();
                self.table(element);
                self.paragraph();
            }
            "form" => {
                self.paragraph();
                let mut head = Self::control(&element, "form", &["method", "action"]);
                if let Some(action) = Self::attr(&element, "action") {
                    head = head.replace(
                        &format!("action={}", collapse(action)),
                        &format!("action={}", absolute(&self.base, action)),
                    );
                }
                self.text.push_str(&head);
                self.text.push_str("]\n");
                self.children(element);
                self.block();
                self.text.push_str("[/form]\n");
            }
            "input" => {
                if Self::attr(&element, "type") == Some("hidden") {
                    return;
                }
                let control =
                    Self::control(&element, "input", &["type", "name", "value", "placeholder"]);
                self.words(&format!(" {control}]"));
            }
            "textarea" => {
                let mut control = Self::control(&element, "textarea", &["name", "placeholder"]);
                let text = Self::inline_text(element);
                if !text.is_empty() {
                    control.push_str(&format!(": {text}"));
                }
                self.words(&format!(" {control}]"));
            }
            "select" => {
                let mut control = Self::control(&element, "select", &["name"]);
                let options: Vec<String> = element
                    .descendants()
                    .filter_map(ElementRef::wrap)
                    .filter(|e| e.value().name() == "option")
                    .map(|o| {
                        let text = Self::inline_text(o);
                        if o.value().attr("selected").is_some() {
                            format!("{text}*")
                        } else {
                            text
                        }
                    })
                    .collect();
                if !options.is_empty() {
                    control.push_str(&format!(": {}", options.join(" | ")));
                }
                self.words(&format!(" {control}]"));
            }
            "button" => {
                self.words(&format!(" [button: {}]", Self::inline_text(element)));
            }
            "label" => {
                self.words(" ");
                self.children(element);
            }
            _ if BLOCKS.contains(&name) => {
                self.block();
                self.children(element);
                self.block();
            }
            _ => self.children(element),
        }
    }

    /// Rows as `| a | b |`, a rule under a header row.
    fn table(&mut self, table: ElementRef<'_>) {
        let rows: Vec<ElementRef<'_>> = table
            .descendants()
            .filter_map(ElementRef::wrap)
            .filter(|e| e.value().name() == "tr")
            .collect();
        for (i, row) in rows.iter().enumerate() {
            let cells: Vec<ElementRef<'_>> = row
                .children()
                .filter_map(ElementRef::wrap)
                .filter(|e| matches!(e.value().name(), "td" | "th"))
                .collect();
            if cells.is_empty() {
                continue;
            }
            let texts: Vec<String> = cells
                .iter()
                .map(|c| Self::inline_text(*c).replace('|', "\\|"))
                .collect();
            self.text.push_str(&format!("| {} |\n", texts.join(" | ")));
            let header = cells.iter().all(|c| c.value().name() == "th");
            if i == 0 && header {
                self.text
                    .push_str(&format!("|{}\n", " --- |".repeat(cells.len())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn a_page_keeps_what_a_reader_and_an_agent_need() {
        let html = r#"<!doctype html><html><head><title>Pkg  index</title>
            <style>.x{color:red}</style><script>alert(1)</script></head>
            <body class="c"><nav><a href="/">Home</a> | <a href="docs/intro.html">Intro</a></nav>
            <h1 class="big">Welcome</h1><p>Some <b>bold</b> text,
            and <a href="https://other.example/x?y=1">a link</a>.</p>
            <ul><li>one</li><li>two<ol><li>a</li><li>b</li></ol></li></ul>
            <table><tr><th>Name</th><th>Size</th></tr><tr><td>a|b</td><td>1 KB</td></tr></table>
            <form method="post" action="/search"><label>Query <input type="text" name="q" placeholder="words"></label>
            <input type="hidden" name="csrf" value="s3cret"><select name="kind"><option>all</option><option selected>docs</option></select>
            <textarea name="note">hi</textarea><button>Go</button></form>
            <img src="x.png" alt="A chart"><pre>  keep
    this</pre><noscript>enable js</noscript></body></html>"#;
        let text = html_to_text(html, "https://site.example/pkg/index.html");
        assert_eq!(
            text,
            "Title: Pkg index\n\n\
             [Home](https://site.example/) | [Intro](https://site.example/pkg/docs/intro.html)\n\n\
             # Welcome\n\n\
             Some bold text, and [a link](https://other.example/x?y=1).\n\
             - one\n\
             - two\n\
             \x20\x201. a\n\
             \x20\x202. b\n\n\
             | Name | Size |\n\
             | --- | --- |\n\
             | a\\|b | 1 KB |\n\n\
             [form method=post action=https://site.example/search]\n\
             Query [input type=text name=q placeholder=words] [select name=kind: all | docs*] [textarea name=note: hi] [button: Go]\n\
             [/form]\n\
             [image: A chart]\n\n\
             ```\n  keep\n    this\n```\n"
        );
        for gone in ["alert", "color:red", "enable js", "s3cret", "class"] {
            assert!(!text.contains(gone), "{gone}");
        }
    }

    #[test]
    fn relative_links_resolve_against_the_page() {
        let base = "http://h.test:8080/a/b/page?q=1";
        assert_eq!(absolute(base, "c.html"), "http://h.test:8080/a/b/c.html");
        assert_eq!(absolute(base, "/root"), "http://h.test:8080/root");
        assert_eq!(absolute(base, "//cdn.test/x"), "http://cdn.test/x");
        assert_eq!(absolute(base, "https://x.test/"), "https://x.test/");
        assert_eq!(absolute("http://h.test", "x"), "http://h.test/x");
    }
}
