//! Slurm jobs as sessions: asking for an allocation (`salloc --no-shell`, the queue wait
//! reported and bounded), reading a job's state (`scontrol show job`), cancelling (`scancel`).
//! Only Slurm's client programs run here, on the login node.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, BufReader};

use crate::progress;

/// How often a job waiting in the queue is reported.
const QUEUE_REPORT_EVERY: Duration = Duration::from_secs(10);
/// How long one Slurm client command may take (a controller that does not answer).
const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);

/// Where Slurm's client programs are, and who we are to Slurm.
#[derive(Debug, Clone)]
pub struct SlurmClient {
    /// `sbatch`, `salloc`, `srun`, `scontrol`, `squeue`, `scancel` are here; PATH when `None`.
    pub bin_dir: Option<PathBuf>,
    /// Our uid: `squeue`/`scancel` only ever see this user's jobs.
    pub uid: u32,
}

/// Slurm's default `SlurmdPort`.
const DEFAULT_SLURMD_PORT: u16 = 6818;

/// How long a node's slurmd may take to accept a connection before it counts as gone.
const SLURMD_PROBE_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// A job's state as Slurm reports it (`RUNNING`, `PENDING`, `TIMEOUT`, `CANCELLED`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobState {
    pub state: String,
    pub reason: String,
}

impl JobState {
    pub fn is_running(&self) -> bool {
        self.state == "RUNNING"
    }

    pub fn is_pending(&self) -> bool {
        matches!(self.state.as_str(), "PENDING" | "CONFIGURING" | "REQUEUED")
    }
}

/// Why an allocation was not had.
#[derive(Debug)]
pub enum AllocationError {
    /// Slurm refused the request (bad partition, too many CPUs, ...): its words.
    Refused(String),
    /// The job waited `waited` in the queue and was cancelled.
    QueueTimeout {
        job: String,
        waited: Duration,
        reason: String,
    },
    /// A client program could not be run.
    Client(String),
}

impl SlurmClient {
    pub fn program(&self, name: &str) -> PathBuf {
        match &self.bin_dir {
            Some(dir) => dir.join(name),
            None => PathBuf::from(name),
        }
    }

