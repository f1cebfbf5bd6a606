//! The message of an uncaught exception, in CPython's words where RustPython words it its own
//! way (issue 28, item 3). Each expected text is CPython 3.14's: where 3.11 words it otherwise
//! (the dict key, `list.index`, the math domain errors), a comment says so. The runtime
//! translates at the boundary only: a script that catches the exception reads RustPython's
//! text, which the last tests pin down.

use paddock_tests::run_script;
use pretty_assertions::assert_eq;
use serde_json::{Value, json};

fn run(code: &str) -> Value {
    run_script(code, &["--timeout", "20"]).json()
}

/// The `error` of a script that fails: `Type: message (line N)`.
fn error_of(code: &str) -> Value {
    let v = run(code);
    assert_eq!(
        (&v["ok"], &v["error_code"]),
        (&json!(false), &json!("codemode:script_error")),
        "{v}"
    );
    v["error"].clone()
}

#[test]
fn a_builtin_of_one_argument_takes_exactly_one() {
    // RustPython: "len expected 1 argument, got 2".
    assert_eq!(
        error_of("len(1, 2)"),
        json!("TypeError: len() takes exactly one argument (2 given) (line 1)")
    );
    assert_eq!(
        error_of("import math\nmath.sqrt()"),
        json!("TypeError: math.sqrt() takes exactly one argument (0 given) (line 2)")
    );
    // Functions CPython checks with _PyArg_CheckPositional keep the words both use.
    assert_eq!(
        error_of("sorted()"),
        json!("TypeError: sorted expected 1 argument, got 0 (line 1)")
    );
}

#[test]
fn a_method_of_no_arguments_names_its_type() {
    // RustPython: "keys expected 0 arguments, got 1".
    assert_eq!(
        error_of("{}.keys(1)"),
        json!("TypeError: dict.keys() takes no arguments (1 given) (line 1)")
    );
    assert_eq!(
        error_of("name = 'ada'\nname.upper(1)"),
        json!("TypeError: str.upper() takes no arguments (1 given) (line 2)")
    );
}

#[test]
fn a_method_of_one_argument_names_its_type() {
    // RustPython: "append expected 1 argument, got 0".
    assert_eq!(
        error_of("[].append()"),
        json!("TypeError: list.append() takes exactly one argument (0 given) (line 1)")
    );
    assert_eq!(
        error_of("def f(rows):\n    rows.count()\nf((1, 2))"),
        json!("TypeError: tuple.count() takes exactly one argument (0 given) (line 2)")
    );
}

#[test]
fn a_keyword_to_a_function_that_takes_none() {
    // RustPython: "keys() got an unexpected keyword argument 'x'", and for list.count the
    // count of its positional arguments.
    assert_eq!(
        error_of("{}.keys(x=2)"),
        json!("TypeError: dict.keys() takes no keyword arguments (line 1)")
    );
    assert_eq!(
        error_of("[].count(x=2)"),
        json!("TypeError: list.count() takes no keyword arguments (line 1)")
    );
    // A function of the script's keeps its words, which are CPython's.
    assert_eq!(
        error_of("def keys():\n    pass\nkeys(x=2)"),
        json!("TypeError: keys() got an unexpected keyword argument 'x' (line 3)")
    );
}

#[test]
fn an_unhashable_dict_key_is_named_as_a_dict_key() {
    // RustPython (and CPython up to 3.13): "unhashable type: 'list'".
    assert_eq!(
        error_of("d = {}\nd[[1, 2]] = 3"),
        json!("TypeError: cannot use 'list' as a dict key (unhashable type: 'list') (line 2)")
    );
    // The key is the tuple; what cannot be hashed is the list inside it.
    assert_eq!(
        error_of("key = ('a', [1])\ncounts = {key: 1}"),
        json!("TypeError: cannot use 'tuple' as a dict key (unhashable type: 'list') (line 2)")
    );
}

#[test]
fn an_unhashable_set_element_or_hash_keeps_its_words() {
    // RustPython already words a set element as CPython 3.14 does; hash() says no more.
    assert_eq!(
        error_of("{[1]}"),
        json!("TypeError: cannot use 'list' as a set element (unhashable type: 'list') (line 1)")
    );
    assert_eq!(
        error_of("hash([])"),
        json!("TypeError: unhashable type: 'list' (line 1)")
    );
}

#[test]
fn list_index_of_a_missing_value() {
    // RustPython: "'3' is not in list"; CPython 3.11: "3 is not in list".
    assert_eq!(
        error_of("[1, 2].index(3)"),
        json!("ValueError: list.index(x): x not in list (line 1)")
    );
}

#[test]
fn list_remove_of_a_missing_value() {
    // RustPython: "'3' is not in list".
    assert_eq!(
        error_of("xs = [1, 2]\nxs.remove(3)"),
        json!("ValueError: list.remove(x): x not in list (line 2)")
    );
}

