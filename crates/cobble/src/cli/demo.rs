//! `demo`: runs the daemon on an embedded demo layer, so a newcomer sees supervision at work
//! with one command and nothing to write.
//!
//! The daemon directory defaults to `/tmp/cobble-demo` (or `$PEBBLE` when set); the demo
//! layer is written into its `layers/` on every start, and the daemon runs with `--verbose`
//! so service output shows up in the terminal.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use cobble_daemon::RunOptions;

/// The demo layer, embedded in the binary.
pub const DEMO_LAYER: &str = include_str!("demo-layer.yaml");

/// Where the demo runs unless `--dir` or `$PEBBLE` says otherwise.
const DEFAULT_DIR: &str = "/tmp/cobble-demo";

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub struct DemoArgs {
    /// The daemon directory to use (default: $PEBBLE, else /tmp/cobble-demo).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
}

pub fn execute(args: DemoArgs) -> ExitCode {
    let dir = args
        .dir
        .or_else(|| std::env::var_os("PEBBLE").map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_DIR));
    let layers = dir.join("layers");
    if let Err(e) = std::fs::create_dir_all(&layers)
        .and_then(|()| std::fs::write(layers.join("001-demo.yaml"), DEMO_LAYER))
    {
        eprintln!("error: cannot prepare {}: {e}", dir.display());
        return ExitCode::from(1);
    }
    let me = super::program_name();
    eprintln!(
        "cobble demo in {dir}. In another terminal:\n\
         \n    export PEBBLE={dir}\n    {me} services\n    {me} changes\n    {me} tasks 1\n\
         \nThe needs-config service fails until its file exists; create it and watch it heal:\n\
         \n    echo hello > /tmp/cobble-demo-config\n\nCtrl-C stops every service and the daemon.\n",
        dir = dir.display()
    );
    let code = cobble_daemon::run(RunOptions {
        socket_path: dir.join(".pebble.socket"),
        pebble_dir: dir,
        verbose: true,
        persist: true,
        ..RunOptions::default()
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_plan::{Layer, Plan};

    #[test]
    fn demo_layer_is_a_valid_plan() {
        let layer = Layer::parse(1, "demo", DEMO_LAYER).expect("demo layer parses");
        let plan = Plan::from_layers(vec![layer]).expect("demo layer validates");
        assert_eq!(plan.default_services(), ["clock", "needs-config", "worker"]);
        assert_eq!(
            plan.start_order(&["worker".to_owned()]).unwrap(),
            ["clock", "worker"]
        );
    }
}
