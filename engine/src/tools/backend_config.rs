//! From a policy's `[backends.NAME]` sections to running [`Environment`]s. What each kind's
//! keys mean belongs to its backend module ([`paddock_backends::registry`]); this module only
//! adds the backend every policy has and what the engine provides to every constructor.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use paddock_backends::Environment;
use paddock_backends::local::section::LocalSection;
use paddock_backends::section::BuildContext;

use crate::policy::{BackendConfig, Policy};

/// The name of the backend every policy has: declared, or else [`implicit_local`].
pub const LOCAL: &str = "local";

/// The `local` backend of a policy that declares none (the built-in policy among them):
/// `policies/default.toml`'s, the workspace-write sandbox over the directory Paddock runs in,
/// with no network.
pub fn implicit_local() -> BackendConfig {
    BackendConfig::Local(LocalSection::implicit())
}

/// Every backend of `policy` with its name: the declared ones, and [`implicit_local`] when
/// none is named `local`.
pub fn backends_of(policy: &Policy) -> Vec<(String, BackendConfig)> {
    let mut all: Vec<(String, BackendConfig)> = policy
        .backends
        .iter()
        .map(|(name, config)| (name.clone(), config.clone()))
        .collect();
    if !policy.backends.contains_key(LOCAL) {
        all.push((LOCAL.to_owned(), implicit_local()));
    }
    all
}

