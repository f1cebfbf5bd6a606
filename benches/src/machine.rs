//! The machine a run was measured on: figures are meaningless without it.

use serde::Serialize;

/// CPU, cores, kernel, memory and load, read from /proc (fields that cannot be read are empty).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Machine {
    pub cpu: String,
    /// What this process may use (cgroup and affinity limits included).
    pub cores: usize,
    pub kernel: String,
    pub memory_mb: u64,
    /// 1, 5 and 15 minute load averages when the run started, and when it ended: the machine
    /// may be shared, and load changes what is measured.
    pub load_start: Vec<f64>,
    pub load_end: Vec<f64>,
}

impl Machine {
    pub fn probe() -> Self {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_owned())
            .unwrap_or_default();
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_mb = meminfo
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|kb| kb.parse::<u64>().ok())
            .map_or(0, |kb| kb / 1024);
        Self {
            cpu,
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map(|s| s.trim().to_owned())
                .unwrap_or_default(),
            memory_mb,
            load_start: load(),
            load_end: Vec::new(),
        }
    }

    /// Records the load at the end of the run.
    pub fn finish(&mut self) {
        self.load_end = load();
    }
}

/// The 1, 5 and 15 minute load averages.
pub fn load() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .filter_map(|v| v.parse().ok())
        .collect()
}
