//! A docker session's files in a snapshot: `docker commit` of its container (its /tmp, a
//! tmpfs, is not in the image; the shell state there is carried apart), and a forked session's
//! container made from that image.

use bollard::models::ContainerConfig;
use bollard::query_parameters::{CommitContainerOptionsBuilder, RemoveImageOptionsBuilder};

use super::{DockerTransport, status_of};
use crate::Result;

/// The repository of snapshot images; the tag names the home and the snapshot.
const REPOSITORY: &str = "paddock-snapshot";

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
        let options = CommitContainerOptionsBuilder::default()
            .container(&name)
            .repo(repo)
            .tag(image_tag)
            .comment(&format!("paddock snapshot {tag} of session {session}"))
            .pause(true)
            .build();
        match docker
            .commit_container(options, ContainerConfig::default())
            .await
        {
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
        self.ensure_container(session).await.map(drop)
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
