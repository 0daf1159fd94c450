//! The runner shared by the test binaries.

use cobble_fuzz::TargetFn;

fn budget_ms(default: u64) -> u64 {
    std::env::var("COBBLE_FUZZ_BUDGET_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs target `name` on random inputs for its budget, or on the one input of
/// `COBBLE_FUZZ_SEED`.
pub(crate) fn run(name: &str, default_budget_ms: u64) {
    let target: TargetFn = cobble_fuzz::target(name).expect("a known target");
    let test = arbtest::arbtest(target).size_max(64 * 1024);
    match std::env::var("COBBLE_FUZZ_SEED") {
        Ok(seed) => {
            let seed = u64::from_str_radix(seed.trim_start_matches("0x"), 16).expect("a hex seed");
            test.seed(seed).run();
        }
        Err(_) => test.budget_ms(budget_ms(default_budget_ms)).run(),
    }
}
