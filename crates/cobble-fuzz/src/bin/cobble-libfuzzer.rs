//! The coverage-guided runner: libFuzzer calls the target named by `COBBLE_FUZZ_TARGET` with
//! each input. Built and run by `scripts/fuzz`, which sets the instrumentation flags.

#![no_main]

use std::sync::OnceLock;

use cobble_fuzz::TargetFn;

static TARGET: OnceLock<TargetFn> = OnceLock::new();

libfuzzer_sys::fuzz_target!(
    init: {
        let name = std::env::var("COBBLE_FUZZ_TARGET").unwrap_or_default();
        let target = cobble_fuzz::target(&name).unwrap_or_else(|| {
            let names: Vec<&str> = cobble_fuzz::TARGETS.iter().map(|(n, _)| *n).collect();
            eprintln!("COBBLE_FUZZ_TARGET must be one of: {}", names.join(", "));
            std::process::exit(2);
        });
        let _ = TARGET.set(target);
    },
    |data: &[u8]| {
        if let Some(target) = TARGET.get() {
            cobble_fuzz::run_bytes(*target, data);
        }
    }
);
