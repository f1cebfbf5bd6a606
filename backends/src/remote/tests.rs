//! [`RemoteEnvironment`] against a [`FakeTransport`]: what it sends to the target and how it
//! reads the answers (timeouts, transport errors, caps, workdirs, files, background commands).

use std::collections::BTreeMap;
use std::time::Duration;

use pretty_assertions::assert_eq;

use super::fake::{Answer, FakeTransport, RunKind, SeenRun};
use super::{RemoteEnvironment, script};
use crate::kill::TIMEOUT_EXIT_CODE;
use crate::processes::ProcessRecord;
use crate::{BackendError, BackgroundRequest, Environment, ExecOutput, ExecRequest, RemoteFile};

struct Setup {
    env: RemoteEnvironment<FakeTransport>,
    /// Holds the engine's state directory.
    _dir: tempfile::TempDir,
}

fn setup(fake: FakeTransport) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    Setup {
        env: RemoteEnvironment::new(
            fake,
            dir.path().join("state"),
            dir.path().join("no-supervisor"),
        ),
        _dir: dir,
    }
}

fn request(command: &str) -> ExecRequest {
    ExecRequest {
        command: command.to_owned(),
        session: "s1".to_owned(),
        workdir: None,
        env: BTreeMap::new(),
        stdin: None,
        timeout: Duration::from_secs(10),
        pty: false,
        max_output_chars: 10_000,
        chunks: None,
        keep_detached: false,
    }
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// The run id of the one command the fake saw first.
fn first_run_id(fake: &FakeTransport) -> String {
    match fake.kinds().first() {
        Some(RunKind::Command { run_id }) => run_id.clone(),
        other => panic!("the first run is not a command: {other:?}"),
    }
}

/// The argv of session `s1`'s `command` as the fake target runs it (state root
/// `.paddock-state`, home `/home/agent`): the command wrapper with its run id, workdir and
/// environment.
fn wrapped_argv(run_id: &str, command: &str, workdir: &str, env: &[&str]) -> Vec<String> {
    let mut argv = strings(&["env", &format!("PADDOCK_RUN={run_id}"), "bash", "-c"]);
    argv.push(script::command_script());
    argv.extend(strings(&[
        "paddock",
        ".paddock-state",
        "s1",
        run_id,
        command,
        workdir,
        "/home/agent",
    ]));
    argv.extend(strings(env));
    argv
}

/// The runs of a command ended on its target: the command, then the kill of its run id.
fn command_then_kill(run_id: &str) -> Vec<RunKind> {
    vec![
        RunKind::Command {
            run_id: run_id.to_owned(),
        },
        RunKind::Kill {
            run_id: run_id.to_owned(),
        },
    ]
}

/// Lets tasks the environment spawned (a cancel guard's kill) run.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

#[tokio::test]
async fn the_wrapper_argv_carries_root_session_run_workdir_home_and_the_merged_sorted_env() {
    let fake = FakeTransport::new()
        .with_env(&[("SHARED", "policy"), ("A_POLICY", "1")])
        .answer(Answer::exit(0, ""));
    let s = setup(fake);
    let mut req = request("echo hi");
    req.workdir = Some("/work/dir".into());
    req.env = [("SHARED", "request"), ("B_REQUEST", "2")]
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    s.env.exec(req).await.unwrap();

    let run_id = first_run_id(s.env.transport());
    assert!(
        run_id.len() == 17 && run_id.starts_with('r'),
        "run id {run_id}"
    );
    let argv = wrapped_argv(
        &run_id,
        "echo hi",
        "/work/dir",
        &[
            "A_POLICY=1",
            "B_REQUEST=2",
            "PADDOCK_SESSION=s1",
            "SHARED=request",
        ],
    );
    assert_eq!(
        s.env.transport().runs(),
        vec![SeenRun {
            session: "s1".into(),
            argv,
            stdin: None,
            pty: false,
        }]
    );
}

#[tokio::test]
async fn the_request_env_cannot_rename_the_session() {
    let s = setup(FakeTransport::new().answer(Answer::exit(0, "")));
    let mut req = request("true");
    req.env
        .insert("PADDOCK_SESSION".into(), "someone-else".into());
    s.env.exec(req).await.unwrap();
    let argv = &s.env.transport().runs()[0].argv;
    let sessions: Vec<&String> = argv
        .iter()
        .filter(|a| a.starts_with("PADDOCK_SESSION="))
        .collect();
    assert_eq!(sessions, vec!["PADDOCK_SESSION=s1"]);
}

#[tokio::test]
async fn every_command_gets_a_fresh_run_id() {
    let s = setup(
        FakeTransport::new()
            .answer(Answer::exit(0, ""))
            .answer(Answer::exit(0, "")),
    );
    s.env.exec(request("true")).await.unwrap();
    s.env.exec(request("true")).await.unwrap();
    let ids: Vec<RunKind> = s.env.transport().kinds();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1]);
}

