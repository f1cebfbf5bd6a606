//! Toolsets: named bundles of tools, composites that include other toolsets, presets, and old
//! names that still resolve after a rename.

use std::collections::{BTreeMap, BTreeSet};

/// One toolset. Its members are the tools whose spec names it, plus `tools`, plus every member
/// of the toolsets it `includes`.
#[derive(Debug, Clone, PartialEq)]
pub struct Toolset {
    pub name: String,
    pub description: String,
    pub tools: Vec<String>,
    pub includes: Vec<String>,
}

/// Toolsets, renames and presets.
#[derive(Debug, Clone)]
pub struct Toolsets {
    sets: BTreeMap<String, Toolset>,
    /// Old name -> current name.
    renamed: BTreeMap<String, String>,
    /// Preset name -> toolsets it enables.
    presets: BTreeMap<String, Vec<String>>,
}

/// Tool names that no longer exist, and what to use instead (refused in policy lists).
pub const RETIRED_TOOLS: &[(&str, &str)] = &[
    ("execute_code", "renamed to 'run_tools_script'"),
    ("code_execution", "renamed to 'run_tools_script'"),
    ("shell", "renamed to 'terminal'"),
    ("datetime", "renamed to 'current_datetime'"),
    ("sleep", "renamed to 'wait'"),
];

impl Default for Toolsets {
    fn default() -> Self {
        let mut sets = BTreeMap::new();
        let mut add = |name: &str, description: &str, tools: &[&str], includes: &[&str]| {
            sets.insert(
                name.to_owned(),
                Toolset {
                    name: name.to_owned(),
                    description: description.to_owned(),
                    tools: tools.iter().map(|s| (*s).to_owned()).collect(),
                    includes: includes.iter().map(|s| (*s).to_owned()).collect(),
                },
            );
        };
        add(
            "builtin",
            "Small utilities: wait, current_datetime, read_output",
            &[],
            &[],
        );
        add(
            "codemode",
            "run_tools_script: Python that calls the other tools",
            &[],
            &[],
        );
        // The file tools act on the same environment: turning the environment off turns
        // them off too; `files` alone gives file tools without a shell.
        add(
            "environment",
            "terminal, process, python_execute and the file tools on the routed backend",
            &[],
            &["files"],
        );
        add(
            "files",
            "read_file, write_file, edit_file, apply_patch, grep, glob_files, list_files, \
             file_info, move_file, delete_file on the routed backend",
            &[],
            &[],
        );
        add(
            "web",
            "http_request, under the policy's [network] rules (offered when they allow a host)",
            &[],
            &[],
        );
        add("mcp", "Tools of the bridged MCP servers", &[], &[]);
        // The embedding program's own tools (`paddock embed`, the Python package's host
        // tools): in every preset, since a program that gives the engine tools wants them used.
        add(
            "host",
            "Tools of the program embedding Paddock (the Python package's host tools)",
            &[],
            &[],
        );
        // Off by default: an orchestrator's tools, not an agent's.
        add(
            "sessions_admin",
            "session_snapshot, session_fork, snapshot_list, snapshot_remove: save and branch \
             sessions",
            &[],
            &[],
        );
        add(
            "core",
            "Everything Paddock itself provides",
            &[],
            &["builtin", "codemode", "environment", "web"],
        );
        let renamed = [
            ("basic", "builtin"),
            ("code_execution", "codemode"),
            ("terminal", "environment"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.to_owned()))
        .collect();
        let presets = [
            ("all", vec!["core", "mcp", "host", "sessions_admin"]),
            ("default", vec!["core", "mcp", "host"]),
            ("minimal", vec!["builtin", "codemode", "host"]),
            ("no-shell", vec!["builtin", "codemode", "mcp", "host"]),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_owned(), b.into_iter().map(str::to_owned).collect()))
        .collect();
        Self {
            sets,
            renamed,
            presets,
        }
    }
}

impl Toolsets {
    /// The current name of a toolset (following a rename), if it exists.
    pub fn resolve(&self, name: &str) -> Option<&str> {
        let name = self.renamed.get(name).map_or(name, String::as_str);
        self.sets.get(name).map(|s| s.name.as_str())
    }

