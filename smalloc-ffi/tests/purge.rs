//! Freed memory given back without a call from the program, under
//! `LD_PRELOAD`: bench/preload's peakfree (threads build a peak of mixed
//! blocks, free them all and end; the program then watches its resident
//! set) with a generous bound, and the thread and fork programs with a
//! sweep every millisecond.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// bench/preload/peakfree.c, compiled into `dir`.
fn peakfree(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../bench/preload/peakfree.c");
    let exe = dir.join("peakfree");
    let out = Command::new("cc")
        .args(["-O2", "-std=gnu11", "-pthread", "-Wall", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("run the C compiler (is cc installed?)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    exe
}

#[test]
fn a_peak_freed_is_given_back_within_a_second() {
    let dir = scratch_dir("purge-peakfree");
    let exe = peakfree(&dir);
    // The target is below 10% of the peak; the bound leaves room for a
    // loaded machine. Idle after the frees, then with one thread still
    // allocating and freeing small blocks.
    for extra in [&[][..], &["-c"][..]] {
        let out = run_ok(
            preloaded(&mut Command::new(&exe))
                .args(["-t", "4", "-m", "256M", "-s", "1.2", "-b", "25"])
                .args(extra),
        );
        println!("{}", String::from_utf8_lossy(&out.stdout));
    }
}

#[test]
fn threads_and_fork_with_a_sweep_every_millisecond() {
    // The purge racing allocations and frees (the stress program checks
    // every block's contents), and fork while sweeps run.
    for (file, expect) in [("stress.c", "stress ok"), ("fork.c", "fork ok")] {
        let dir = scratch_dir(&format!("purge-{expect}").replace(' ', "-"));
        let exe = compile(&dir, file, &["-O2"]);
        let out = run_ok(preloaded(&mut Command::new(&exe)).env("SMALLOC_PURGE_DELAY_MS", "1"));
        assert!(String::from_utf8_lossy(&out.stdout).contains(expect));
    }
}
