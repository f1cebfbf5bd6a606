//! Property tests of tool arguments: every built-in tool, called through the engine's public
//! dispatch (`Engine::call_tool`) with arbitrary JSON, answers a result or a `ToolError` with a
//! documented code, never a panic; an argument refused is `tool:invalid_arguments`, and the
//! message names the tool and the field.
//!
//! Nothing runs: the engine lives in a child process of this test binary with its own
//! `PADDOCK_HOME` (a fresh directory), code mode is off, and a pre-call hook (the last check
//! before a tool runs) stops every tool but `wait` (up to 20 ms), `current_datetime` and
//! `process` (which finds no process in the fresh home), answering `test:would_run`. So
//! arguments that pass validation never reach a shell, Python or a backend.
//!
//! - arbitrary `serde_json::Value` trees, for every tool and for `run_tools_script`;
//! - near-valid arguments built from each tool's own schema: the right keys with values of the
//!   wrong type (fractions for integers, values nested up to 200 deep), unknown keys, missing
//!   required keys, numbers past `minimum`/`maximum`, strings outside an enum, arguments that
//!   are not an object, arguments over the 4 MiB cap; these must be `tool:invalid_arguments`;
//! - arguments nested up to 2000 deep (past the 128 levels serde_json's parser allows);
//! - arguments the schema accepts (integers written as `2.0` and beyond i64 among them) give a
//!   result or a refusal that names the field;
//! - unknown tool names are `tool:not_found`, naming the tool.
//!
//! Known gaps these found are listed in `known_gap` and have `#[ignore]`d tests at the end.
//!
//! Cases per property: 256, or `PROPTEST_CASES`.

#![expect(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a failed test"
)]

use std::sync::Arc;
use std::time::Duration;

use paddock_engine::policy::Policy;
use paddock_engine::{Engine, EngineOptions, Registry, ToolError, ToolErrorKind};
use proptest::prelude::*;
use proptest::sample::{Index, select};
use proptest::test_runner::{TestCaseError, TestError, TestRunner};
use serde_json::{Map, Value, json};

#[path = "../../agent/tests/common/proptest_config.rs"]
mod proptest_config;
use proptest_config::config;

/// Set in the child process that holds the engine.
const CHILD: &str = "PADDOCK_PROPTEST_TOOL_ARGS_CHILD";

/// Tools that may run when their arguments pass the checks: they touch nothing outside the
/// fresh state directory. Every other tool is stopped by the pre-call hook.
const MAY_RUN: &[&str] = &["wait", "current_datetime", "process"];

/// The code the pre-call hook answers instead of running a tool.
const WOULD_RUN: &str = "test:would_run";

