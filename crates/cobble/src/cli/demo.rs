//! `demo`: runs the daemon on an embedded demo layer, so a newcomer sees supervision at work
//! with one command and nothing to write.
//!
//! The demo has a directory of its own (`/tmp/cobble-demo`, or `--dir`), never `$PEBBLE`: it
//! starts clean every time, so a second run shows the same story as the first (the failing
//! service, then its healing), and wiping what a real daemon keeps in `$PEBBLE` would lose
//! someone's state. Starting clean removes what the previous demo left (its state, logs and
//! config file), keeping only the daemon's lock and its process records, through which the
//! new daemon ends whatever a killed demo left running. A directory that is not a demo's is
//! refused rather than cleaned.
//!
//! The banner names the binary by the path it runs from unless that same binary is first on
//! `PATH`, so its commands work in another terminal as they are.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use cobble_daemon::RunOptions;

/// The demo layer, embedded in the binary; `@CONFIG@` stands for the config file's path.
pub(super) const DEMO_LAYER: &str = include_str!("demo-layer.yaml");

/// Where the demo runs unless `--dir` says otherwise.
const DEFAULT_DIR: &str = "/tmp/cobble-demo";

/// The layer file the demo writes, which also marks a directory as a demo's.
const LAYER_FILE: &str = "001-demo.yaml";

/// The file the `needs-config` service waits for, in the demo's directory.
const CONFIG_FILE: &str = "config";

/// What a clean start keeps: the lock (held by a running demo), the process records (the
/// next daemon ends what a killed one left from them) and `layers/` (rewritten anyway).
const KEPT: &[&str] = &[
    cobble_daemon::LOCK_FILE,
    cobble_daemon::PROCESS_REGISTRY_FILE,
    "layers",
];

/// Arguments of `demo`.
#[derive(Debug, Args)]
pub(super) struct DemoArgs {
    /// The demo's own directory, emptied of the previous demo's state on every start.
    #[arg(long, value_name = "DIR", default_value = DEFAULT_DIR)]
    dir: PathBuf,
}

pub(super) fn execute(args: DemoArgs) -> ExitCode {
    let dir = args.dir;
    let cleared = match prepare(&dir) {
        Ok(cleared) => cleared,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(1);
        }
    };
    eprint!("{}", banner(&dir, cleared));
    let code = cobble_daemon::run(RunOptions {
        socket_path: dir.join(".pebble.socket"),
        pebble_dir: dir,
        verbose: true,
        persist: true,
        ..RunOptions::default()
    });
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}

/// The demo layer with its config file in `dir`.
pub(super) fn demo_layer(dir: &Path) -> String {
    DEMO_LAYER.replace("@CONFIG@", &dir.join(CONFIG_FILE).to_string_lossy())
}

