//! What a running daemon maps besides its own executable, and the threads it starts: every
//! shared library it loads and every thread's stack is resident memory in every container
//! that runs it.

use crate::fixture::Daemon;

/// The shared libraries mapped into process `pid`, by file name.
fn libraries(pid: u32) -> Vec<String> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("maps");
    let mut names: Vec<String> = maps
        .lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .filter_map(|path| path.rsplit('/').next())
        .filter(|name| name.contains(".so"))
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// tokio's scheduler calls `pow`, the daemon's only call into the C maths library; cobble
/// defines it in Rust (`cobble_sys::math`), so libm's pages (about 0.5 MiB resident) are not
/// loaded for it.
#[test]
fn the_daemon_does_not_load_the_c_maths_library() {
    let daemon = Daemon::hold(&[]);
    let libraries = libraries(daemon.pid());
    assert!(
        libraries.iter().any(|name| name.starts_with("libc.so")),
        "the reading found no libc: {libraries:?}"
    );
    assert!(
        !libraries.iter().any(|name| name.starts_with("libm.so")),
        "libm is mapped: {libraries:?}"
    );
}

/// The names of process `pid`'s threads.
fn thread_names(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("task")
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("comm")).ok())
        .map(|name| name.trim_end().to_owned())
        .collect()
}

/// The path watcher (cobble's thread and inotify's) starts with the first path a service
/// watches: a daemon whose plan watches none has neither thread. One with `requires-paths`
/// has both once it is watching.
#[test]
fn the_path_watcher_starts_with_the_first_watched_path() {
    let watcher = |names: &[String]| names.iter().any(|name| name == "cobble-watch");
    let idle = Daemon::hold(&[(
        "001-base",
        "services:\n  svc:\n    override: replace\n    command: sleep 300\n",
    )]);
    let names = thread_names(idle.pid());
    assert!(
        names.iter().any(|name| name == "cobble-reaper"),
        "{names:?}"
    );
    assert!(!watcher(&names), "{names:?}");
    assert!(
        !names.iter().any(|name| name.starts_with("notify-rs")),
        "{names:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let layer = format!(
        "services:\n  svc:\n    override: replace\n    command: sleep 300\n    startup: enabled\n    requires-paths: [{}]\n",
        dir.path().join("missing").display()
    );
    let watching = Daemon::start(&[("001-base", &layer)], &[]);
    crate::fixture::wait_for(
        "the path watcher's thread",
        std::time::Duration::from_secs(30),
        || watcher(&thread_names(watching.pid())),
    );
}