/// Runs `property` in a child process of this test binary whose `PADDOCK_HOME` is a fresh
/// directory (the engine reads it once, when it is built; setting it in this process would
/// race with the other tests' threads).
fn isolated(test: &str, property: fn(&Engine, &tokio::runtime::Runtime)) {
    if std::env::var_os(CHILD).is_some() {
        let Some(home) = std::env::var_os("PADDOCK_HOME") else {
            panic!("the parent sets PADDOCK_HOME");
        };
        assert!(
            std::path::Path::new(&home).join(".proptest-home").exists(),
            "PADDOCK_HOME is not the test's fresh directory"
        );
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let engine = runtime.block_on(async { engine() });
        property(&engine, &runtime);
        return;
    }
    let home = tempfile::tempdir().unwrap();
    std::fs::write(home.path().join(".proptest-home"), b"").unwrap();
    let output = std::process::Command::new(std::env::current_exe().unwrap())
        // `--include-ignored`: the child runs the test the parent runs, ignored or not.
        .args([
            test,
            "--exact",
            "--include-ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .env("PADDOCK_HOME", home.path())
        .env_remove("PADDOCK_POLICY")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && stdout.contains("test result: ok. 1 passed;"),
        "{test} failed in its child process ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The engine under test: built-in tools, the environment tools on the built-in policy's
/// backends, code mode off, and the hook that stops tools from running.
fn engine() -> Engine {
    let policy = Policy::parse(
        // Every toolset on (`all` includes the `sessions_admin` tools, off by default), so that
        // every registered tool's arguments are checked.
        "[codemode]\nenabled = false\n[approval]\nmode = \"deny\"\napprover = \"none\"\n\
         [toolsets]\npreset = \"all\"\n",
        "proptest.toml",
    )
    .unwrap();
    let mut registry = Registry::with_builtins();
    registry.add_pre_call_hook(Arc::new(|name, args, _ctx| {
        let long_wait = name == "wait"
            && args
                .get("milliseconds")
                .and_then(Value::as_f64)
                .is_some_and(|ms| ms > 20.0);
        if MAY_RUN.contains(&name) && !long_wait {
            Ok(())
        } else {
            Err(ToolError::denied(
                WOULD_RUN,
                format!("'{name}' passed the argument checks"),
            ))
        }
    }));
    Engine::with_options(
        policy,
        registry,
        Arc::default(),
        EngineOptions {
            session: Some("proptest".into()),
            backend: None,
            // The sandbox zygote and the process supervisors are this program re-executed; nothing
            // may start either here, so it is one that does not exist: any attempt fails.
            exe: Some("/nonexistent/paddock-proptest".into()),
        },
    )
    .unwrap()
}

/// Every tool a caller can name: the engine's own list (code mode included, even off).
fn tool_names(engine: &Engine) -> Vec<String> {
    let mut names: Vec<String> = engine
        .registry()
        .all_specs()
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.push("run_tools_script".into());
    names
}

fn schema_of(engine: &Engine, tool: &str) -> Value {
    engine
        .registry()
        .all_specs()
        .into_iter()
        .find(|s| s.name == tool)
        .map_or_else(
            || json!({"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]}),
            |s| s.input_schema,
        )
}

/// Calls `tool` and checks the answer: a result, or an error of a documented code whose message
/// says what was wrong. `invalid` says the arguments are known to be wrong (they must then be
/// refused as such, before any hook).
fn check_call(
    engine: &Engine,
    runtime: &tokio::runtime::Runtime,
    tool: &str,
    args: Value,
    invalid: bool,
) -> Result<(), TestCaseError> {
    let shown_args = short(&args);
    let answer = runtime.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), engine.call_tool(tool, args)).await
    });
    let Ok(answer) = answer else {
        return Err(TestCaseError::fail(format!(
            "{tool} {shown_args}: no answer in 10 s"
        )));
    };
    let err = match answer {
        Ok(value) => {
            prop_assert!(
                !invalid,
                "{} accepted invalid arguments {}: {}",
                tool,
                shown_args,
                value
            );
            prop_assert!(MAY_RUN.contains(&tool), "{} ran: {}", tool, value);
            return Ok(());
        }
        Err(err) => err,
    };
    let ToolError {
        kind,
        code,
        message,
    } = &err;
    prop_assert!(
        !message.trim().is_empty(),
        "{} {}: empty message",
        tool,
        shown_args
    );
    match code.as_str() {
        "tool:invalid_arguments" => {
            prop_assert_eq!(*kind, ToolErrorKind::InvalidArguments);
            if known_gap(tool, message) {
                return Ok(());
            }
            // `'process'`, or `process poll: ...` for a refusal of one action.
            let names_tool =
                message.contains(&format!("'{tool}'")) || message.starts_with(&format!("{tool} "));
            prop_assert!(
                names_tool,
                "{} {}: the message does not name the tool: {}",
                tool,
                shown_args,
                message
            );
            // "field `x`: ...", "arguments of 'tool' ...", or the message of one field
            // ("invalid arguments for 'current_datetime': format \"%%%\" is not ...").
            let (props, _) = properties(&schema_of(engine, tool));
            let names_field = message.contains("field `")
                || message.starts_with(&format!("arguments of '{tool}'"))
                || props
                    .iter()
                    .any(|(p, _)| message.contains(&format!("'{tool}': {p} ")));
            prop_assert!(
                names_field,
                "{} {}: the message names no field: {}",
                tool,
                shown_args,
                message
            );
        }
        WOULD_RUN => {
            prop_assert!(
                !invalid,
                "{} let invalid arguments through: {}",
                tool,
                shown_args
            );
        }
        // Valid arguments of a call that cannot be carried out: code mode is off.
        "tool:not_allowed" if tool == "run_tools_script" => {
            prop_assert!(!invalid, "{} {}: {}", tool, shown_args, message);
            prop_assert!(message.contains("code mode is disabled"), "{}", message);
        }
        _ => prop_assert!(
            false,
            "{} {}: undocumented answer {:?}",
            tool,
            shown_args,
            err
        ),
    }
    Ok(())
}

/// Refusals that name neither the tool nor the field, found by these properties and reported;
/// each has an `#[ignore]`d test at the end of this file that fails until it is fixed.
fn known_gap(tool: &str, message: &str) -> bool {
    // `process` with a `session_id` that names no process: the backend's own message.
    let unknown_process = tool == "process"
        && message.starts_with("no process '")
        && message.ends_with("' in this session");
    // Arguments the schema accepts and the tool's typed parsing refuses (`offset: 2.0`, an
    // integer over i64): serde names the value, not the field.
    let typed_parsing = message.starts_with(&format!("invalid arguments for '{tool}': invalid "))
        && !message.contains("field `");
    unknown_process || typed_parsing
}

/// At most 200 characters of `value`, for failure messages.
fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.len() > 200 {
        let cut: String = text.chars().take(200).collect();
        format!("{cut}... ({} bytes)", text.len())
    } else {
        text
    }
}

