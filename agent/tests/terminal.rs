//! `paddock-agent terminal -- PROGRAM...` through the real binary: the program gets a terminal
//! allocated where the agent runs, with a name that leads back to it, input typed on it, and
//! its exit status passed on.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn agent() -> Command {
    Command::new(env!("CARGO_BIN_EXE_paddock-agent"))
}

#[test]
fn the_program_gets_a_named_terminal_and_its_exit_status_is_passed_on() {
    let out = agent()
        .args(["terminal", "--", "bash", "-c"])
        .arg(
            r#"t=$(tty); echo "name:$t"; [ /proc/self/fd/0 -ef "$t" ] && echo same;
               test -t 1 && echo out-tty; stty size; exit 7"#,
        )
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    let lines: Vec<&str> = text.lines().collect();
    let name = lines
        .iter()
        .find_map(|l| l.strip_prefix("name:"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(name.starts_with("/dev/pts/"), "{text}");
    assert!(lines.contains(&"same"), "{text}");
    assert!(lines.contains(&"out-tty"), "{text}");
    assert!(lines.contains(&"40 120"), "{text}");
    assert_eq!(out.status.code(), Some(7), "{text}");
}

#[test]
fn input_is_typed_on_the_terminal_and_a_signal_death_answers_128_plus_signal() {
    let mut child = agent()
        .args(["terminal", "--", "bash", "-c"])
        .arg("read line; echo \"got:$line\"; cat; echo after-eof; kill -TERM $$")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // ^D at the start of a line is the end of input for the program on a terminal.
    stdin.write_all(b"hello\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    stdin.write_all(b"\x04").unwrap();
    let started = Instant::now();
    let out = child.wait_with_output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
    let text = String::from_utf8_lossy(&out.stdout).replace('\r', "");
    assert!(text.contains("got:hello"), "{text}");
    assert!(text.contains("after-eof"), "{text}");
    assert_eq!(out.status.code(), Some(128 + 15), "{text}");
}

#[test]
fn without_a_program_it_says_how_to_call_it() {
    let out = agent().args(["terminal", "--"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("terminal -- PROGRAM"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
