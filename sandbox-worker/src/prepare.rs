//! Script preparation, done in Rust on the ruff AST before the script reaches the interpreter.
//!
//! Python has no top-level `return` and no "value of the last expression" for modules. Instead of
//! wrapping the script in a function (which would turn its globals into locals), the source is
//! rewritten in place:
//! - a top-level `return X` (outside any `def`/`class`) becomes `raise __paddock_return__((X))`;
//!   the runtime catches that `BaseException` subclass and takes `X` as the result;
//! - a final expression statement `E` becomes `__paddock_result__ = (E)`.
//!
//! Only byte ranges of existing statements are replaced, so line numbers in tracebacks stay
//! those of the script the agent wrote. Syntax errors are reported here with line and column,
//! without spending a sandbox child.

use ruff_python_ast::statement_visitor::{StatementVisitor, walk_stmt};
use ruff_python_ast::{Expr, Stmt};
use ruff_text_size::{Ranged, TextRange};

/// The name the runtime binds to its return sentinel.
pub const RETURN_SENTINEL: &str = "__paddock_return__";
/// The global the final expression's value is stored in.
pub const RESULT_GLOBAL: &str = "__paddock_result__";

/// A script that failed to parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("SyntaxError: {message} (line {line}, column {column})")]
pub struct ScriptSyntaxError {
    pub message: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column, in characters.
    pub column: u32,
}

/// A script ready for the interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparedScript {
    pub source: String,
    /// The script ends on an expression whose value is the result.
    pub has_final_expression: bool,
    /// Number of top-level `return` statements rewritten.
    pub top_level_returns: usize,
}

/// Parses and rewrites a script. See the module documentation.
pub fn prepare_script(source: &str) -> Result<PreparedScript, ScriptSyntaxError> {
    let parsed = ruff_python_parser::parse_module(source).map_err(|err| {
        let (line, column) = line_and_column(source, err.location.start().to_usize());
        ScriptSyntaxError {
            message: err.error.to_string(),
            line,
            column,
        }
    })?;
    let body = &parsed.syntax().body;

    let mut finder = TopLevelReturns::default();
    finder.visit_body(body);

    let mut edits: Vec<(TextRange, String)> = Vec::new();
    for (range, value) in finder.returns {
        let value = match value {
            Some(value) => format!("({})", &source[value.range()]),
            None => "None".to_owned(),
        };
        edits.push((range, format!("raise {RETURN_SENTINEL}({value})")));
    }
    let mut has_final_expression = false;
    if let Some(Stmt::Expr(last)) = body.last() {
        has_final_expression = true;
        let value = &source[last.value.range()];
        edits.push((last.range, format!("{RESULT_GLOBAL} = ({value})")));
    }
    let top_level_returns = edits.len() - usize::from(has_final_expression);

    // Apply back to front so earlier ranges stay valid.
    edits.sort_by_key(|(range, _)| std::cmp::Reverse(range.start()));
    let mut rewritten = source.to_owned();
    for (range, text) in edits {
        rewritten.replace_range(range.start().to_usize()..range.end().to_usize(), &text);
    }
    Ok(PreparedScript {
        source: rewritten,
        has_final_expression,
        top_level_returns,
    })
}

/// Collects `return` statements that are not inside a function or class body.
#[derive(Default)]
struct TopLevelReturns<'a> {
    returns: Vec<(TextRange, Option<&'a Expr>)>,
}

impl<'a> StatementVisitor<'a> for TopLevelReturns<'a> {
    fn visit_stmt(&mut self, stmt: &'a Stmt) {
        match stmt {
            // A `return` in a def or class body belongs to that function.
            Stmt::FunctionDef(_) | Stmt::ClassDef(_) => {}
            Stmt::Return(ret) => self.returns.push((ret.range, ret.value.as_deref())),
            _ => walk_stmt(self, stmt),
        }
    }
}

/// 1-based line and character column of a byte offset.
fn line_and_column(source: &str, offset: usize) -> (u32, u32) {
    let offset = offset.min(source.len());
    let before = source.get(..offset).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    (
        u32::try_from(line).unwrap_or(u32::MAX),
        u32::try_from(column).unwrap_or(u32::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn src(script: &str) -> String {
        prepare_script(script).unwrap().source
    }

    #[test]
    fn final_expression_becomes_the_result() {
        assert_eq!(
            src("x = 1\nx + 1\n"),
            "x = 1\n__paddock_result__ = (x + 1)\n"
        );
        assert!(prepare_script("x + 1").unwrap().has_final_expression);
    }

    #[test]
    fn final_expression_after_semicolon_and_multiline() {
        assert_eq!(src("a = 2; a * 3"), "a = 2; __paddock_result__ = (a * 3)");
        assert_eq!(
            src("{\n  'a': 1,\n  'b': 2,\n}\n"),
            "__paddock_result__ = ({\n  'a': 1,\n  'b': 2,\n})\n"
        );
    }

    #[test]
    fn assignment_as_last_statement_gives_no_final_expression() {
        let prepared = prepare_script("x = 5").unwrap();
        assert!(!prepared.has_final_expression);
        assert_eq!(prepared.source, "x = 5");
    }

    #[test]
    fn top_level_return_is_rewritten_everywhere_outside_functions() {
        let script = "if x:\n    return 1, 2\nfor i in y:\n    try:\n        return\n    finally:\n        pass\n";
        assert_eq!(
            src(script),
            "if x:\n    raise __paddock_return__((1, 2))\nfor i in y:\n    try:\n        raise __paddock_return__(None)\n    finally:\n        pass\n"
        );
    }

    #[test]
    fn returns_inside_functions_and_classes_are_untouched() {
        let script = "def f():\n    return 1\nclass C:\n    def m(self):\n        return 2\nasync def g():\n    return 3\n";
        let prepared = prepare_script(script).unwrap();
        assert_eq!(prepared.source, script);
        assert_eq!(prepared.top_level_returns, 0);
    }

    #[test]
    fn top_level_await_is_left_to_the_compiler() {
        assert_eq!(
            src("r = await tools.wait(milliseconds=1)\nr"),
            "r = await tools.wait(milliseconds=1)\n__paddock_result__ = (r)"
        );
        assert_eq!(
            src("return await f()"),
            "raise __paddock_return__((await f()))"
        );
    }

    #[test]
    fn syntax_errors_carry_line_and_column() {
        let err = prepare_script("x = 1\ny = (\n").unwrap_err();
        assert_eq!(err.line, 3);
        let err = prepare_script("a = 1\nb = = 2\n").unwrap_err();
        assert_eq!((err.line, err.column), (2, 5));
        assert!(err.to_string().starts_with("SyntaxError: "), "{err}");
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let err = prepare_script("s = 'é' +\n").unwrap_err();
        assert_eq!(err.line, 1);
        assert!(err.column >= 9, "{err:?}");
    }

    #[test]
    fn return_range_keeps_following_lines_in_place() {
        let out = src("return 1\nprint('after')\n");
        assert_eq!(
            out.lines().nth(1),
            Some("__paddock_result__ = (print('after'))")
        );
    }
}
