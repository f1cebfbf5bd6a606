//! The warm pool: `[backends.NAME] warm = N` keeps N containers made and started, their agents
//! listening, so that a new session's first command claims one instead of waiting for a
//! container to be created.
//!
//! A warm container is named `paddock-<backend>-.warm-<random>`: a session id never starts with
//! `.`, so no session's container can have such a name. Claiming renames it to the session's
//! container name (dockerd renames atomically: of two engines claiming the same container one
//! gets a conflict and tries the next) and links the session's agent directory to the one the
//! container was made with, where its agent already listens. Refilling runs in a detached
//! `paddock __docker-warm SPEC` (one at a time per backend, by a lock), so a short `paddock
//! call` neither waits for it nor cuts it off.

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};

use bollard::Docker;
use bollard::query_parameters::RenameContainerOptions;
use serde::{Deserialize, Serialize};

use super::{DockerConfig, DockerTransport, status_of};
use crate::agent::{AgentHost, agent_dir};
use crate::remote::TargetRun;
use crate::{BackendError, Result};

/// What starts the session part of a warm container's name.
pub const WARM_MARK: &str = ".warm-";
/// The hidden subcommand that fills a backend's pool: `paddock __docker-warm SPEC_JSON`.
pub const WARM_SUBCOMMAND: &str = "__docker-warm";

/// What the filler process needs to act as the backend.
#[derive(Debug, Serialize, Deserialize)]
struct WarmSpec {
    config: DockerConfig,
    runtime_dir: Option<PathBuf>,
    exe: PathBuf,
}

impl DockerTransport {
    /// Running warm containers made with the current settings: (id, name).
    async fn warm_containers(&self, docker: &Docker) -> Result<Vec<(String, String)>> {
        let labels = vec![
            format!("paddock.warm={}", self.config.name),
            format!("paddock.home={}", self.config.home),
            format!("paddock.config={}", self.config_digest),
        ];
        let list = super::labelled_containers(docker, labels, false)
            .await
            .map_err(|e| self.lost(e))?;
        let prefix = format!("/{}{WARM_MARK}", self.name_prefix());
        Ok(list
            .into_iter()
            .filter_map(|c| {
                let name = c
                    .names?
                    .into_iter()
                    .find(|n| n.starts_with(&prefix))?
                    .trim_start_matches('/')
                    .to_owned();
                Some((c.id?, name))
            })
            .collect())
    }

    /// Gives `session` a warm container, when the pool has one; starts a refill either way
    /// when the pool is short.
    pub(super) async fn claim_warm(&self, session: &str) -> Result<bool> {
        if self.config.warm == 0 || self.config.agent.is_none() {
            return Ok(false);
        }
        let docker = self.client().await?;
        let target = self.container_name(session);
        let pool = self.warm_containers(docker).await?;
        let mut claimed = false;
        for (id, name) in &pool {
            let renamed = docker
                .rename_container(
                    id,
                    RenameContainerOptions {
                        name: target.clone(),
                    },
                )
                .await;
            match renamed {
                Ok(()) => {
                    self.link_agent_dir(name, &target)?;
                    if let Ok(mut running) = self.running.lock() {
                        running.insert(target.clone());
                    }
                    tracing::debug!(backend = %self.config.name, container = %name, session, "claimed a warm container");
                    claimed = true;
                    break;
                }
                // Claimed by another engine a moment ago, or the session already has a
                // container of that name.
                Err(e) if matches!(status_of(&e), Some(404 | 409)) => {}
                Err(e) => return Err(self.lost(e)),
            }
        }
        if claimed || pool.len() < self.config.warm {
            self.spawn_refill();
        }
        Ok(claimed)
    }

    /// The session's agent directory becomes a link to the warm container's, where the socket
    /// was bound when the container was made.
    fn link_agent_dir(&self, warm_name: &str, session_name: &str) -> Result<()> {
        let Some(agent) = &self.config.agent else {
            return Ok(());
        };
        let target = agent_dir(&agent.runtime_dir, warm_name);
        let link = agent_dir(&agent.runtime_dir, session_name);
        if let Ok(meta) = std::fs::symlink_metadata(&link) {
            let _ = if meta.is_dir() {
                std::fs::remove_dir_all(&link)
            } else {
                std::fs::remove_file(&link)
            };
        }
        std::os::unix::fs::symlink(&target, &link).map_err(|e| BackendError::State {
            path: link.display().to_string(),
            reason: format!("cannot link the claimed container's agent directory: {e}"),
        })
    }

