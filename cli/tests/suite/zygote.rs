//! The sandbox zygote's lifetime.

use std::path::PathBuf;
use std::time::Duration;

use paddock_engine::codemode::pool::{PoolConfig, SandboxPool};

/// PR_SET_PDEATHSIG fires when the *thread* that spawned the zygote exits. The pool starts the
/// zygote from a tokio blocking thread, and those retire when idle (after 10 s by default; 20 ms
/// here): the zygote, and any script running in it, must not die with that thread.
#[test]
fn the_zygote_outlives_the_thread_that_started_it() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_keep_alive(Duration::from_millis(20))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let pool = SandboxPool::new(PoolConfig {
            exe: PathBuf::from(env!("CARGO_BIN_EXE_paddock")),
            prefork: 1,
            max_concurrency: 1,
            degraded: Vec::new(),
        });
        pool.warm_up().await.unwrap();
        let pid = pool.zygote_pid().await.expect("a running zygote");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(
            pool.zygote_pid().await,
            Some(pid),
            "the zygote died when the blocking thread that spawned it retired"
        );
    });
}
