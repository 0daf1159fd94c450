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
//!
//! The dynamic build is linked at a fixed address (`-no-pie`), as Go links Pebble: the loader
//! relocated a position-independent executable at every start, reading its 248 KiB of
//! relocation records and writing the 44 pages of `.data.rel.ro` (each then a private copy,
//! anonymous memory in every daemon). At a fixed address the linker resolves them, and those
//! pages stay clean, shared pages of the file, read in only where they are used. What it
//! gives up is a random address for the executable's own code and data; the libraries, the
//! stack, the heap and the threads' stacks still get one. `scripts/build-static` asks the
//! same of the static build with `-C relocation-model=static` (a static executable cannot
//! be made position-dependent at link time alone).
//!
//! A static build that is position-independent (`crt-static` without that flag) packs its
//! relative relocations (`-z pack-relative-relocs`, RELR) when the glibc it links is 2.36 or
//! later, the first to apply them: a static PIE relocates itself at start-up and reads every
//! entry of its relocation table, 275 KiB of RELA records, where RELR needs a few KiB.

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
    let features = env::var("CARGO_CFG_TARGET_FEATURE").unwrap_or_default();
    if !features.split(',').any(|f| f == "crt-static") {
        // A flag of the compiler driver, not of the linker.
        println!("cargo::rustc-link-arg-bin=cobble=-no-pie");
    } else if glibc_applies_relr() {
        link_arg("-z,pack-relative-relocs");
    }
    if let Some(map) = env::var_os("COBBLE_LINK_MAP") {
        link_arg(&format!("-Map={}", PathBuf::from(map).display()));
        // The map names symbols as the ordering file must: mangled.
        link_arg("--no-demangle");
    }
}

/// Whether the build machine's glibc, the one a static build links in, is 2.36 or later
/// (`getconf GNU_LIBC_VERSION` prints `glibc 2.36`). Unknown counts as no.
fn glibc_applies_relr() -> bool {
    let Ok(out) = std::process::Command::new("getconf")
        .arg("GNU_LIBC_VERSION")
        .output()
    else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let Some(version) = text.trim().strip_prefix("glibc ") else {
        return false;
    };
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (2, 36)
}

/// Passes `arg` to the linker (through the compiler driver) for the `cobble` binary only.
fn link_arg(arg: &str) {
    println!("cargo::rustc-link-arg-bin=cobble=-Wl,{arg}");
}
