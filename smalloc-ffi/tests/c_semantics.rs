//! The C API's semantics, checked by C programs run under `LD_PRELOAD`
//! (sources in `tests/c`). Each program exits non-zero naming the first
//! failed check.

mod common;

use common::*;

#[test]
fn edge_cases_with_errno() {
    let dir = scratch_dir("edge_cases");
    let exe = compile(&dir, "edge_cases.c", &[]);
    run_preloaded_expect(&exe, &[], "edge cases ok");
}

#[test]
fn every_aligned_entry_point_for_alignments_up_to_1_mib() {
    let dir = scratch_dir("alignment");
    let exe = compile(&dir, "alignment.c", &[]);
    run_preloaded_expect(&exe, &[], "alignment ok");
}

#[test]
fn realloc_keeps_contents_across_size_classes() {
    let dir = scratch_dir("realloc_classes");
    let exe = compile(&dir, "realloc_classes.c", &[]);
    // Its checks of where a moved block lands assume the freed slots it
    // left behind stay where it left them: no purge moving an owner's
    // private lists to the shared ones (or resetting regions) meanwhile.
    let out = run_ok(preloaded(&mut target_command(&exe)).env("SMALLOC_PURGE_DELAY_MS", "0"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("realloc ok"));
}

/// The test programs refuse to run without smalloc, so they cannot pass
/// against glibc by accident.
#[test]
fn test_programs_fail_without_smalloc() {
    let dir = scratch_dir("without_smalloc");
    let exe = compile(&dir, "edge_cases.c", &[]);
    let out = target_command(&exe).output().expect("run");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