    /// Every known toolset name, current names only.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.sets.keys().map(String::as_str)
    }

    pub fn get(&self, name: &str) -> Option<&Toolset> {
        self.resolve(name).and_then(|n| self.sets.get(n))
    }

    /// Adds (or replaces) a toolset.
    pub fn define(&mut self, toolset: Toolset) {
        self.sets.insert(toolset.name.clone(), toolset);
    }

    /// The toolsets a preset enables.
    pub fn preset(&self, name: &str) -> Option<&[String]> {
        self.presets.get(name).map(Vec::as_slice)
    }

    pub fn preset_names(&self) -> impl Iterator<Item = &str> {
        self.presets.keys().map(String::as_str)
    }

    /// `name` and every toolset it includes, transitively (cycles and diamonds are fine).
    pub fn expand(&self, name: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![name.to_owned()];
        while let Some(next) = stack.pop() {
            let Some(resolved) = self.resolve(&next) else {
                continue;
            };
            if !seen.insert(resolved.to_owned()) {
                continue;
            }
            if let Some(set) = self.sets.get(resolved) {
                stack.extend(set.includes.iter().cloned());
            }
        }
        seen
    }

    /// The explicit tool names of `name` and its includes.
    pub fn explicit_tools(&self, name: &str) -> BTreeSet<String> {
        self.expand(name)
            .iter()
            .filter_map(|n| self.sets.get(n))
            .flat_map(|s| s.tools.iter().cloned())
            .collect()
    }
}

/// Which toolsets are on: `enabled` (or the preset's) minus `disabled`.
#[derive(Debug, Clone)]
pub struct ToolsetSelection {
    /// `*`: every toolset, including ones registered later, unless disabled.
    everything: bool,
    enabled: BTreeSet<String>,
    disabled: BTreeSet<String>,
    explicit_tools: BTreeSet<String>,
}

impl ToolsetSelection {
    /// Every toolset on.
    pub fn all(toolsets: &Toolsets) -> Self {
        Self::new(toolsets, &["*".to_owned()], &[])
    }

    /// `enabled` names toolsets (old names accepted) or `*`; `disabled` wins over `enabled`.
    pub fn new(toolsets: &Toolsets, enabled: &[String], disabled: &[String]) -> Self {
        let mut on = BTreeSet::new();
        let mut everything = false;
        for name in enabled {
            if name == "*" || name == "all" {
                everything = true;
                on.extend(toolsets.names().map(str::to_owned));
            } else if toolsets.resolve(name).is_some() {
                on.extend(toolsets.expand(name));
            } else {
                // A toolset defined by tools registered later (an MCP server, a library's own).
                on.insert(name.clone());
            }
        }
        let mut off = BTreeSet::new();
        for name in disabled {
            if toolsets.resolve(name).is_some() {
                off.extend(toolsets.expand(name));
            } else {
                off.insert(name.clone());
            }
        }
        for name in &off {
            on.remove(name);
        }
        let explicit_tools = on.iter().flat_map(|n| toolsets.explicit_tools(n)).collect();
        Self {
            everything,
            enabled: on,
            disabled: off,
            explicit_tools,
        }
    }

    /// Is a tool of `toolset` named `tool` on?
    pub fn includes(&self, toolsets: &Toolsets, toolset: &str, tool: &str) -> bool {
        let toolset = toolsets.resolve(toolset).unwrap_or(toolset);
        if self.disabled.contains(toolset) {
            return false;
        }
        self.everything || self.enabled.contains(toolset) || self.explicit_tools.contains(tool)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn composites_expand_and_renames_resolve() {
        let t = Toolsets::default();
        let core = t.expand("core");
        assert!(
            core.contains("builtin") && core.contains("codemode") && core.contains("environment")
        );
        assert!(t.expand("environment").contains("files"));
        assert_eq!(t.resolve("basic"), Some("builtin"));
        assert_eq!(t.resolve("nope"), None);
    }

    #[test]
    fn cycles_terminate() {
        let mut t = Toolsets::default();
        t.define(Toolset {
            name: "a".into(),
            description: String::new(),
            tools: vec![],
            includes: vec!["b".into()],
        });
        t.define(Toolset {
            name: "b".into(),
            description: String::new(),
            tools: vec!["x".into()],
            includes: vec!["a".into()],
        });
        assert_eq!(t.expand("a").len(), 2);
        assert!(t.explicit_tools("a").contains("x"));
    }

    #[test]
    fn disabled_wins_and_old_names_work_in_selections() {
        let t = Toolsets::default();
        let s = ToolsetSelection::new(&t, &["core".into()], &["terminal".into()]);
        assert!(s.includes(&t, "builtin", "wait"));
        assert!(!s.includes(&t, "environment", "terminal"));
        let minimal = ToolsetSelection::new(&t, t.preset("minimal").unwrap(), &[]);
        assert!(!minimal.includes(&t, "mcp", "mcp_x__y"));
    }
}