#[tokio::test]
async fn a_finished_command_answers_its_status_and_output_and_sends_no_kill() {
    let s = setup(FakeTransport::new().answer(Answer::exit(3, "out\nerr\n")));
    let mut req = request("cat; exit 3");
    req.stdin = Some(b"input".to_vec());
    let out = s.env.exec(req).await.unwrap();
    assert_eq!(
        out,
        ExecOutput {
            output: "out\nerr\n".into(),
            exit_code: 3,
            timed_out: false,
            output_chars: 8,
            duration_ms: out.duration_ms,
            not_ended: None,
        }
    );
    settle().await;
    let runs = s.env.transport().runs();
    assert_eq!(runs.len(), 1, "{runs:#?}");
    assert_eq!(runs[0].stdin.as_deref(), Some(&b"input"[..]));
}

#[tokio::test]
async fn a_pty_run_asks_for_a_terminal_and_its_crlf_line_ends_become_lf() {
    let s = setup(FakeTransport::new().answer(Answer::exit(0, "a\r\nb\r\n")));
    let mut req = request("printf 'a\\nb\\n'");
    req.pty = true;
    let out = s.env.exec(req).await.unwrap();
    assert_eq!(out.output, "a\nb\n");
    // Counted before the line ends are rewritten.
    assert_eq!(out.output_chars, 6);
    assert!(s.env.transport().runs()[0].pty);
}

#[tokio::test]
async fn a_command_that_outlives_its_timeout_is_killed_by_its_run_id_and_answers_124() {
    let s = setup(FakeTransport::new().answer(Answer::UntilKilled {
        output: "partial\n".into(),
    }));
    let mut req = request("sleep 100");
    req.timeout = Duration::from_millis(200);
    let out = s.env.exec(req).await.unwrap();
    assert_eq!(
        out,
        ExecOutput {
            output: "partial\n\n[paddock: command timed out after 0.2 s and was killed]".into(),
            exit_code: TIMEOUT_EXIT_CODE,
            timed_out: true,
            output_chars: 8,
            duration_ms: out.duration_ms,
            not_ended: None,
        }
    );
    assert!(out.duration_ms >= 200.0, "{}", out.duration_ms);
    let fake = s.env.transport();
    let run_id = first_run_id(fake);
    assert_eq!(fake.kinds(), command_then_kill(&run_id));
    assert_eq!(fake.runs()[1].session, "s1");
    // The client ended by itself once the kill reached the target.
    assert_eq!(fake.abandoned(), Vec::<String>::new());
}

#[tokio::test]
async fn a_timeout_whose_kill_cannot_reach_the_target_answers_124_says_why_and_abandons_the_client()
{
    let s = setup(
        FakeTransport::new()
            .answer(Answer::UntilKilled {
                output: "partial\n".into(),
            })
            .answer_kills(Answer::Unavailable {
                reason: "connection lost".into(),
            }),
    );
    let mut req = request("sleep 100");
    req.timeout = Duration::from_millis(100);
    let out = s.env.exec(req).await.unwrap();
    assert_eq!((out.exit_code, out.timed_out), (TIMEOUT_EXIT_CODE, true));
    assert!(out.output.starts_with("partial\n"), "{}", out.output);
    // Not "was killed": nothing confirmed it.
    let why = out.not_ended.as_deref().unwrap_or_default();
    assert!(why.contains("connection lost"), "{out:?}");
    assert!(
        out.output.ends_with(&format!(
            "could not be ended there ({why}); it may still be running]"
        )),
        "{}",
        out.output
    );
    settle().await;
    let fake = s.env.transport();
    let run_id = first_run_id(fake);
    assert_eq!(fake.kinds(), command_then_kill(&run_id));
    // After the grace, the client still running is aborted rather than waited for.
    assert_eq!(fake.abandoned(), vec![run_id]);
}

#[tokio::test]
async fn a_caller_that_stops_waiting_ends_the_run_on_the_target() {
    let s = setup(FakeTransport::new().answer(Answer::UntilKilled {
        output: String::new(),
    }));
    let gave_up =
        tokio::time::timeout(Duration::from_millis(100), s.env.exec(request("sleep 100")))
            .await
            .is_err();
    assert!(gave_up);
    let runs = s.env.transport().wait_for_runs(2).await;
    let run_id = first_run_id(s.env.transport());
    assert_eq!(
        runs.iter().map(SeenRun::kind).collect::<Vec<_>>(),
        command_then_kill(&run_id)
    );
    assert_eq!(runs[1].session, "s1");
}