    /// Starts the detached filler (`paddock __docker-warm`).
    pub(super) fn spawn_refill(&self) {
        let spec = WarmSpec {
            config: self.config.clone(),
            runtime_dir: self.config.agent.as_ref().map(|a| a.runtime_dir.clone()),
            exe: self.exe.clone(),
        };
        let Ok(json) = serde_json::to_string(&spec) else {
            return;
        };
        let spawned = std::process::Command::new(&self.exe)
            .arg(WARM_SUBCOMMAND)
            .arg(json)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match spawned {
            // Reaped by a thread: a long-lived `paddock serve` leaves no zombies.
            Ok(mut child) => {
                std::thread::spawn(move || child.wait());
            }
            Err(err) => {
                tracing::warn!(backend = %self.config.name, %err, "could not start the warm pool filler")
            }
        }
    }

    /// Brings the pool to exactly `warm` containers: surplus removed, missing ones made and
    /// their agents started.
    async fn fill(&self) -> Result<()> {
        let Some(agent) = &self.config.agent else {
            return Ok(());
        };
        std::fs::create_dir_all(&agent.runtime_dir)?;
        let lock = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(
                agent
                    .runtime_dir
                    .join(format!("warm-{}.lock", self.config.name)),
            )?;
        // Another filler of this backend is at work: it will see what this one would.
        if rustix::fs::flock(&lock, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            return Ok(());
        }
        let docker = self.client().await?;
        self.swept.get_or_init(|| self.sweep(docker)).await;
        // Sessions may claim while this runs (their own filler found the lock taken): look
        // again until the pool holds its size.
        for _round in 0..4 {
            let pool = self.warm_containers(docker).await?;
            if pool.len() == self.config.warm {
                break;
            }
            self.fill_once(docker, &pool).await?;
        }
        Ok(())
    }

    async fn fill_once(&self, docker: &Docker, pool: &[(String, String)]) -> Result<()> {
        for (id, _) in pool.iter().skip(self.config.warm) {
            let _ = super::force_remove(docker, id).await;
        }
        for _ in pool.len()..self.config.warm {
            let session = crate::ids::new_run_id(WARM_MARK);
            let name = self.container_name(&session);
            self.create(docker, &session, &name).await?;
            let sink = crate::stream::OutputSink::new(4096);
            let run = TargetRun {
                argv: self.agent_start_argv(&session),
                stdin: None,
                pty: false,
                keep_detached: false,
            };
            let status = self
                .exec_once(&name, &run, &sink)
                .await
                .map_err(|e| self.lost(e))?;
            if status != 0 {
                let said = sink.finish().0;
                let _ = super::force_remove(docker, &name).await;
                return Err(self.unavailable(format!(
                    "a warm container's agent did not start (exit {status}): {}",
                    said.trim()
                )));
            }
            tracing::debug!(backend = %self.config.name, container = %name, "warm container ready");
        }
        Ok(())
    }
}

/// `paddock __docker-warm SPEC_JSON`: fills one backend's warm pool, then exits.
pub fn warm_main(spec_json: &str) -> ExitCode {
    let result = (|| -> std::result::Result<(), String> {
        let mut spec: WarmSpec =
            serde_json::from_str(spec_json).map_err(|e| format!("bad warm spec: {e}"))?;
        if let (Some(agent), Some(dir)) = (spec.config.agent.as_mut(), spec.runtime_dir) {
            agent.runtime_dir = dir;
        }
        let transport = DockerTransport::new(spec.config, spec.exe);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        runtime
            .block_on(transport.fill())
            .map_err(|e| e.to_string())
    })();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            tracing::error!(%err, "filling the warm pool failed");
            ExitCode::from(1)
        }
    }
}
