//! Python contexts on every backend whose environment holds the agent (`python_execute` with
//! `context`, `python_contexts`), through the real binary: each `paddock call` is a new engine
//! process, so what persists between calls is kept in the environment, never in the engine.

use serde_json::{Value, json};

use super::conformance::{Target, conformance};

fn run(t: &Target, session: &str, context: &str, code: &str) -> Value {
    t.call(
        session,
        "python_execute",
        json!({"code": code, "context": context, "timeout": 60}),
    )
    .answer()
}

/// The main result of an execution: its `text/plain`.
fn main_text(v: &Value) -> String {
    v["results"]
        .as_array()
        .and_then(|r| r.iter().find(|b| b["is_main_result"] == json!(true)))
        .and_then(|b| b["text/plain"].as_str())
        .unwrap_or_default()
        .to_owned()
}

/// Names persist between calls (separate engine processes); the last expression is the main
/// result, `display` adds bundles (an object's `_repr_png_` as base64 PNG), stdout and stderr
/// come apart; an exception is name, value and traceback with exit code 1; a timeout interrupts
/// the code and keeps the context's names; two contexts do not share names.
fn contexts_keep_names_and_answer_rich_results(t: &Target) {
    let session = t.session("s");
    let v = run(
        t,
        &session,
        "c",
        "import sys\nx = 41\nprint('out')\nprint('err', file=sys.stderr)\nx + 1",
    );
    assert_eq!(main_text(&v), "42", "{v}");
    assert_eq!(v["stdout"], json!("out\n"), "{v}");
    assert_eq!(v["stderr"], json!("err\n"), "{v}");
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let v = run(t, &session, "c", "x");
    assert_eq!(main_text(&v), "41", "names persist: {v}");
    let v = run(
        t,
        &session,
        "c",
        "class Pic:\n    def _repr_png_(self):\n        return b'\\x89PNG\\r\\n\\x1a\\n'\n    def _repr_html_(self):\n        return '<b>pic</b>'\ndisplay(Pic())",
    );
    let bundle = &v["results"][0];
    assert_eq!(bundle["image/png"], json!("iVBORw0KGgo="), "{v}");
    assert_eq!(bundle["text/html"], json!("<b>pic</b>"), "{v}");
    let v = run(t, &session, "c", "1/0");
    assert_eq!(v["exception"]["name"], json!("ZeroDivisionError"), "{v}");
    assert!(
        v["exception"]["traceback"]
            .as_str()
            .unwrap_or_default()
            .contains("1/0"),
        "{v}"
    );
    assert_eq!(v["exit_code"], json!(1), "{v}");
    let v = t
        .call(
            &session,
            "python_execute",
            json!({"code": "while True:\n    pass", "context": "c", "timeout": 1}),
        )
        .answer();
    assert_eq!(v["timed_out"], json!(true), "{v}");
    assert_eq!(v["exit_code"], json!(124), "{v}");
    let v = run(t, &session, "c", "x");
    assert_eq!(main_text(&v), "41", "the timeout kept the context: {v}");
    let v = run(t, &session, "d", "x");
    assert_eq!(
        v["exception"]["name"],
        json!("NameError"),
        "contexts apart: {v}"
    );
}

/// `python_contexts` lists, restarts and removes contexts; an unknown id, or one that exists
/// already, is a typed error; removing a context ends its interpreter, closing the session
/// ends the rest.
fn python_contexts_manage_the_sessions_interpreters(t: &Target) {
    let session = t.session("s");
    let made = t
        .call(
            &session,
            "python_contexts",
            json!({"action": "create", "id": "k", "env": {"K_VALUE": "v1"}}),
        )
        .answer();
    assert!(made.get("error_code").is_none(), "{made}");
    let v = run(t, &session, "k", "import os\nos.environ['K_VALUE']");
    assert_eq!(main_text(&v), "'v1'", "{v}");
    let again = t
        .call(
            &session,
            "python_contexts",
            json!({"action": "create", "id": "k"}),
        )
        .json();
    assert_eq!(again["error_code"], json!("context:exists"), "{again}");
    run(t, &session, "k", "y = 1");
    t.call(
        &session,
        "python_contexts",
        json!({"action": "restart", "id": "k"}),
    )
    .answer();
    let v = run(t, &session, "k", "y");
    assert_eq!(
        v["exception"]["name"],
        json!("NameError"),
        "a restart forgets: {v}"
    );
    let list = t
        .call(&session, "python_contexts", json!({"action": "list"}))
        .answer();
    let ids: Vec<&str> = list["contexts"]
        .as_array()
        .map(|c| c.iter().filter_map(|x| x["id"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(ids, vec!["k"], "{list}");
    t.call(
        &session,
        "python_contexts",
        json!({"action": "remove", "id": "k"}),
    )
    .answer();
    for action in ["remove", "restart"] {
        let v = t
            .call(
                &session,
                "python_contexts",
                json!({"action": action, "id": "k"}),
            )
            .json();
        assert_eq!(v["error_code"], json!("context:not_found"), "{action}: {v}");
    }
    let bad = t
        .call(
            &session,
            "python_contexts",
            json!({"action": "create", "id": "../x"}),
        )
        .json();
    assert_eq!(bad["error_code"], json!("context:invalid_id"), "{bad}");
}

conformance!([
    contexts_keep_names_and_answer_rich_results,
    python_contexts_manage_the_sessions_interpreters,
];
    local, sandboxed, docker, ssh, apptainer, slurm, slurm_apptainer, slurm_node1,
    slurm_node2_apptainer, docker_runsc);

/// Checks of a few backends only (the macro makes one module per backend).
mod snapshots {
    use std::time::Duration;

    use serde_json::Value;

    use super::{Target, conformance, main_text, run};

    /// A snapshot does not carry a context's interpreter, and says so, naming it; the session's
    /// context lives on after the snapshot.
    fn a_snapshot_names_the_contexts_it_does_not_carry(t: &Target) {
        let session = t.session("snapctx");
        run(t, &session, "kept-not", "z = 41");
        let made = t.paddock_in_home(
            vec!["sessions", "snapshot", &session, "--name", "with-context"],
            Duration::from_secs(120),
        );
        assert_eq!(made.code, 0, "{} {}", made.stdout, made.stderr);
        let made = made.json();
        let lines: Vec<&str> = made["not_carried"]
            .as_array()
            .map(|l| l.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        assert!(
            lines
                .iter()
                .any(|l| l.contains("Python context kept-not") && l.contains("not carried")),
            "{made}"
        );
        let v = run(t, &session, "kept-not", "z + 1");
        assert_eq!(main_text(&v), "42", "{v}");
        let removed = t.paddock_in_home(
            vec!["snapshots", "rm", "with-context"],
            Duration::from_secs(60),
        );
        assert_eq!(removed.code, 0, "{}", removed.stderr);
    }

    // The unconfined local backend takes no snapshots.
    conformance!([a_snapshot_names_the_contexts_it_does_not_carry]; sandboxed, docker, docker_runsc);
}
