//! A docker session's files in a snapshot: `docker commit` of its container (its /tmp, a
//! tmpfs, is not in the image; the shell state there is carried apart), and a forked session's
//! container made from that image.

use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptionsBuilder, RemoveImageOptionsBuilder};

use super::{DockerTransport, status_of};
use crate::Result;

/// The repository of snapshot images; the tag names the home and the snapshot.
const REPOSITORY: &str = "paddock-snapshot";

/// /tmp into an archive in the container's root (`/.paddock-tmp.tar`: the tmpfs itself is not
/// committed, the archive is), before the commit.
const ARCHIVE_TMP: &str = "tar -C /tmp -cf /.paddock-tmp.tar .";
/// The archive out of the live container, after the commit.
const DROP_TMP_ARCHIVE: &str = "rm -f /.paddock-tmp.tar";
/// The archive into a fork's /tmp, Paddock's own directory there (`.paddock`, the agent's)
/// left out: the fork's agent has its own. Nothing to do for an image without one.
const RESTORE_TMP: &str = "[ -f /.paddock-tmp.tar ] || exit 0; \
     r=/tmp/.paddock-restore && mkdir -p \"$r\" && tar -C \"$r\" -xf /.paddock-tmp.tar && \
     rm -rf \"$r/.paddock\" && cd \"$r\" && \
     for f in .[!.]* ..?* *; do if [ -e \"$f\" ] || [ -L \"$f\" ]; then mv -f \"$f\" /tmp/ || exit 1; fi; done && \
     cd / && rmdir \"$r\" && rm -f /.paddock-tmp.tar";

impl DockerTransport {
    /// The image name of snapshot `tag` of this backend, for this home (docker's names are
    /// lowercase).
    pub(super) fn snapshot_image(&self, tag: &str) -> String {
        format!(
            "{REPOSITORY}:{}-{}-{}",
            self.config.name.to_ascii_lowercase(),
            self.config.home,
            tag.to_ascii_lowercase()
        )
    }

    /// Commits the session's container (paused for the moment it takes); answers the image
    /// and its size. A session without a container here is an error naming it.
    pub(super) async fn commit(&self, session: &str, tag: &str) -> Result<(String, u64)> {
        crate::shell::check_session(session)?;
        let docker = self.client().await?;
        let name = self.container_name(session);
        let image = self.snapshot_image(tag);
        let (repo, image_tag) = image.split_once(':').unwrap_or((&image, "latest"));
        // /tmp is a tmpfs, which `docker commit` does not see: its files go into the image as
        // an archive, unpacked into the fork's /tmp before its first command.
        let tmp_carried = self.run_quietly(&name, ARCHIVE_TMP).await == Some(0);
        if !tmp_carried {
            tracing::warn!(
                session,
                "the snapshot does not carry /tmp: it could not be archived (a read-only root?)"
            );
        }
        let options = CommitContainerOptionsBuilder::default()
            .container(&name)
            .repo(repo)
            .tag(image_tag)
            .comment(&format!("paddock snapshot {tag} of session {session}"))
            .pause(true)
            .build();
        let committed = docker
            .commit_container(options, ContainerConfig::default())
            .await;
        if tmp_carried {
            self.run_quietly(&name, DROP_TMP_ARCHIVE).await;
        }
        match committed {
            Ok(_) => {}
            Err(e) if status_of(&e) == Some(404) => {
                return Err(self.unavailable(format!(
                    "session '{session}' has no container here (closed, or it never ran a \
                     command on this backend)"
                )));
            }
            Err(e) => return Err(self.lost(e)),
        }
        let size = docker
            .inspect_image(&image)
            .await
            .ok()
            .and_then(|i| i.size)
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(0);
        Ok((image, size))
    }

    /// Makes the session's container from `image` now (a forked session: none exists yet).
    pub(super) async fn start_from(&self, session: &str, image: &str) -> Result<()> {
        crate::shell::check_session(session)?;
        let docker = self.client().await?;
        if let Err(e) = docker.inspect_image(image).await {
            return Err(if status_of(&e) == Some(404) {
                self.unavailable(format!(
                    "the snapshot's image {image} is gone from this docker host (removed outside \
                     Paddock?): remove the snapshot with `paddock snapshots rm`"
                ))
            } else {
                self.lost(e)
            });
        }
        let name = self.container_name(session);
        if docker
            .inspect_container(
                &name,
                None::<bollard::query_parameters::InspectContainerOptions>,
            )
            .await
            .is_ok()
        {
            return Err(self.unavailable(format!(
                "session '{session}' already has a container ({name}): a fork needs a new \
                 session id"
            )));
        }
        if let Ok(mut from) = self.from_snapshot.lock() {
            from.insert(name.clone(), image.to_owned());
        }
        let name = self.ensure_container(session).await?;
        match self.run_quietly(&name, RESTORE_TMP).await {
            Some(0) => Ok(()),
            other => Err(self.unavailable(format!(
                "the snapshot's /tmp could not be restored in {name} (exit {other:?})"
            ))),
        }
    }

    /// Runs a shell line in the container, its output dropped: its exit code, or None when
    /// docker could not run it.
    async fn run_quietly(&self, name: &str, line: &str) -> Option<i32> {
        let run = crate::remote::TargetRun {
            argv: vec!["sh".into(), "-c".into(), line.into()],
            stdin: None,
            pty: false,
            keep_detached: false,
        };
        let sink = crate::stream::OutputSink::new(4096);
        match self.exec_once(name, &run, &sink).await {
            Ok(code) => Some(code),
            Err(err) => {
                tracing::warn!(container = name, %err, "docker exec failed");
                None
            }
        }
    }

    /// Removes a snapshot's image (gone already: nothing to do).
    pub(super) async fn remove_snapshot_image(&self, image: &str) -> Result<()> {
        if !image.starts_with(&format!("{REPOSITORY}:")) {
            return Err(self.unavailable(format!("{image} is not a snapshot image")));
        }
        let docker = self.client().await?;
        match docker
            .remove_image(
                image,
                Some(RemoveImageOptionsBuilder::default().force(true).build()),
                None,
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if status_of(&e) == Some(404) => Ok(()),
            Err(e) => Err(self.lost(e)),
        }
    }
}