/// Runs `strategy` through `test`, panicking with the shrunk input on failure.
fn run<S: Strategy>(strategy: S, test: impl Fn(S::Value) -> Result<(), TestCaseError>) {
    let mut runner = TestRunner::new(config());
    match runner.run(&strategy, test) {
        Ok(()) => {}
        Err(TestError::Fail(why, input)) => panic!("{why}\nminimal failing input: {input:#?}"),
        Err(TestError::Abort(why)) => panic!("aborted: {why}"),
    }
}

// ---------------------------------------------------------------------------------------------
// Values

fn any_string() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<char>(), 0..16).prop_map(String::from_iter),
        "[a-z_%: -]{0,12}",
    ]
}

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        select(vec![
            json!(0),
            json!(-1),
            json!(1),
            json!(2.0),
            json!(-0.0),
            json!(0.5),
            json!(1e300),
            json!(-1e300),
            json!(u64::MAX),
            json!(i64::MIN),
            json!(60_000),
            json!(60_001),
            json!(3600),
            json!(3600.5),
        ]),
    ]
}

/// Keys: mostly the names tools use, sometimes anything.
fn object_key() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => select(vec![
            "command", "code", "milliseconds", "format", "action", "session_id", "data", "offset",
            "limit", "timeout", "workdir", "background", "pty", "notify_on_complete", "",
        ])
        .prop_map(str::to_owned),
        1 => any_string(),
    ]
}

/// Any JSON value, up to a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        any_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            proptest::collection::vec((object_key(), inner), 0..6)
                .prop_map(|kv| Value::Object(kv.into_iter().collect())),
        ]
    })
}

/// `depth` arrays or objects inside each other around `leaf`.
fn nested(depth: usize, objects: bool, leaf: Value) -> Value {
    // Built by moving, not with `json!` (which copies its argument: quadratic in `depth`).
    (0..depth).fold(leaf, |inner, _| {
        if objects {
            Value::Object(Map::from_iter([("x".to_owned(), inner)]))
        } else {
            Value::Array(vec![inner])
        }
    })
}

