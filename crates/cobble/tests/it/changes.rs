//! `changes` and `tasks` after a start and a stop.

use crate::fixture::{Daemon, Test};
use crate::services::TWO_SLEEPERS;

#[test]
fn changes_and_tasks_after_start_and_stop() {
    let daemon = Daemon::hold(&[("001-base", TWO_SLEEPERS)]);

    Test::daemon(&daemon)
        .args(&["changes"])
        .stderr("no changes found\n")
        .run();

    Test::daemon(&daemon).args(&["start", "srv2"]).run();
    Test::daemon(&daemon).args(&["stop", "srv2"]).run();

    Test::daemon(&daemon)
        .args(&["changes"])
        .stdout_glob(
            "ID   Status  Spawn               Ready               Summary\n\
             1    Done    today at ??:?? UTC  today at ??:?? UTC  Start service \"srv2\"\n\
             2    Done    today at ??:?? UTC  today at ??:?? UTC  Stop service \"srv2\"\n\
             \n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["changes", "--abs-time", "srv2"])
        .stdout_glob(
            "ID   Status  Spawn                 Ready                 Summary\n\
             1    Done    ????-??-??T??:??:??Z  ????-??-??T??:??:??Z  Start service \"srv2\"\n\
             2    Done    ????-??-??T??:??:??Z  ????-??-??T??:??:??Z  Stop service \"srv2\"\n\
             \n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["changes", "srv1"])
        .stderr("no changes found\n")
        .run();

    let start_tasks = "Status  Spawn               Ready               Summary\n\
                       Done    today at ??:?? UTC  today at ??:?? UTC  Start service \"srv2\"\n\
                       \n";
    Test::daemon(&daemon)
        .args(&["tasks", "1"])
        .stdout_glob(start_tasks)
        .run();
    Test::daemon(&daemon)
        .args(&["tasks", "--last=start"])
        .stdout_glob(start_tasks)
        .run();
    Test::daemon(&daemon)
        .args(&["tasks", "--last=stop"])
        .stdout_glob(
            "Status  Spawn               Ready               Summary\n\
             Done    today at ??:?? UTC  today at ??:?? UTC  Stop service \"srv2\"\n\
             \n",
        )
        .run();
    Test::daemon(&daemon)
        .args(&["tasks", "--last=replan?"])
        .run();
    Test::daemon(&daemon)
        .args(&["tasks", "--last=replan"])
        .stderr("error: no changes of type \"replan\" found\n")
        .status(1)
        .run();
}