/// Makes `dir` a fresh demo directory: refuses one that is not a demo's or that a running
/// demo holds, removes what the previous demo left, writes the layer. Returns whether there
/// was anything to remove.
fn prepare(dir: &Path) -> anyhow::Result<bool> {
    let cannot = |e: std::io::Error| anyhow::anyhow!("cannot prepare {}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(cannot)?;
    let layers = dir.join("layers");
    let entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(cannot)?
        .collect::<Result<_, _>>()
        .map_err(cannot)?;
    let is_demo = std::fs::read_dir(&layers)
        .map(|list| {
            let names: Vec<_> = list.filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
            names.len() == 1 && names[0] == LAYER_FILE
        })
        .unwrap_or(false);
    if !entries.is_empty() && !is_demo {
        anyhow::bail!(
            "{} is not a demo directory (its layers/ does not hold the demo's layer alone); \
             choose a new or empty one with --dir",
            dir.display()
        );
    }
    // Held for the clean-up only: the daemon takes it again as it starts.
    let lock = cobble_daemon::lock_dir(dir, std::time::Duration::ZERO).map_err(|e| match e {
        cobble_daemon::LockError::Held(_) => anyhow::anyhow!(
            "a demo is already running in {}; stop it first, or choose another --dir",
            dir.display()
        ),
        other => anyhow::anyhow!(other),
    })?;
    let mut cleared = false;
    for entry in entries {
        let name = entry.file_name();
        if KEPT.iter().any(|kept| name == *kept) {
            continue;
        }
        let path = entry.path();
        let removed = if entry.file_type().map_err(cannot)?.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        removed.map_err(cannot)?;
        cleared = true;
    }
    std::fs::create_dir_all(&layers)
        .and_then(|()| std::fs::write(layers.join(LAYER_FILE), demo_layer(dir)))
        .map_err(cannot)?;
    drop(lock);
    Ok(cleared)
}

/// What the demo prints before the daemon starts: where it runs and what to type elsewhere.
fn banner(dir: &Path, cleared: bool) -> String {
    let me = invocation();
    let dir_text = dir.display();
    let mut text = format!("cobble demo in {dir_text}");
    if cleared {
        text.push_str(" (the previous demo's state, logs and config were removed)");
    }
    text.push_str(".\n");
    if let Some(pebble) = std::env::var_os("PEBBLE").filter(|p| Path::new(p) != dir) {
        text.push_str(&format!(
            "$PEBBLE ({}) is left alone: the demo uses its own directory.\n",
            Path::new(&pebble).display()
        ));
    }
    text.push_str(&format!(
        "In another terminal:\n\
         \n    export PEBBLE={dir_text}\n    {me} services\n    {me} changes\n    {me} tasks 1\n\
         \nThe needs-config service fails until its file exists; create it and watch it heal:\n\
         \n    echo hello > {config}\n\
         \nCtrl-C stops every service and the daemon; the next demo starts clean.\n",
        config = dir.join(CONFIG_FILE).display()
    ));
    text
}

/// How to run this binary from another shell: its name if `PATH` finds this same file under
/// it, else its full path.
fn invocation() -> String {
    let name = super::program_name();
    let Ok(me) = std::env::current_exe().and_then(std::fs::canonicalize) else {
        return name.to_owned();
    };
    let on_path = std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(name))
            .find(|candidate| candidate.is_file())
            .and_then(|found| std::fs::canonicalize(found).ok())
            .is_some_and(|found| found == me)
    });
    if on_path {
        name.to_owned()
    } else {
        me.display().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cobble_plan::{Layer, Plan};

    #[test]
    fn demo_layer_is_a_valid_plan() {
        let text = demo_layer(Path::new("/tmp/somewhere"));
        let layer = Layer::parse(1, "demo", &text).expect("demo layer parses");
        let plan = Plan::from_layers(vec![layer]).expect("demo layer validates");
        assert_eq!(plan.default_services(), ["clock", "needs-config", "worker"]);
        assert_eq!(
            plan.start_order(&["worker".to_owned()]).unwrap(),
            ["clock", "worker"]
        );
        assert!(
            text.contains("DEMO_CONFIG: \"/tmp/somewhere/config\""),
            "{text}"
        );
    }

    #[test]
    fn a_directory_that_is_not_a_demos_is_refused_and_left_as_it_was() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("layers")).unwrap();
        std::fs::write(dir.path().join("layers/001-mine.yaml"), "services: {}\n").unwrap();
        std::fs::write(dir.path().join(".pebble.state"), "{}").unwrap();
        let err = prepare(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not a demo directory"), "{err}");
        assert!(dir.path().join(".pebble.state").exists());
        assert!(dir.path().join("layers/001-mine.yaml").exists());
    }

    #[test]
    fn a_second_demo_starts_clean_but_keeps_the_process_records() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            !prepare(dir.path()).unwrap(),
            "a new directory has nothing to clear"
        );
        for leftover in [".pebble.state", "config", ".cobble-processes"] {
            std::fs::write(dir.path().join(leftover), "x").unwrap();
        }
        std::fs::create_dir(dir.path().join("logs")).unwrap();
        assert!(prepare(dir.path()).unwrap());
        assert!(!dir.path().join(".pebble.state").exists());
        assert!(!dir.path().join("config").exists());
        assert!(!dir.path().join("logs").exists());
        assert!(dir.path().join(".cobble-processes").exists());
        assert!(dir.path().join("layers").join(LAYER_FILE).exists());
    }
}
