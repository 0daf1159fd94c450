//! Short, generator-based runs of the fuzz targets that drive a daemon (see `tests/it` for
//! the knobs). A binary of their own: as root, the daemon's targets turn the whole process
//! into `nobody`, which the other targets' scratch files must not see.

#[path = "../common/mod.rs"]
mod common;

use common::run;

/// One test for all of them, so that the daemon they share is stopped (with what it started) and
/// its directory removed once both are done.
#[test]
fn fuzz_daemon_targets() {
    let outcome = std::panic::catch_unwind(|| {
        run("api_bodies", 3000);
        run("hostile_bodies", 3000);
        run("exec_control", 3000);
    });
    cobble_fuzz::daemon::shutdown();
    if let Err(panic) = outcome {
        std::panic::resume_unwind(panic);
    }
}
