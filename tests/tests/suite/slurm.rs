//! The slurm backend's job life cycle against the real single-node cluster that
//! `scripts/test-services.sh` starts: a job cancelled (`scancel`) during a command and between
//! commands, a job ended by its time limit, a job that cannot start within
//! `queue_timeout_seconds`, and `paddock sessions close` cancelling the job. The conformance
//! suite covers what a session does while its job runs.
//!
//! Evidence is Slurm's own: `squeue` and `scontrol show job` for the job, the host's /proc for
//! the holder step's `srun` (the engine runs on the cluster's node).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use paddock_tests::{
    Run, backend_skipped, call_argv, paddock_policy, services_section, unique_session,
};
use serde_json::{Value, json};

/// One test's state directory and a policy with the services' `[backends.slurm]` changed by
/// `overrides` (`key = value` lines replacing the section's own).
struct Cluster {
    home: tempfile::TempDir,
    policy: String,
}

impl Cluster {
    fn new(overrides: &[(&str, &str)]) -> Option<Self> {
        if backend_skipped("slurm") {
            eprintln!("SKIPPED: the slurm backend (PADDOCK_SKIP_BACKENDS)");
            return None;
        }
        let header = "[backends.slurm]";
        let section = services_section("slurm", "slurm");
        let mut lines: Vec<String> = section
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter(|l| {
                !overrides
                    .iter()
                    .any(|(k, _)| l.starts_with(&format!("{k} =")))
            })
            .map(str::to_owned)
            .collect();
        lines.extend(overrides.iter().map(|(k, v)| format!("{k} = {v}")));
        let home = tempfile::tempdir().unwrap();
        let policy = home.path().join("policy.toml");
        std::fs::write(&policy, format!("{header}\n{}\n", lines.join("\n"))).unwrap();
        Some(Self {
            policy: policy.display().to_string(),
            home,
        })
    }

    /// A session id unique to this test (it names the Slurm job).
    fn session(&self, name: &str) -> String {
        unique_session(self.home.path(), name)
    }

    fn job_name(&self, session: &str) -> String {
        paddock_tests::environment_name("slurm", self.home.path(), session)
    }

    fn paddock(&self, args: &[&str]) -> Run {
        paddock_policy(
            self.home.path(),
            &self.policy,
            args,
            Duration::from_secs(200),
        )
    }

    fn terminal(&self, session: &str, command: &str) -> (Run, Value) {
        let args = json!({ "command": command }).to_string();
        let run = self.paddock(&call_argv("terminal", &args, session, "slurm"));
        let value = run.json();
        (run, value)
    }

    /// The `SLURM_JOB_ID` a command of `session` runs in.
    fn job_of(&self, session: &str) -> String {
        let (_, v) = self.terminal(session, "echo $SLURM_JOB_ID");
        assert_eq!(v["exit_code"], json!(0), "{v}");
        let job = v["output"].as_str().unwrap().trim().to_owned();
        assert!(
            !job.is_empty() && job.chars().all(|c| c.is_ascii_digit()),
            "{v}"
        );
        job
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        // Whatever a failed test left: this test's jobs are named after its sessions.
        cancel_jobs_ending_with(&self.session(""));
    }
}

/// Cancels every Slurm job whose name ends with `tag` (what a test's sessions left).
pub(super) fn cancel_jobs_ending_with(tag: &str) {
    let jobs = Command::new("squeue")
        .args(["-h", "-o", "%i %j"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    for line in jobs.lines() {
        if let Some((id, name)) = line.split_once(' ')
            && name.ends_with(tag)
        {
            let _ = Command::new("scancel").arg(id).output();
        }
    }
}

/// Slurm's state of `job` (`RUNNING`, `CANCELLED`, `TIMEOUT`, ...); "" when it is unknown.
pub(super) fn job_state(job: &str) -> String {
    scontrol_field("job", job, "JobState")
}

/// The value of `field` in `scontrol show ENTITY -o ID` (a job, a node); "" when Slurm does
/// not know it.
pub(super) fn scontrol_field(entity: &str, id: &str, field: &str) -> String {
    let out = Command::new("scontrol")
        .args(["show", entity, "-o", id])
        .output()
        .unwrap();
    let prefix = format!("{field}=");
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .find_map(|f| f.strip_prefix(prefix.as_str()))
        .unwrap_or_default()
        .to_owned()
}

/// Jobs of that name Slurm still runs or queues.
fn live_jobs_named(name: &str) -> Vec<String> {
    let out = Command::new("squeue")
        .args([
            "-h",
            "-n",
            name,
            "-t",
            "PENDING,RUNNING,CONFIGURING",
            "-o",
            "%i",
        ])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `srun` processes on this machine for `job` (the holder step's relay among them).
fn sruns_of(job: &str) -> Vec<i32> {
    let needle = format!("--jobid={job}");
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                let args: Vec<String> = c
                    .split(|b| *b == 0)
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect();
                args.first().is_some_and(|a| a.ends_with("srun")) && args.contains(&needle)
            })
        })
        .collect()
}

