//! Threads and fork under `LD_PRELOAD`: a cross-thread stress with content
//! checks plus thousands of short-lived threads, and fork while other
//! threads allocate.

mod common;

use common::*;

#[test]
fn pthread_stress_with_cross_thread_frees() {
    let dir = scratch_dir("stress");
    let exe = compile(&dir, "stress.c", &["-O2"]);
    run_preloaded_expect(&exe, &[], "stress ok");
}

#[test]
fn fork_while_other_threads_allocate() {
    let dir = scratch_dir("fork");
    let exe = compile(&dir, "fork.c", &["-O2"]);
    run_preloaded_expect(&exe, &[], "fork ok");
}