/// Regression: a run that failed left its cancel guard armed, so a kill went through the
/// transport afterwards (on slurm, a second allocation left held in the queue).
#[tokio::test]
async fn a_run_the_transport_fails_is_unavailable_and_sends_no_kill() {
    let s = setup(FakeTransport::new().answer(Answer::After {
        delay: Duration::from_millis(20),
        then: Box::new(Answer::Unavailable {
            reason: "no route to host".into(),
        }),
    }));
    let result = s.env.exec(request("true")).await;
    let Err(BackendError::Unavailable { kind, name, reason }) = result else {
        panic!("expected the transport's error, got {result:?}");
    };
    assert_eq!(
        (kind.as_str(), name.as_str(), reason.as_str()),
        ("fake", "fake1", "no route to host")
    );
    settle().await;
    let fake = s.env.transport();
    assert_eq!(
        fake.kinds(),
        vec![RunKind::Command {
            run_id: first_run_id(fake)
        }]
    );
}

#[tokio::test]
async fn output_beyond_the_cap_keeps_its_start_and_end() {
    let text: String = (0..1000)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect();
    let s = setup(FakeTransport::new().answer(Answer::exit(0, &text)));
    let mut req = request("yes");
    req.max_output_chars = 100;
    let out = s.env.exec(req).await.unwrap();
    assert_eq!(
        out.output,
        format!(
            "{}\n…[900 characters omitted]…\n{}",
            &text[..50],
            &text[950..]
        )
    );
    assert_eq!(out.output_chars, 1000);
}

#[tokio::test]
async fn a_workdir_the_target_cannot_enter_is_a_workdir_error() {
    let s = setup(FakeTransport::new().answer(Answer::exit(
        126,
        "paddock: cannot change into workdir /nope\n",
    )));
    let mut req = request("ls");
    req.workdir = Some("/nope".into());
    let result = s.env.exec(req).await;
    let Err(BackendError::Workdir { path, reason }) = result else {
        panic!("expected a workdir error, got {result:?}");
    };
    assert_eq!(
        (path.as_str(), reason.as_str()),
        (
            "/nope",
            "does not exist or is not a directory on the backend"
        )
    );
}

#[tokio::test]
async fn exit_126_without_the_wrapper_message_is_the_commands_own_status() {
    let s = setup(FakeTransport::new().answer(Answer::exit(126, "bash: ./x: Permission denied\n")));
    let out = s.env.exec(request("./x")).await.unwrap();
    assert_eq!(
        (out.exit_code, out.output.as_str()),
        (126, "bash: ./x: Permission denied\n")
    );
}

#[tokio::test]
async fn an_invalid_session_or_an_empty_command_never_reaches_the_target() {
    let s = setup(FakeTransport::new());
    let mut bad_session = request("true");
    bad_session.session = "../other".into();
    let results = [
        s.env.exec(bad_session).await,
        s.env.exec(request("  \n")).await,
        s.env.exec(request("echo \0")).await,
    ];
    for result in results {
        assert!(
            matches!(result, Err(BackendError::InvalidCommand(_))),
            "{result:?}"
        );
    }
    assert_eq!(s.env.transport().runs(), Vec::<SeenRun>::new());
}

#[tokio::test]
async fn write_file_sends_the_contents_as_stdin_to_a_quoted_path() {
    let s = setup(FakeTransport::new().answer(Answer::exit(0, "")));
    s.env
        .write_file("s1", "my dir/it's.py", b"print(1)\n".to_vec())
        .await
        .unwrap();
    let runs = s.env.transport().runs();
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].stdin.as_deref(), Some(&b"print(1)\n"[..]));
    let command = &runs[0].argv[9];
    assert!(
        command.starts_with(&format!(
            "__p_file={}; ",
            script::shell_quote("my dir/it's.py")
        )),
        "{command}"
    );
    assert!(command.ends_with("cat > \"$__p_file\""), "{command}");
}

#[tokio::test]
async fn a_write_the_target_refuses_is_an_error_naming_path_status_and_output() {
    let s = setup(FakeTransport::new().answer(Answer::exit(1, "cat: disk full\n")));
    let result = s.env.write_file("s1", "a.txt", b"x".to_vec()).await;
    let Err(BackendError::Io(err)) = result else {
        panic!("expected an i/o error, got {result:?}");
    };
    assert_eq!(
        err.to_string(),
        "writing a.txt on the fake backend failed (exit 1): cat: disk full"
    );
}

