//! Hang detection that works even when the code under test never yields (a future that is
//! always ready never lets a tokio timeout fire): a thread that aborts the process, naming
//! what hung, when a guarded call overruns its deadline.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The guarded call in progress: what it is and when it must have returned.
static DEADLINE: Mutex<Option<(&'static str, Instant)>> = Mutex::new(None);

/// Runs `f`, aborting the process if it takes longer than `limit`.
pub fn guard<T>(what: &'static str, limit: Duration, f: impl FnOnce() -> T) -> T {
    static WATCHER: std::sync::Once = std::sync::Once::new();
    WATCHER.call_once(|| {
        std::thread::spawn(|| {
            loop {
                std::thread::sleep(Duration::from_millis(250));
                let current = *DEADLINE.lock().unwrap_or_else(|e| e.into_inner());
                if let Some((what, deadline)) = current
                    && Instant::now() > deadline
                {
                    eprintln!("{what} hangs: no answer in time");
                    std::process::abort();
                }
            }
        });
    });
    *DEADLINE.lock().unwrap_or_else(|e| e.into_inner()) = Some((what, Instant::now() + limit));
    let out = f();
    *DEADLINE.lock().unwrap_or_else(|e| e.into_inner()) = None;
    out
}
