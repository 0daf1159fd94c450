//! Lays out the release binary's code so that what a daemon runs sits together.
//!
//! The kernel maps an executable's pages in 64 KiB blocks around each page a process touches
//! (fault-around), so a function that runs makes its whole block resident, and the few
//! hundred kilobytes of code a daemon runs, spread over 6 MiB of `.text`, kept almost all of
//! it resident. `symbol-order.txt` lists those functions (written by
//! `scripts/gen-symbol-order`, which records what a daemon runs under a representative
//! workload); the linker puts them first, in that order, and everything else after them.
//!
//! Only for release builds (the profile the file was recorded with: symbol names carry a hash
//! of the build's settings) for x86_64-unknown-linux-gnu, whose default linker is LLD. A name
//! the build does not define is skipped silently, so a stale file costs memory, not a
//! failure; `scripts/gen-symbol-order --check` says how much of it still matches.
//! `COBBLE_LINK_MAP=PATH` (absolute) also writes the linker's map, which the generator reads.

use std::env;
use std::path::PathBuf;

fn main() {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let order = manifest.join("symbol-order.txt");
    // Watching a file that does not exist would rerun this (and relink) on every build; its
    // directory's time changes when it is created.
    let watched = if order.exists() { &order } else { &manifest };
    println!("cargo::rerun-if-changed={}", watched.display());
    println!("cargo::rerun-if-env-changed=COBBLE_LINK_MAP");

    let release = env::var("PROFILE").as_deref() == Ok("release");
    let lld_target = env::var("TARGET").as_deref() == Ok("x86_64-unknown-linux-gnu");
    if !(release && lld_target) {
        return;
    }
    if order.exists() {
        link_arg(&format!("--symbol-ordering-file={}", order.display()));
        link_arg("--no-warn-symbol-ordering");
    }
    if let Some(map) = env::var_os("COBBLE_LINK_MAP") {
        link_arg(&format!("-Map={}", PathBuf::from(map).display()));
        // The map names symbols as the ordering file must: mangled.
        link_arg("--no-demangle");
    }
}

/// Passes `arg` to the linker (through the compiler driver) for the `cobble` binary only.
fn link_arg(arg: &str) {
    println!("cargo::rustc-link-arg-bin=cobble=-Wl,{arg}");
}