fn wait_until(what: &str, limit: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn scancel(job: &str) {
    let out = Command::new("scancel").arg(job).output().unwrap();
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn a_job_cancelled_during_a_command_fails_it_naming_the_job_and_the_next_gets_a_new_one() {
    let Some(c) = Cluster::new(&[]) else { return };
    let s = c.session("cancel");
    let job = c.job_of(&s);
    let (_, v) = c.terminal(&s, "cd /tmp && export KEPT=yes");
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let busy = {
        let (home, policy, s) = (
            c.home.path().to_str().unwrap().to_owned(),
            c.policy.clone(),
            s.clone(),
        );
        std::thread::spawn(move || {
            let args = json!({"command": "echo started; sleep 60; echo finished"}).to_string();
            paddock_policy(
                Path::new(&home),
                &policy,
                &call_argv("terminal", &args, &s, "slurm"),
                Duration::from_secs(120),
            )
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    scancel(&job);
    let run = busy.join().unwrap();
    let v = run.json();
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!("the Slurm job {job} of session '{s}' ended"))
            && error.contains("the next command gets a new allocation"),
        "{v}"
    );
    assert!(run.elapsed < Duration::from_secs(30), "{:?}", run.elapsed);
    // The next command runs in a fresh job and a fresh shell: the cancelled job's cwd and
    // exports are gone with it.
    let (_, v) = c.terminal(&s, "echo $SLURM_JOB_ID ${KEPT:-unset}; pwd");
    assert_eq!(v["exit_code"], json!(0), "{v}");
    let out = v["output"].as_str().unwrap();
    let new_job = out.split_whitespace().next().unwrap();
    assert_ne!(new_job, job, "{out}");
    assert!(
        out.contains(" unset\n") && !out.contains("\n/tmp\n"),
        "{out}"
    );
    assert!(sruns_of(&job).is_empty(), "the old job's srun is left");
}

#[test]
fn a_job_cancelled_between_commands_is_reported_once_then_replaced() {
    let Some(c) = Cluster::new(&[]) else { return };
    let s = c.session("between");
    let job = c.job_of(&s);
    scancel(&job);
    wait_until("the job ends", Duration::from_secs(30), || {
        live_jobs_named(&c.job_name(&s)).is_empty()
    });
    let (run, v) = c.terminal(&s, "echo hi");
    assert_eq!(run.code, 1, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "the Slurm job {job} of session '{s}' ended (CANCELLED"
        )) || error.contains(&format!(
            "the Slurm job {job} of session '{s}' ended (COMPLETING"
        )),
        "{v}"
    );
    let new_job = c.job_of(&s);
    assert_ne!(new_job, job);
    assert_eq!(job_state(&new_job), "RUNNING");
}

#[test]
fn a_job_past_its_time_limit_is_reported_with_timeout_then_replaced() {
    // One minute, Slurm's smallest; it checks limits about every 30 s.
    let Some(c) = Cluster::new(&[("time_limit", "\"1\"")]) else {
        return;
    };
    let s = c.session("limit");
    let job = c.job_of(&s);
    wait_until(
        "the time limit ends the job",
        Duration::from_secs(180),
        || job_state(&job) == "TIMEOUT",
    );
    let (_, v) = c.terminal(&s, "echo hi");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains(&format!(
            "the Slurm job {job} of session '{s}' ended (TIMEOUT"
        )),
        "{v}"
    );
    let new_job = c.job_of(&s);
    assert_ne!(new_job, job);
    let (_, v) = c.terminal(&s, "echo again");
    assert_eq!(v["output"], json!("again\n"), "{v}");
}

#[test]
fn a_job_that_cannot_start_within_the_queue_timeout_fails_and_is_cancelled() {
    // A held job never starts: it waits in the queue like one behind a full cluster.
    let Some(c) = Cluster::new(&[
        ("queue_timeout_seconds", "3"),
        ("extra_args", "[\"--hold\"]"),
    ]) else {
        return;
    };
    let s = c.session("queue");
    let started = Instant::now();
    let (run, v) = c.terminal(&s, "echo never");
    let waited = started.elapsed();
    assert_eq!(run.code, 1, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("did not start within queue_timeout_seconds = 3")
            && error.contains("JobHeldUser")
            && error.contains("it was cancelled"),
        "{v}"
    );
    assert!(
        waited >= Duration::from_secs(3) && waited < Duration::from_secs(20),
        "{waited:?}"
    );
    // The wait was reported while it lasted (the CLI's progress line).
    assert!(
        run.stderr.contains("is waiting in the queue (JobHeldUser)"),
        "{}",
        run.stderr
    );
    assert!(
        live_jobs_named(&c.job_name(&s)).is_empty(),
        "the held job was left queued"
    );
}

#[test]
fn closing_the_session_cancels_its_job_and_its_steps() {
    let Some(c) = Cluster::new(&[]) else { return };
    let s = c.session("close");
    let job = c.job_of(&s);
    let args = json!({"command": "sleep 300", "background": true}).to_string();
    let started = c.paddock(&call_argv("terminal", &args, &s, "slurm"));
    assert!(
        started.json()["session_id"].is_string(),
        "{}",
        started.stdout
    );
    assert!(!sruns_of(&job).is_empty(), "no holder step for job {job}");
    let closed = c.paddock(&["sessions", "close", &s]);
    assert_eq!(closed.code, 0, "{} {}", closed.stdout, closed.stderr);
    wait_until("the job is cancelled", Duration::from_secs(30), || {
        matches!(job_state(&job).as_str(), "CANCELLED" | "")
    });
    wait_until("the job's sruns end", Duration::from_secs(30), || {
        sruns_of(&job).is_empty()
    });
    assert!(live_jobs_named(&c.job_name(&s)).is_empty());
}

#[test]
fn slurm_refusing_the_request_is_a_clear_error() {
    let Some(c) = Cluster::new(&[("partition", "\"no-such-partition\"")]) else {
        return;
    };
    let s = c.session("refused");
    let (run, v) = c.terminal(&s, "echo hi");
    assert_eq!(run.code, 1, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("Slurm refused the allocation") && error.contains("partition"),
        "{v}"
    );
    assert!(live_jobs_named(&c.job_name(&s)).is_empty());
}
