//! The secure library (`--features secure`) under `LD_PRELOAD` stops a C
//! program's double free (also from other threads), free of an interior
//! pointer and write into a freed block with the documented message and
//! SIGABRT, fills freed blocks with `SMALLOC_FREE_FILL`, and runs a correct
//! program to the end. The default library (without the feature) stops
//! none of them: the control.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::process::Output;

use common::*;

/// The C program run with `bug` under the library, with `env`.
fn run(bug: &str, env: &[(&str, &str)]) -> Output {
    let dir = scratch_dir(&format!("secure-{bug}"));
    let exe = compile(&dir, "secure.c", &["-pthread"]);
    preloaded(&mut target_command(&exe))
        .arg(bug)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// What `bug` does: stopped with `what` by the secure library.
fn check(bug: &str, what: &str) {
    let out = run(bug, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if cfg!(feature = "secure") {
        assert_eq!(
            out.status.signal(),
            Some(libc::SIGABRT),
            "{bug}: {:?}\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains(&format!("smalloc: {what} at 0x")),
            "{bug}: {stderr}"
        );
    } else {
        // The default library does not look: the program goes on.
        assert!(!stderr.contains("smalloc: "), "{bug}: {stderr}");
    }
}

#[test]
fn a_double_free_is_stopped() {
    check("double-free", "double free");
}

#[test]
fn a_double_free_from_other_threads_is_stopped() {
    check("thread-double-free", "double free");
}

#[test]
fn a_free_of_an_interior_pointer_is_stopped() {
    check(
        "interior",
        "free of a pointer that is not the start of a block",
    );
}

#[test]
fn a_write_after_free_is_stopped() {
    check(
        "write-after-free",
        "corrupted free list (a write after free?)",
    );
}

#[test]
fn freed_blocks_are_filled_on_request() {
    let fill = |env: &[(&str, &str)]| {
        let out = run("fill", env);
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let want = if cfg!(feature = "secure") {
        "fill 223 223"
    } else {
        "fill 17 17"
    };
    assert_eq!(fill(&[("SMALLOC_FREE_FILL", "0xdf")]), want);
    assert_eq!(fill(&[]), "fill 17 17");
}

#[test]
fn a_correct_program_runs_to_the_end() {
    let out = run("clean", &[("SMALLOC_FREE_FILL", "0xdf")]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("not stopped"));
}
