//! What a running daemon maps besides its own executable: every shared library it loads is
//! resident memory in every container that runs it.

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