/// A value whose JSON type is none of `types` (the schema's).
fn wrong_type(types: Vec<String>) -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number(),
        number().prop_map(|n| match n.as_f64() {
            // A fractional number where an integer is expected.
            Some(f) if f.fract() == 0.0 => json!(f + 0.5),
            _ => n,
        }),
        any_string().prop_map(Value::String),
        proptest::collection::vec(number(), 0..3).prop_map(Value::Array),
        Just(json!({"nested": {"deeper": [1, 2, 3]}})),
        Just(json!({})),
        (1usize..200, any::<bool>()).prop_map(|(d, o)| nested(d, o, Value::Null)),
    ]
    .prop_filter("a value of another type", move |v| {
        !types.iter().any(|t| type_matches(t, v))
    })
}

fn type_matches(ty: &str, value: &Value) -> bool {
    match ty {
        "string" => value.is_string(),
        "number" => value.is_number(),
        "integer" => {
            value.is_i64() || value.is_u64() || value.as_f64().is_some_and(|f| f.fract() == 0.0)
        }
        "boolean" => value.is_boolean(),
        "array" => value.is_array(),
        "object" => value.is_object(),
        "null" => value.is_null(),
        _ => true,
    }
}

/// What a property of a schema accepts: its types, or its enum values.
fn property_types(schema: &Value) -> Vec<String> {
    match schema.get("type") {
        Some(Value::String(t)) => vec![t.clone()],
        Some(Value::Array(ts)) => ts
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_owned)
            .collect(),
        _ => Vec::new(),
    }
}