#[test]
fn a_local_read_before_assignment() {
    // RustPython: "local variable 'x' referenced before assignment" (CPython before 3.11).
    assert_eq!(
        error_of("def f():\n    print(x)\n    x = 1\nf()"),
        json!(
            "UnboundLocalError: cannot access local variable 'x' where it is not associated \
             with a value (line 2)"
        )
    );
}

#[test]
fn a_list_plus_something_else() {
    // RustPython: "Cannot add list and int"; for a tuple it quotes with ' where CPython uses ".
    assert_eq!(
        error_of("[1] + 1"),
        json!("TypeError: can only concatenate list (not \"int\") to list (line 1)")
    );
    assert_eq!(
        error_of("(1,) + [2]"),
        json!("TypeError: can only concatenate tuple (not \"list\") to tuple (line 1)")
    );
}

#[test]
fn a_keyword_given_twice() {
    // RustPython already says what CPython says, `__main__.` included: CPython names the
    // function by _PyObject_FunctionStr (module and qualified name) when merging **kwargs.
    assert_eq!(
        error_of("def f(x):\n    pass\nf(x=1, **{'x': 2})"),
        json!("TypeError: __main__.f() got multiple values for keyword argument 'x' (line 3)")
    );
    assert_eq!(
        error_of("def f(x):\n    pass\nf(1, x=2)"),
        json!("TypeError: f() got multiple values for argument 'x' (line 3)")
    );
}

#[test]
fn raising_something_not_an_exception() {
    // RustPython: "exceptions must be classes or instances deriving from BaseException, not int".
    assert_eq!(
        error_of("raise 1"),
        json!("TypeError: exceptions must derive from BaseException (line 1)")
    );
}

#[test]
fn math_domain_errors_name_the_domain_and_the_argument() {
    // RustPython says "math domain error" for these three (so does CPython up to 3.13); the
    // argument is read from the failing line: a literal or a name.
    assert_eq!(
        error_of("import math\nx = 0.5\nmath.acosh(x)"),
        json!("ValueError: expected argument value not less than 1, got 0.5 (line 3)")
    );
    assert_eq!(
        error_of("import math\nmath.log1p(-2)"),
        json!("ValueError: expected argument value > -1, got -2.0 (line 2)")
    );
    assert_eq!(
        error_of("from math import lgamma\nlgamma(0)"),
        json!("ValueError: expected a noninteger or positive integer, got 0.0 (line 2)")
    );
    // Where CPython 3.14 itself still says "math domain error", so does Paddock.
    assert_eq!(
        error_of("import math\nmath.pow(0, -1)"),
        json!("ValueError: math domain error (line 2)")
    );
}

#[test]
fn math_messages_print_the_argument_as_repr_does() {
    // RustPython prints the float with Rust's Display: "got -100000000000000000000.0".
    assert_eq!(
        error_of("import math\nmath.sqrt(-1e20)"),
        json!("ValueError: expected a nonnegative input, got -1e+20 (line 2)")
    );
    assert_eq!(
        error_of("import math\nmath.asin(1e20)"),
        json!("ValueError: expected a number in range from -1 up to 1, got 1e+20 (line 2)")
    );
    assert_eq!(
        error_of("import math\nmath.log(-1e-300)"),
        json!("ValueError: expected a positive input, got -1e-300 (line 2)")
    );
    // RustPython checks the base first, as a float ("got -10.0"); CPython the argument first,
    // naming no value for an int.
    assert_eq!(
        error_of("import math\nmath.log(10, -10)"),
        json!("ValueError: expected a positive input (line 2)")
    );
}

#[test]
fn an_invalid_format_specifier_names_it_and_the_type() {
    // RustPython: "Invalid format specifier".
    assert_eq!(
        error_of("format(1, 'xyz')"),
        json!("ValueError: Invalid format specifier 'xyz' for object of type 'int' (line 1)")
    );
    assert_eq!(
        error_of("price = 3.5\nprint(f'{price:xyz}')"),
        json!("ValueError: Invalid format specifier 'xyz' for object of type 'float' (line 2)")
    );
    assert_eq!(
        error_of("'{:xyz}'.format('s')"),
        json!("ValueError: Invalid format specifier 'xyz' for object of type 'str' (line 1)")
    );
}

#[test]
fn recursion_too_deep() {
    // RustPython: "maximum recursion depth exceeded " (a trailing space).
    assert_eq!(
        error_of("def f():\n    f()\nf()"),
        json!("RecursionError: maximum recursion depth exceeded (line 2)")
    );
}

#[test]
fn a_script_that_catches_the_exception_reads_rustpythons_text() {
    // The message is made inside the VM; only the report of an uncaught one is translated.
    let v = run("try:\n    len(1, 2)\nexcept TypeError as e:\n    m = str(e)\nm");
    assert_eq!(v["result"], json!("len expected 1 argument, got 2"), "{v}");
}

#[test]
fn a_message_the_script_raises_itself_is_kept() {
    assert_eq!(
        error_of("raise ValueError(\"'3' is not in list\")"),
        json!("ValueError: '3' is not in list (line 1)")
    );
}
