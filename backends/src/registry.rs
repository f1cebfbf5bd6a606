//! Every backend kind, listed once: a new backend is its module (with a [`BackendSection`])
//! plus one line in the [`backend_kinds!`] list below. The engine knows no kind by name: it
//! parses `[backends.NAME]` through [`BackendConfig::parse`] and builds through
//! [`BackendConfig::build`].

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::Environment;
use crate::section::{BackendSection, BuildContext, SectionError, Spanned};

/// Declares [`BackendConfig`], one variant per kind, and dispatches to each kind's section.
macro_rules! backend_kinds {
    ($($variant:ident => $section:ty),+ $(,)?) => {
        /// One `[backends.NAME]` section, typed by its `kind`.
        #[derive(Debug, Clone, Serialize)]
        #[serde(tag = "kind", rename_all = "lowercase")]
        pub enum BackendConfig {
            $($variant($section),)+
        }

        impl BackendConfig {
            /// Every `kind` a policy may name, aliases included, in the order listed.
            pub fn kinds() -> Vec<&'static str> {
                let mut all = Vec::new();
                $(
                    all.push(<$section as BackendSection>::KIND);
                    all.extend_from_slice(<$section as BackendSection>::ALIASES);
                )+
                all
            }

            /// The canonical name of `kind` (an alias's kind); `None`: no such kind.
            pub fn canonical(kind: &str) -> Option<&'static str> {
                $(
                    if kind == <$section as BackendSection>::KIND
                        || <$section as BackendSection>::ALIASES.contains(&kind)
                    {
                        return Some(<$section as BackendSection>::KIND);
                    }
                )+
                None
            }

            /// The section of `kind` from its keys (all but `kind`); `None`: no such kind.
            pub fn parse(
                kind: &str,
                keys: Spanned<toml::de::DeValue<'_>>,
            ) -> Option<Result<Self, toml::de::Error>> {
                $(
                    if kind == <$section as BackendSection>::KIND
                        || <$section as BackendSection>::ALIASES.contains(&kind)
                    {
                        let keys = toml::de::ValueDeserializer::from(keys);
                        return Some(<$section>::deserialize(keys).map(Self::$variant));
                    }
                )+
                None
            }

            /// Its kind's canonical name.
            pub fn kind(&self) -> &'static str {
                match self {
                    $(Self::$variant(_) => <$section as BackendSection>::KIND,)+
                }
            }

            /// See [`BackendSection::check`].
            pub fn check(&self) -> Result<(), SectionError> {
                match self {
                    $(Self::$variant(s) => s.check(),)+
                }
            }

            /// See [`BackendSection::network`].
            pub fn network(&self) -> Option<&Spanned<String>> {
                match self {
                    $(Self::$variant(s) => s.network(),)+
                }
            }

            /// See [`BackendSection::proxy_refusal`].
            pub fn proxy_refusal(&self) -> Option<&'static str> {
                match self {
                    $(Self::$variant(s) => s.proxy_refusal(),)+
                }
            }

            /// See [`BackendSection::env`].
            pub fn env(&self) -> &BTreeMap<String, String> {
                match self {
                    $(Self::$variant(s) => s.env(),)+
                }
            }

            /// See [`BackendSection::build`].
            pub fn build(&self, ctx: &BuildContext<'_>) -> Arc<dyn Environment> {
                match self {
                    $(Self::$variant(s) => s.build(ctx),)+
                }
            }
        }
    };
}

backend_kinds! {
    Local => crate::local::section::LocalSection,
    Docker => crate::docker::section::DockerSection,
    Ssh => crate::ssh::section::SshSection,
    Apptainer => crate::apptainer::section::ApptainerSection,
    Slurm => crate::slurm::section::SlurmSection,
}

impl BackendConfig {
    /// Whether commands get no network of their own and reach out through the egress proxy.
    pub fn is_proxied(&self) -> bool {
        self.network().is_some_and(|n| n.get_ref() == "proxy")
    }
}