/// The environment for one backend section (checked when the policy loaded).
pub fn build(
    policy: &Policy,
    name: &str,
    config: &BackendConfig,
    state_root: &Path,
    exe: &Path,
    egress: Option<&Arc<crate::network::Egress>>,
) -> Arc<dyn Environment> {
    let ctx = BuildContext {
        name,
        // Relative host paths are relative to the policy file (the current directory for the
        // built-in policy).
        policy_dir: policy
            .source
            .as_deref()
            .and_then(Path::parent)
            .filter(|p| !p.as_os_str().is_empty())
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf),
        state_root,
        exe,
        egress: egress
            .filter(|_| config.is_proxied())
            .map(|egress| egress.for_backend(name)),
    };
    config.build(&ctx)
}
#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;
    use toml::Spanned;

    use super::*;

    /// The keys of a local backend section that are set, with their values (another kind:
    /// its kind alone).
    fn local_keys(config: &BackendConfig) -> Vec<(&'static str, String)> {
        let BackendConfig::Local(config) = config else {
            return vec![("kind", config.kind().to_owned())];
        };
        let text = |v: &Option<Spanned<String>>| v.as_ref().map(|s| s.get_ref().clone());
        [
            ("kind", Some("local".to_owned())),
            ("sandbox", text(&config.sandbox)),
            ("workspace", text(&config.workspace)),
            ("network", text(&config.network)),
            ("workdir", text(&config.workdir)),
            (
                "agent",
                config.agent.as_ref().map(|v| v.get_ref().to_string()),
            ),
            (
                "max_processes",
                config
                    .max_processes
                    .as_ref()
                    .map(|v| v.get_ref().to_string()),
            ),
            (
                "cpus",
                config.cpus.as_ref().map(|v| v.get_ref().to_string()),
            ),
            (
                "tmp_size_mb",
                config.tmp_size_mb.as_ref().map(|v| v.get_ref().to_string()),
            ),
            (
                "workspace_write_mb",
                config
                    .workspace_write_mb
                    .as_ref()
                    .map(|v| v.get_ref().to_string()),
            ),
        ]
        .into_iter()
        .filter_map(|(k, v)| v.map(|v| (k, v)))
        .chain(config.env.iter().map(|(k, v)| ("env", format!("{k}={v}"))))
        .collect()
    }

    #[test]
    fn the_implicit_local_backend_is_the_one_of_policies_default_toml() {
        let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("../policies/default.toml");
        let shipped = Policy::load(&file).unwrap();
        let declared = &shipped.backends[LOCAL];
        assert_eq!(local_keys(&implicit_local()), local_keys(declared));
        assert_eq!(
            local_keys(&implicit_local()),
            vec![
                ("kind", "local".to_owned()),
                ("sandbox", "workspace-write".to_owned()),
                ("workspace", ".".to_owned()),
                ("network", "none".to_owned()),
                ("max_processes", "1024".to_owned()),
            ]
        );
    }

    #[test]
    fn a_policy_without_a_local_backend_gets_the_sandboxed_one() {
        let names = |p: &Policy| {
            backends_of(p)
                .into_iter()
                .map(|(name, config)| (name, local_keys(&config)))
                .collect::<Vec<_>>()
        };
        let builtin = names(&Policy::builtin());
        assert_eq!(
            builtin,
            vec![("local".to_owned(), local_keys(&implicit_local()))]
        );
        // Another backend declared: `local` is still the sandboxed one.
        let p = Policy::parse(
            "[backends.box]\nkind = \"docker\"\nimage = \"debian\"\n",
            "p.toml",
        )
        .unwrap();
        let all = names(&p);
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[1], ("local".to_owned(), local_keys(&implicit_local())));
        // A declared `local` is taken as written, `sandbox = "none"` included.
        let p = Policy::parse(
            "[backends.local]\nkind = \"local\"\nsandbox = \"none\"\n",
            "p.toml",
        )
        .unwrap();
        assert_eq!(
            names(&p),
            vec![(
                "local".to_owned(),
                vec![("kind", "local".to_owned()), ("sandbox", "none".to_owned())]
            )]
        );
    }

    /// The ceilings' keys: where they apply, zero and nonsense refused, the reasons named.
    #[test]
    fn ceiling_keys_are_checked_with_their_line() {
        let err = |text: &str| Policy::parse(text, "p.toml").unwrap_err().to_string();
        let local = "[backends.local]\nkind = \"local\"\n";
        let p = Policy::parse(
            &format!(
                "{local}max_processes = 64\ncpus = 0.5\ntmp_size_mb = 16\nworkspace_write_mb = 8\n"
            ),
            "p.toml",
        )
        .unwrap();
        let BackendConfig::Local(c) = &p.backends["local"] else {
            panic!("not local")
        };
        assert_eq!(c.max_processes.as_ref().map(|v| *v.get_ref()), Some(64));
        assert_eq!(c.workspace_write_mb.as_ref().map(|v| *v.get_ref()), Some(8));
        let e = err(&format!("{local}max_processes = 0\n"));
        assert!(
            e.starts_with("p.toml:3: backends.local.max_processes: must be at least 1"),
            "{e}"
        );
        let e = err(&format!("{local}cpus = -1.0\n"));
        assert!(
            e.starts_with("p.toml:3: backends.local.cpus: must be a positive"),
            "{e}"
        );
        let e = err(&format!("{local}sandbox = \"none\"\ntmp_size_mb = 16\n"));
        assert!(
            e.starts_with("p.toml:4: backends.local.tmp_size_mb: sizes the session's private /tmp"),
            "{e}"
        );
        let e = err(&format!(
            "{local}sandbox = \"read-only\"\nworkspace_write_mb = 8\n"
        ));
        assert!(
            e.starts_with("p.toml:4: backends.local.workspace_write_mb:"),
            "{e}"
        );
        let docker = "[backends.d]\nkind = \"docker\"\nimage = \"x\"\n";
        let e = err(&format!("{docker}pids_limit = 10\nmax_processes = 20\n"));
        assert!(
            e.starts_with("p.toml:5: backends.d.max_processes: `pids_limit` is the older name"),
            "{e}"
        );
        let apptainer = "[backends.a]\nkind = \"apptainer\"\nimage = \"x.sif\"\n";
        let e = err(&format!("{apptainer}tmp_size_mb = 16\n"));
        assert!(
            e.starts_with("p.toml:4: backends.a.tmp_size_mb: Apptainer has no flag for it"),
            "{e}"
        );
        Policy::parse(&format!("{apptainer}max_processes = 64\n"), "p.toml").unwrap();
        let ssh = "[backends.s]\nkind = \"ssh\"\nhost = \"h\"\n";
        let e = err(&format!("{ssh}max_processes = 64\n"));
        assert!(e.contains("does not apply to a ssh backend"), "{e}");
    }
}