    /// Runs a short client command; answers (success, stdout, stderr).
    pub async fn command(
        &self,
        name: &str,
        args: &[&str],
    ) -> Result<(bool, String, String), String> {
        let program = self.program(name);
        let run = tokio::process::Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output();
        match tokio::time::timeout(CLIENT_TIMEOUT, run).await {
            Err(_) => Err(format!(
                "{} {} did not answer within {} s (is slurmctld up?)",
                program.display(),
                args.join(" "),
                CLIENT_TIMEOUT.as_secs()
            )),
            Ok(Err(e)) => Err(format!(
                "cannot run {}: {e} (is Slurm's client installed? set `slurm_bin_dir`)",
                program.display()
            )),
            Ok(Ok(out)) => Ok((
                out.status.success(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
                String::from_utf8_lossy(&out.stderr).into_owned(),
            )),
        }
    }

    /// The state of `job`; `None` when Slurm no longer knows it (ended longer ago than its
    /// `MinJobAge`).
    pub async fn job_state(&self, job: &str) -> Result<Option<JobState>, String> {
        let (ok, out, err) = self
            .command("scontrol", &["show", "job", "-o", job])
            .await?;
        if !ok {
            if err.contains("Invalid job id") {
                return Ok(None);
            }
            return Err(format!("scontrol show job {job}: {}", err.trim()));
        }
        Ok(parse_job_state(&out))
    }

    /// The address of the node a running one-node `job` is on (`NodeAddr`, which is how Slurm
    /// itself reaches the node's slurmd), and the node's name.
    pub async fn node_of(&self, job: &str) -> Result<(String, String), String> {
        let (ok, out, err) = self
            .command("squeue", &["-h", "-j", job, "-o", "%N"])
            .await?;
        let node = out.trim().to_owned();
        if !ok || node.is_empty() || node.contains(',') || node.contains('[') {
            return Err(format!(
                "Slurm names no single node for job {job} ({}{})",
                node,
                err.trim()
            ));
        }
        let (ok, out, err) = self
            .command("scontrol", &["show", "node", "-o", &node])
            .await?;
        if !ok {
            return Err(format!("scontrol show node {node}: {}", err.trim()));
        }
        let address = out
            .split_whitespace()
            .find_map(|f| f.strip_prefix("NodeAddr="))
            .filter(|a| !a.is_empty() && *a != "(null)")
            .unwrap_or(&node)
            .to_owned();
        Ok((address, node))
    }

    /// Whether the slurmd of the node at `address` answers on Slurm's `SlurmdPort`: `Err`
    /// says how it does not (refused, unreachable, silent). srun itself reaches slurmd there to
    /// start a step, so a node whose slurmd does not answer can start no step of its jobs,
    /// whatever slurmctld still believes of them (it notices only after `SlurmdTimeout`).
    pub async fn slurmd_answers(&self, address: &str) -> Result<(), String> {
        let port = self.slurmd_port().await;
        match tokio::time::timeout(
            SLURMD_PROBE_WAIT,
            tokio::net::TcpStream::connect((address, port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(err)) => Err(format!("{address}:{port}: {err}")),
            Err(_) => Err(format!(
                "{address}:{port}: no answer within {} s",
                SLURMD_PROBE_WAIT.as_secs()
            )),
        }
    }

    /// `SlurmdPort` of the cluster's configuration (6818, Slurm's default, when it cannot be
    /// read).
    async fn slurmd_port(&self) -> u16 {
        let Ok((true, out, _)) = self.command("scontrol", &["show", "config"]).await else {
            return DEFAULT_SLURMD_PORT;
        };
        out.lines()
            .filter_map(|line| line.split_once('='))
            .find(|(key, _)| key.trim() == "SlurmdPort")
            .and_then(|(_, value)| value.trim().parse().ok())
            .unwrap_or(DEFAULT_SLURMD_PORT)
    }

    /// This user's jobs: (id, name).
    pub async fn own_jobs(&self) -> Result<Vec<(String, String)>, String> {
        let uid = self.uid.to_string();
        let (ok, out, err) = self
            .command("squeue", &["-h", "-u", &uid, "-o", "%i %j"])
            .await?;
        if !ok {
            return Err(format!("squeue: {}", err.trim()));
        }
        Ok(out
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(id, name)| (id.trim().to_owned(), name.trim().to_owned()))
            .collect())
    }

    /// Cancels this user's jobs named `name` (and `job`, when known).
    pub async fn cancel(&self, name: &str, job: Option<&str>) -> Result<(), String> {
        let uid = self.uid.to_string();
        let name_arg = format!("--name={name}");
        let user_arg = format!("--user={uid}");
        let (ok, _, err) = self
            .command("scancel", &["--quiet", &user_arg, &name_arg])
            .await?;
        if !ok {
            return Err(format!("scancel --name={name}: {}", err.trim()));
        }
        if let Some(job) = job {
            let (ok, _, err) = self.command("scancel", &["--quiet", job]).await?;
            if !ok && !err.contains("Invalid job id") && !err.contains("already completing") {
                return Err(format!("scancel {job}: {}", err.trim()));
            }
        }
        Ok(())
    }

    /// Asks for an allocation with `args` (`salloc --no-shell` and the job's options) and waits
    /// until it is granted, reporting the queue wait, for at most `queue_timeout`; a job still
    /// waiting then is cancelled. `on_job` hears the job id as soon as Slurm gives it.
    pub async fn allocate(
        &self,
        args: &[String],
        queue_timeout: Duration,
        on_job: impl Fn(&str),
    ) -> Result<String, AllocationError> {
        let program = self.program("salloc");
        let mut child = tokio::process::Command::new(&program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .map_err(|e| {
                AllocationError::Client(format!(
                    "cannot run {}: {e} (is Slurm's client installed? set `slurm_bin_dir`)",
                    program.display()
                ))
            })?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| AllocationError::Client("salloc has no stderr pipe".into()))?;
        let mut lines = BufReader::new(stderr).lines();
        let started = Instant::now();
        let deadline = started + queue_timeout;
        let mut next_report = started + Duration::from_secs(1);
        let mut job: Option<String> = None;
        let mut granted = false;
        let mut said = Vec::new();
        loop {
            tokio::select! {
                line = lines.next_line() => match line {
                    Ok(Some(line)) => {
                        if let Some(id) = job_id_in(&line) && job.is_none() {
                            on_job(&id);
                            job = Some(id);
                        }
                        granted |= line.contains("Granted job allocation");
                        if !line.contains("Pending job allocation")
                            && !line.contains("queued and waiting")
                        {
                            said.push(line.trim_start_matches("salloc: ").to_owned());
                        }
                    }
                    Ok(None) | Err(_) => break,
                },
                () = tokio::time::sleep_until(deadline.min(next_report).into()) => {
                    if Instant::now() >= deadline {
                        let reason = match &job {
                            Some(id) => self.pending_reason(id).await,
                            None => String::new(),
                        };
                        if let Some(id) = &job {
                            let _ = self.command("scancel", &["--quiet", id]).await;
                        }
                        let _ = child.kill().await;
                        return Err(AllocationError::QueueTimeout {
                            job: job.unwrap_or_else(|| "(no id yet)".into()),
                            waited: started.elapsed(),
                            reason,
                        });
                    }
                    let reason = match &job {
                        Some(id) => self.pending_reason(id).await,
                        None => String::new(),
                    };
                    progress::report(format!(
                        "Slurm job {} is waiting in the queue{}: {} s of at most {} \
                         (queue_timeout_seconds)",
                        job.as_deref().unwrap_or("(no id yet)"),
                        if reason.is_empty() { String::new() } else { format!(" ({reason})") },
                        started.elapsed().as_secs(),
                        queue_timeout.as_secs()
                    ));
                    next_report = Instant::now() + QUEUE_REPORT_EVERY;
                }
            }
        }
        let status = child
            .wait()
            .await
            .map_err(|e| AllocationError::Client(format!("salloc: {e}")))?;
        match job {
            Some(id) if granted && status.success() => Ok(id),
            _ => Err(AllocationError::Refused(if said.is_empty() {
                format!("salloc exited with {status} and said nothing")
            } else {
                said.join("; ")
            })),
        }
    }

    /// Why a pending job waits (`Resources`, `Priority`, `JobHeldUser`, ...).
    async fn pending_reason(&self, job: &str) -> String {
        match self.job_state(job).await {
            Ok(Some(state)) => state.reason,
            _ => String::new(),
        }
    }
}

/// The job id in a line of salloc's (`salloc: Granted job allocation 42`, `salloc: Pending
/// job allocation 42`).
fn job_id_in(line: &str) -> Option<String> {
    let rest = line.split("job allocation ").nth(1)?;
    let id: String = rest.chars().take_while(char::is_ascii_digit).collect();
    (!id.is_empty()).then_some(id)
}

/// `JobState=` and `Reason=` of a one-line `scontrol show job -o`.
fn parse_job_state(line: &str) -> Option<JobState> {
    let field = |key: &str| {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(key))
            .map(str::to_owned)
    };
    Some(JobState {
        state: field("JobState=")?,
        reason: field("Reason=").unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_ids_are_read_from_salloc_lines() {
        assert_eq!(
            job_id_in("salloc: Granted job allocation 42").as_deref(),
            Some("42")
        );
        assert_eq!(
            job_id_in("salloc: Pending job allocation 7").as_deref(),
            Some("7")
        );
        assert_eq!(
            job_id_in("salloc: job 7 queued and waiting for resources"),
            None
        );
        assert_eq!(job_id_in("salloc: error: Invalid partition name"), None);
    }

    #[test]
    fn state_and_reason_are_read_from_scontrol() {
        let line = "JobId=12 JobName=paddock-slurm-s UserId=root(0) JobState=TIMEOUT \
                    Reason=TimeLimit Dependency=(null) Requeue=1";
        assert_eq!(
            parse_job_state(line),
            Some(JobState {
                state: "TIMEOUT".into(),
                reason: "TimeLimit".into()
            })
        );
        assert_eq!(parse_job_state("garbage"), None);
    }
}
