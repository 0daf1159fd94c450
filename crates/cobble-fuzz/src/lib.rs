#![forbid(unsafe_code)]
//! Fuzz targets for cobble, each a function of an [`Unstructured`] input that panics when a
//! property fails.
//!
//! The same targets run two ways:
//!
//! - **Short, generator-based runs** inside the normal test command (`tests/it`): `arbtest`
//!   feeds each target random bytes for a fixed time budget (`COBBLE_FUZZ_BUDGET_MS`, a couple
//!   of seconds by default). A failure prints the seed that reproduces it
//!   (`COBBLE_FUZZ_SEED`).
//! - **Long, coverage-guided runs** with `scripts/fuzz TARGET DURATION`: libFuzzer drives the
//!   `cobble-libfuzzer` binary (feature `libfuzzer`), built on stable Rust with
//!   sanitizer-coverage instrumentation and no sanitizer, keeping a corpus per target under
//!   `target/fuzz/corpus/`.
//!
//! Inputs are decoded with `arbitrary` rather than used as raw text only: most targets build
//! a structured input (a layer, a multipart body, a request) from the bytes so that the
//! interesting paths are reached, and keep a raw-bytes mode for the parsers' edges.
//!
//! # Layout
//!
//! - [`plan`]: Go durations, schedules, the layer parser, the plan merge.
//! - [`hostile`]: layers built to hurt a parser: nesting around and past yaml.v3's limit,
//!   alias bombs, huge repetition.
//! - [`multipart`]: the multipart reader behind `POST /v1/files`.
//! - [`daemon`]: a real daemon in this process (on a temporary directory, as an unprivileged
//!   user when run as root) for request bodies of every endpoint, hostile bodies (deep,
//!   huge, repeated, not UTF-8) and exec's control frames.

use arbitrary::Unstructured;

pub mod daemon;
pub mod hostile;
pub mod multipart;
pub mod plan;
pub mod watchdog;

/// A fuzz target: decodes what it needs from the input and panics when a property fails.
/// `Err` only means the input ran out, which is not a failure.
pub type TargetFn = fn(&mut Unstructured<'_>) -> arbitrary::Result<()>;

/// Every target, by the name `scripts/fuzz` and the tests use.
pub const TARGETS: &[(&str, TargetFn)] = &[
    ("duration", plan::duration),
    ("schedule", plan::schedule),
    ("layer", plan::layer),
    ("layer_structured", plan::layer_structured),
    ("plan_merge", plan::plan_merge),
    ("hostile_layer", hostile::hostile_layer),
    ("multipart", multipart::multipart),
    ("api_bodies", daemon::api_bodies),
    ("hostile_bodies", daemon::hostile_bodies),
    ("exec_control", daemon::exec_control),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<TargetFn> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// Runs `target` on raw bytes, as libFuzzer hands them over.
pub fn run_bytes(target: TargetFn, data: &[u8]) {
    let mut u = Unstructured::new(data);
    let _ = target(&mut u);
}