#[tokio::test]
async fn collected_files_are_the_json_lines_of_the_listing() {
    let listing = concat!(
        "python3: warning, ignored\n",
        r#"{"path":"out/a.txt","size":2,"sha256":"ab","content_base64":"aGk="}"#,
        "\n",
        r#"{"path":"big.bin","size":99999,"sha256":"cd"}"#,
        "\n",
    );
    let s = setup(FakeTransport::new().answer(Answer::exit(0, listing)));
    assert_eq!(s.env.scratch_dir("s1"), ".paddock-state/python/s1");
    assert_eq!(s.env.scratch_dir("s1.python"), ".paddock-state/python/s1");
    let files = s
        .env
        .collect_files("s1", ".paddock-state/python/run1", 10, 1024)
        .await
        .unwrap();
    assert_eq!(
        files,
        vec![
            RemoteFile {
                path: "out/a.txt".into(),
                size: 2,
                sha256: "ab".into(),
                content_base64: Some("aGk=".into()),
            },
            RemoteFile {
                path: "big.bin".into(),
                size: 99999,
                sha256: "cd".into(),
                content_base64: None,
            },
        ]
    );
    let command = &s.env.transport().runs()[0].argv[9];
    assert!(
        command.contains("set -- \"$__p_dir\" 10 1024\n"),
        "{command}"
    );
    assert!(command.ends_with(script::COLLECT_FILES_SCRIPT), "{command}");
}

#[tokio::test]
async fn an_unreadable_listing_line_is_an_error() {
    let s = setup(FakeTransport::new().answer(Answer::exit(0, "{\"path\": truncated\n")));
    let result = s.env.collect_files("s1", "d", 10, 1024).await;
    let Err(BackendError::Io(err)) = result else {
        panic!("expected an i/o error, got {result:?}");
    };
    assert!(
        err.to_string().starts_with("unreadable file listing line"),
        "{err}"
    );
}

#[tokio::test]
async fn a_background_command_hands_its_supervisor_the_wrapper_and_kill_through_the_client() {
    let dir = tempfile::tempdir().unwrap();
    let supervisor = crate::processes::tests::fake_supervisor(
        dir.path(),
        Some(&crate::processes::tests::record_json("$id", "s1")),
    );
    let env = RemoteEnvironment::new(
        FakeTransport::new().with_env(&[("POLICY", "1")]),
        dir.path().join("state"),
        supervisor,
    );
    let record = env
        .spawn_background(BackgroundRequest {
            command: "sleep 1".into(),
            session: "s1".into(),
            workdir: None,
            env: BTreeMap::new(),
            pty: true,
            notify_on_complete: true,
        })
        .await
        .unwrap();
    let id = record.id.clone();
    assert!(id.starts_with("p_"), "{id}");
    assert_eq!(env.transport().ensured(), vec!["s1".to_owned()]);
    // Nothing ran through the transport itself: the supervisor runs the client.
    assert_eq!(env.transport().runs(), Vec::<SeenRun>::new());

    let process_dir = dir.path().join("state/processes").join(&id);
    let spec: serde_json::Value =
        serde_json::from_slice(&std::fs::read(process_dir.join("spec.json")).unwrap()).unwrap();
    let mut argv = strings(&["fake-client", "s1", "-t"]);
    argv.extend(wrapped_argv(
        &id,
        "sleep 1",
        "",
        &["PADDOCK_SESSION=s1", "POLICY=1"],
    ));
    let mut kill_argv = strings(&["fake-client", "s1", "bash", "-c"]);
    kill_argv.push(script::kill_script());
    kill_argv.extend(strings(&["paddock", &id]));
    let mut signal_argv = strings(&["fake-client", "s1", "bash", "-c"]);
    signal_argv.push(script::signal_script());
    signal_argv.extend(strings(&[
        "paddock",
        &id,
        crate::launch::SIGNAL_PLACEHOLDER,
    ]));
    assert_eq!(
        spec["remote"],
        serde_json::json!({
            "argv": argv,
            "kill_argv": kill_argv,
            "signal_argv": signal_argv,
            "local_pty": false,
            "resizable": false,
        })
    );
    assert_eq!(
        spec["shell_state"],
        serde_json::json!(dir.path().join("state/sessions/s1"))
    );
    let env_keys: Vec<&String> = spec["env"].as_object().unwrap().keys().collect();
    assert_eq!(env_keys, vec!["HOME", "PATH"]);
    assert_eq!(
        std::fs::read_to_string(process_dir.join("supervisor-args")).unwrap(),
        format!("__supervise\n{}\n", process_dir.display())
    );
    assert_eq!(
        record,
        serde_json::from_str::<ProcessRecord>(&crate::processes::tests::record_json(&id, "s1"))
            .unwrap()
    );
}
