//! Short, generator-based runs of the fuzz targets that need no daemon: random inputs for a
//! fixed budget (`COBBLE_FUZZ_BUDGET_MS`, per target), so the properties are exercised on
//! every test run. A failure prints its seed; `COBBLE_FUZZ_SEED=0x...` replays exactly that
//! input. Long coverage-guided runs are `scripts/fuzz`'s.

#[path = "../common/mod.rs"]
mod common;

use common::run;

#[test]
fn fuzz_duration() {
    run("duration", 1000);
}

#[test]
fn fuzz_schedule() {
    run("schedule", 1500);
}

#[test]
fn fuzz_layer() {
    run("layer", 1500);
}

#[test]
fn fuzz_layer_structured() {
    run("layer_structured", 2000);
}

#[test]
fn fuzz_plan_merge() {
    run("plan_merge", 2000);
}

#[test]
fn fuzz_hostile_layer() {
    run("hostile_layer", 2000);
}

#[test]
fn fuzz_multipart() {
    run("multipart", 2000);
}

#[test]
fn every_target_has_a_short_run() {
    let source = [include_str!("main.rs"), include_str!("../daemon/main.rs")].concat();
    for (name, _) in cobble_fuzz::TARGETS {
        assert!(
            source.contains(&format!("run(\"{name}\"")),
            "{name} is not run here"
        );
    }
}

/// Found by the coverage-guided run: a push whose last file part is empty, followed by a body
/// that never ends. multer reads a few chunks past the closing boundary before the reader's
/// own drain starts; what is read in all must stay bounded.
#[test]
fn multipart_read_ahead_after_an_empty_last_part_stays_bounded() {
    let input = [
        0x00, 0xb7, 0x01, 0x05, 0x00, 0x00, 0x00, 0x01, 0x01, 0xcf, 0x4d, 0xcf, 0xcc, 0x01, 0x01,
        0xcf, 0x4d, 0xcf, 0xcc, 0xcf,
    ];
    cobble_fuzz::run_bytes(cobble_fuzz::target("multipart").unwrap(), &input);
}

/// Found by the coverage-guided run: a complete push (boundary `x`, the metadata part, one
/// empty file part, the closing boundary) in one chunk. It was refused with "cannot read
/// request metadata: unexpected EOF" while the target fed bodies that turned ready when polled
/// again within one poll, which multer cannot take while it looks for the first boundary and
/// which no connection does; the target now feeds bodies as a connection does.
#[test]
fn multipart_push_with_a_one_character_boundary_and_an_empty_file_is_accepted() {
    let input = [
        0x00, 0xb7, 0x01, 0x05, 0x00, 0x00, 0x00, 0x01, 0xcf, 0x01, 0xcf, 0xff, 0xff, 0xff, 0xff,
        0x36, 0x0e, 0xe5, 0x55, 0x5b, 0x85, 0xcf, 0xcf,
    ];
    cobble_fuzz::run_bytes(cobble_fuzz::target("multipart").unwrap(), &input);
}