/// The properties of a tool's schema, by name, and its required ones.
fn properties(schema: &Value) -> (Vec<(String, Value)>, Vec<String>) {
    let props = schema
        .get("properties")
        .and_then(Value::as_object)
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default();
    let required = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| {
            r.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    (props, required)
}

/// A value the property accepts (so that the defect elsewhere is the only one).
fn valid_for(schema: &Value) -> BoxedStrategy<Value> {
    if let Some(options) = schema.get("enum").and_then(Value::as_array) {
        return select(options.clone()).boxed();
    }
    let min = schema.get("minimum").and_then(Value::as_f64).unwrap_or(0.0);
    let max = schema.get("maximum").and_then(Value::as_f64).unwrap_or(1e6);
    match property_types(schema).first().map(String::as_str) {
        Some("string") => any_string().prop_map(Value::String).boxed(),
        Some("boolean") => any::<bool>().prop_map(Value::Bool).boxed(),
        Some("integer") => ((min as i64)..=(max as i64).min(1 << 40))
            .prop_map(Value::from)
            .boxed(),
        // Small, so that a valid `wait` passes its hook.
        Some("number") => (min..=max.min(min + 20.0)).prop_map(Value::from).boxed(),
        _ => Just(Value::Null).boxed(),
    }
}

/// A value the property accepts, including the less usual forms JSON allows: an integer
/// written as a float (`2.0`), an integer beyond i64.
fn valid_for_wide(schema: &Value) -> BoxedStrategy<Value> {
    let is_integer = property_types(schema).iter().any(|t| t == "integer");
    if !is_integer || schema.get("enum").is_some() {
        return valid_for(schema);
    }
    let min = schema
        .get("minimum")
        .and_then(Value::as_f64)
        .unwrap_or(-1e6);
    let max = schema.get("maximum").and_then(Value::as_f64);
    let mut options = vec![
        valid_for(schema),
        ((min as i64).max(-(1 << 40))..=max.map_or(1 << 40, |m| m as i64))
            .prop_map(|n| json!(n as f64))
            .boxed(),
    ];
    if max.is_none() {
        options.push(
            ((i64::MAX as u64) + 1..=u64::MAX)
                .prop_map(Value::from)
                .boxed(),
        );
    }
    proptest::strategy::Union::new(options).boxed()
}

/// Arguments `schema` accepts: its required keys and some of the others, each with a valid
/// value.
fn valid_shape(schema: &Value) -> BoxedStrategy<Value> {
    let (props, required) = properties(schema);
    props
        .into_iter()
        .map(|(k, s)| {
            let value = valid_for_wide(&s).prop_map({
                let k = k.clone();
                move |v| (k.clone(), v)
            });
            if required.contains(&k) {
                value.prop_map(Some).boxed()
            } else {
                proptest::option::of(value).boxed()
            }
        })
        .collect::<Vec<_>>()
        .prop_map(|entries| Value::Object(entries.into_iter().flatten().collect()))
        .boxed()
}

/// What is wrong with a near-valid call.
#[derive(Debug, Clone)]
enum Defect {
    /// A known key with a value of another type.
    WrongType(Index),
    /// A key the schema does not have.
    UnknownKey(String),
    /// A required key left out.
    MissingRequired(Index),
    /// A number below `minimum` or above `maximum`.
    OutOfRange(Index, bool),
    /// A value that is not one of an enum's.
    NotInEnum(Index),
    /// Not an object at all.
    NotAnObject(Value),
    /// Arguments over the 4 MiB cap.
    Huge,
}

fn defect() -> impl Strategy<Value = Defect> {
    prop_oneof![
        4 => any::<Index>().prop_map(Defect::WrongType),
        2 => any_string()
            .prop_filter("not a known key", |k| !["command", "code", "milliseconds", "format",
                "action", "session_id", "data", "offset", "limit", "timeout", "workdir",
                "background", "pty", "notify_on_complete"].contains(&k.as_str()))
            .prop_map(Defect::UnknownKey),
        2 => any::<Index>().prop_map(Defect::MissingRequired),
        2 => (any::<Index>(), any::<bool>()).prop_map(|(i, above)| Defect::OutOfRange(i, above)),
        1 => any::<Index>().prop_map(Defect::NotInEnum),
        1 => prop_oneof![
            Just(Value::Null),
            number(),
            any_string().prop_map(Value::String),
            proptest::collection::vec(number(), 0..3).prop_map(Value::Array),
        ]
        .prop_map(Defect::NotAnObject),
        // Rare: each costs a few megabytes.
        1 => Just(Defect::Huge),
    ]
}

/// Near-valid arguments for `schema`: valid values for a subset of its keys, then `defect`.
/// `None` when the defect does not apply to this schema (no required key, no enum, ...).
fn near_valid(schema: &Value) -> BoxedStrategy<Option<Value>> {
    let (props, required) = properties(schema);
    let valid: Vec<BoxedStrategy<Option<(String, Value)>>> = props
        .iter()
        .map(|(k, s)| {
            let k = k.clone();
            let always = required.contains(&k);
            let value = valid_for(s).prop_map(move |v| (k.clone(), v));
            if always {
                value.prop_map(Some).boxed()
            } else {
                proptest::option::of(value).boxed()
            }
        })
        .collect();
    let props_for_defect = props.clone();
    (valid, defect())
        .prop_flat_map(move |(entries, defect)| {
            let mut object: Map<String, Value> = entries.into_iter().flatten().collect();
            let props = props_for_defect.clone();
            let required = required.clone();
            let pick = |i: &Index| props.get(i.index(props.len().max(1))).cloned();
            match defect {
                Defect::WrongType(i) => {
                    let Some((k, s)) = pick(&i) else {
                        return Just(None).boxed();
                    };
                    let types = property_types(&s);
                    if types.is_empty() && s.get("enum").is_none() {
                        return Just(None).boxed();
                    }
                    wrong_type(types)
                        .prop_filter("not one of the enum's", move |v| {
                            s.get("enum")
                                .and_then(Value::as_array)
                                .is_none_or(|e| !e.contains(v))
                        })
                        .prop_map(move |v| {
                            let mut o = object.clone();
                            o.insert(k.clone(), v);
                            Some(Value::Object(o))
                        })
                        .boxed()
                }
                Defect::UnknownKey(k) => {
                    object.insert(k, json!(1));
                    Just(Some(Value::Object(object))).boxed()
                }
                Defect::MissingRequired(i) => {
                    if required.is_empty() {
                        return Just(None).boxed();
                    }
                    object.remove(&required[i.index(required.len())]);
                    Just(Some(Value::Object(object))).boxed()
                }
                Defect::OutOfRange(i, above) => {
                    let bounded: Vec<(String, f64)> = props
                        .iter()
                        .filter_map(|(k, s)| {
                            let bound = if above {
                                s.get("maximum")
                            } else {
                                s.get("minimum")
                            };
                            bound.and_then(Value::as_f64).map(|b| (k.clone(), b))
                        })
                        .collect();
                    if bounded.is_empty() {
                        return Just(None).boxed();
                    }
                    let (k, bound) = bounded[i.index(bounded.len())].clone();
                    (0.001f64..1e12)
                        .prop_map(move |d| {
                            let mut o = object.clone();
                            o.insert(k.clone(), json!(if above { bound + d } else { bound - d }));
                            Some(Value::Object(o))
                        })
                        .boxed()
                }
                Defect::NotInEnum(i) => {
                    let enums: Vec<(String, Vec<Value>)> = props
                        .iter()
                        .filter_map(|(k, s)| {
                            s.get("enum")
                                .and_then(Value::as_array)
                                .map(|e| (k.clone(), e.clone()))
                        })
                        .collect();
                    if enums.is_empty() {
                        return Just(None).boxed();
                    }
                    let (k, options) = enums[i.index(enums.len())].clone();
                    any_string()
                        .prop_map(Value::String)
                        .prop_filter("not an option", move |v| !options.contains(v))
                        .prop_map(move |v| {
                            let mut o = object.clone();
                            o.insert(k.clone(), v);
                            Some(Value::Object(o))
                        })
                        .boxed()
                }
                Defect::NotAnObject(v) => Just(Some(v)).boxed(),
                Defect::Huge => {
                    let key = props
                        .first()
                        .map_or_else(|| "x".to_owned(), |(k, _)| k.clone());
                    object.insert(key, Value::String("x".repeat(4 * 1024 * 1024 + 1)));
                    Just(Some(Value::Object(object))).boxed()
                }
            }
        })
        .boxed()
}

// ---------------------------------------------------------------------------------------------
// Properties (each runs in its child process; see `isolated`)

#[test]
fn arbitrary_json_arguments_never_panic() {
    isolated("arbitrary_json_arguments_never_panic", |engine, runtime| {
        let names = tool_names(engine);
        run((select(names), any_json()), |(tool, args)| {
            check_call(engine, runtime, &tool, args, false)
        });
    });
}

#[test]
fn near_valid_arguments_are_refused_naming_the_tool_and_the_field() {
    isolated(
        "near_valid_arguments_are_refused_naming_the_tool_and_the_field",
        |engine, runtime| {
            let cases: Vec<(String, BoxedStrategy<Option<Value>>)> = tool_names(engine)
                .into_iter()
                .map(|name| {
                    let schema = schema_of(engine, &name);
                    (name, near_valid(&schema))
                })
                .collect();
            let strategy = (0..cases.len()).prop_flat_map(move |n| {
                let (name, args) = cases[n].clone();
                args.prop_map(move |a| (name.clone(), a))
            });
            run(strategy, |(tool, args)| match args {
                Some(args) => check_call(engine, runtime, &tool, args, true),
                None => Ok(()),
            });
        },
    );
}

#[test]
fn arguments_of_a_valid_shape_give_a_result_or_a_refusal_naming_the_field() {
    isolated(
        "arguments_of_a_valid_shape_give_a_result_or_a_refusal_naming_the_field",
        |engine, runtime| {
            let cases: Vec<(String, BoxedStrategy<Value>)> = tool_names(engine)
                .into_iter()
                .map(|name| {
                    let schema = schema_of(engine, &name);
                    (name, valid_shape(&schema))
                })
                .collect();
            let strategy = (0..cases.len()).prop_flat_map(move |n| {
                let (name, args) = cases[n].clone();
                args.prop_map(move |a| (name.clone(), a))
            });
            run(strategy, |(tool, args)| {
                check_call(engine, runtime, &tool, args, false)
            });
        },
    );
}

#[test]
fn deeply_nested_arguments_are_answered() {
    isolated("deeply_nested_arguments_are_answered", |engine, runtime| {
        let names = tool_names(engine);
        // serde_json's parser stops at 128 levels: an MCP client or a script cannot send
        // deeper; a library caller can, so go well past it.
        run(
            (select(names), 1usize..2000, any::<bool>(), object_key()),
            |(tool, depth, objects, key)| {
                let mut args = Map::new();
                args.insert(key, nested(depth, objects, json!("leaf")));
                check_call(engine, runtime, &tool, Value::Object(args), false)
            },
        );
    });
}

#[test]
fn unknown_tools_are_not_found_and_named() {
    isolated(
        "unknown_tools_are_not_found_and_named",
        |engine, runtime| {
            let names = tool_names(engine);
            run(
                (any_string(), any_json())
                    .prop_filter("not a tool", move |(n, _)| !names.contains(n)),
                |(tool, args)| {
                    let err = runtime
                        .block_on(engine.call_tool(&tool, args))
                        .expect_err("an unknown tool answered");
                    prop_assert_eq!(&err.code, "tool:not_found");
                    prop_assert!(
                        err.message.contains(&format!("'{tool}'")),
                        "{}",
                        err.message
                    );
                    Ok(())
                },
            );
        },
    );
}

#[test]
fn valid_arguments_of_the_tools_that_may_run_give_a_result() {
    isolated(
        "valid_arguments_of_the_tools_that_may_run_give_a_result",
        |engine, runtime| {
            for (tool, args) in [
                ("wait", json!({})),
                ("wait", json!({"milliseconds": 1})),
                ("current_datetime", json!({})),
                ("current_datetime", json!({"format": "%Y-%m-%d"})),
                ("process", json!({"action": "list"})),
            ] {
                let answer = runtime.block_on(engine.call_tool(tool, args.clone()));
                assert!(answer.is_ok(), "{tool} {args}: {answer:?}");
            }
            // The hook stops the others once their arguments pass.
            let err = runtime
                .block_on(engine.call_tool("terminal", json!({"command": "true"})))
                .unwrap_err();
            assert_eq!(err.code, WOULD_RUN, "{err:?}");
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Known gaps, found by the properties above and reported: these fail until they are fixed
// (`cargo test ... -- --ignored`).

#[test]
fn run_tools_script_refuses_unknown_arguments() {
    isolated(
        "run_tools_script_refuses_unknown_arguments",
        |engine, runtime| {
            let err = runtime
                .block_on(engine.call_tool("run_tools_script", json!({"code": "1", "timeout": 5})))
                .unwrap_err();
            assert_eq!(err.code, "tool:invalid_arguments", "{err:?}");
            assert!(err.message.contains("field `timeout`"), "{}", err.message);
        },
    );
}

#[test]
#[ignore = "known gap: typed parsing of process arguments names no field"]
fn process_names_the_field_its_typed_parsing_refuses() {
    isolated(
        "process_names_the_field_its_typed_parsing_refuses",
        |engine, runtime| {
            for args in [
                json!({"action": "list", "offset": 2.0}),
                json!({"action": "list", "offset": u64::MAX}),
                json!({"action": "list", "limit": 5.0}),
            ] {
                let err = runtime
                    .block_on(engine.call_tool("process", args.clone()))
                    .unwrap_err();
                assert!(err.message.contains("field `"), "{args}: {}", err.message);
            }
        },
    );
}

#[test]
#[ignore = "known gap: an unknown process id is refused without naming the tool or the field"]
fn process_names_the_field_of_an_unknown_process_id() {
    isolated(
        "process_names_the_field_of_an_unknown_process_id",
        |engine, runtime| {
            let err = runtime
                .block_on(
                    engine.call_tool("process", json!({"action": "poll", "session_id": "p_0"})),
                )
                .unwrap_err();
            assert!(
                err.message.contains("'process'") && err.message.contains("field `session_id`"),
                "{}",
                err.message
            );
        },
    );
}
