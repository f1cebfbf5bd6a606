//! Availability checks: run when definitions are built, cached for a short time, shared checks
//! run once, and an error or a panic means "unavailable".

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a check's answer is reused.
pub const CHECK_TTL: Duration = Duration::from_secs(30);

/// A check a tool declares. Tools that share a check (all tools of one backend, say) give the
/// same `id`, and it runs once for all of them.
#[derive(Clone)]
pub struct Availability {
    pub id: String,
    pub check: Arc<dyn Fn() -> Result<(), String> + Send + Sync>,
}

impl Availability {
    pub fn new(
        id: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        Self {
            id: id.into(),
            check: Arc::new(check),
        }
    }
}

impl std::fmt::Debug for Availability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Availability")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// When a check ran and what it said.
type Answer = (Instant, Result<(), String>);

/// Cached answers, keyed by check id.
#[derive(Default)]
pub struct AvailabilityCache {
    answers: Mutex<HashMap<String, Answer>>,
}

impl AvailabilityCache {
    /// `Ok(())` when available, else why not.
    pub fn check(&self, availability: &Availability) -> Result<(), String> {
        if let Ok(answers) = self.answers.lock()
            && let Some((at, answer)) = answers.get(&availability.id)
            && at.elapsed() < CHECK_TTL
        {
            return answer.clone();
        }
        let check = availability.check.clone();
        let answer = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check())) {
            Ok(answer) => answer,
            Err(_) => Err(format!("availability check '{}' panicked", availability.id)),
        };
        if let Ok(mut answers) = self.answers.lock() {
            answers.insert(availability.id.clone(), (Instant::now(), answer.clone()));
        }
        answer
    }

    /// Forgets every answer (after a configuration change).
    pub fn invalidate(&self) {
        if let Ok(mut answers) = self.answers.lock() {
            answers.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn a_shared_check_runs_once_within_the_ttl() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counter = runs.clone();
        let a = Availability::new("docker", move || {
            counter.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let cache = AvailabilityCache::default();
        for _ in 0..5 {
            cache.check(&a).unwrap();
        }
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        cache.invalidate();
        cache.check(&a).unwrap();
        assert_eq!(runs.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn errors_and_panics_mean_unavailable() {
        let cache = AvailabilityCache::default();
        let failing = Availability::new("f", || Err("daemon down".into()));
        assert_eq!(cache.check(&failing), Err("daemon down".into()));
        let panicking = Availability::new("p", || panic!("boom"));
        assert!(cache.check(&panicking).unwrap_err().contains("panicked"));
    }
}
