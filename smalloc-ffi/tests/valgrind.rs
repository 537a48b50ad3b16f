//! The valgrind library (`--features valgrind`) under memcheck: a C
//! program's leak, use after free, reads of uninitialised bytes, read and
//! write past a block, double free and free of an interior pointer are
//! reported as memcheck reports them with glibc's malloc (the same errors,
//! addresses described alike, the same leak summary), preloaded and linked
//! statically; a clean run is clean and served by smalloc. Skipped, with a
//! line saying so, where valgrind is not installed.
#![cfg(feature = "valgrind")]

mod common;

use std::path::Path;
use std::process::Command;

use common::*;
use devutils::have_valgrind;

/// How smalloc is used by the program.
#[derive(Clone, Copy, PartialEq)]
enum Malloc {
    Glibc,
    Preloaded,
    Static,
}

/// memcheck's report (stderr, then the program's stdout) of `exe` with
/// arguments `args`.
fn memcheck(exe: &Path, args: &[&str], malloc: Malloc) -> String {
    memcheck_in(Command::new("valgrind"), exe, args, malloc)
}

/// [`memcheck`] with `cmd` (`valgrind`, its environment set).
fn memcheck_in(mut cmd: Command, exe: &Path, args: &[&str], malloc: Malloc) -> String {
    cmd.args([
        "--leak-check=full",
        "--show-leak-kinds=definite",
        "--errors-for-leak-kinds=definite",
    ]);
    if malloc != Malloc::Glibc {
        // memcheck replaces every malloc it finds unless told not to; and
        // smalloc's blocks have no redzones (docs/valgrind.md).
        cmd.args([
            "--soname-synonyms=somalloc=nouserintercepts",
            "--redzone-size=0",
        ]);
    }
    if malloc == Malloc::Preloaded {
        preloaded(&mut cmd);
    }
    let out = cmd.arg(exe).args(args).output().unwrap();
    let report =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{args:?}: {:?}\n{report}", out.status);
    report
}

/// What of a report must be the same with glibc and with smalloc: each
/// error's headline and what it says of the address, the leaks, the error
/// count (process ids, addresses and loss record numbers taken out).
fn findings(report: &str) -> Vec<String> {
    let mut v = Vec::new();
    for line in report.lines() {
        let Some(rest) = line.strip_prefix("==").and_then(|l| l.split_once("== ")) else {
            continue;
        };
        let text = rest.1.trim();
        let keep = text.starts_with("Invalid ")
            || text.starts_with("Conditional jump")
            || text.starts_with("Address 0x")
            || text.contains("definitely lost")
            || text.starts_with("ERROR SUMMARY");
        if !keep {
            continue;
        }
        let text = match text.strip_prefix("Address 0x") {
            Some(a) => format!("Address{}", &a[a.find(' ').unwrap_or(0)..]),
            None => text.split(" in loss record").next().unwrap().to_string(),
        };
        v.push(text);
    }
    v
}

/// The C program, built for `malloc` (statically linked with smalloc, or
/// not), or `None` without valgrind.
fn program(malloc: Malloc) -> Option<std::path::PathBuf> {
    if !have_valgrind() {
        return None;
    }
    // A directory each: tests run at once, and each empties its own.
    let name = match malloc {
        Malloc::Glibc => "valgrind-glibc",
        Malloc::Preloaded => "valgrind",
        Malloc::Static => "valgrind-static",
    };
    let dir = scratch_dir(name);
    let lib = lib_a();
    let extra: &[&str] = if malloc == Malloc::Static {
        // smalloc_owns kept and exported, for the program's dlsym.
        &[
            "-rdynamic",
            "-Wl,--undefined=smalloc_owns",
            lib.to_str().unwrap(),
            "-lm",
            "-lrt",
            "-lutil",
            "-lgcc_s",
        ]
    } else {
        &[]
    };
    Some(compile(&dir, "memcheck.c", extra))
}

/// Runs every case of the program with glibc and with smalloc (`malloc`)
/// and compares what memcheck found.
fn same_as_glibc(malloc: Malloc) {
    let Some(exe) = program(malloc) else {
        return;
    };
    let glibc_exe = if malloc == Malloc::Static {
        program(Malloc::Glibc).unwrap()
    } else {
        exe.clone()
    };
    let glibc = memcheck(&glibc_exe, &["clean"], Malloc::Glibc);
    let ours = memcheck(&exe, &["clean"], malloc);
    assert!(glibc.contains("served by smalloc: no"), "{glibc}");
    assert!(ours.contains("served by smalloc: yes"), "{ours}");
    assert_eq!(
        findings(&ours),
        ["ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 0 from 0)"],
        "{ours}"
    );
    for (what, errors) in [
        ("leak", 1),
        ("use-after-free", 2),
        ("uninit", 2),
        ("overflow", 2),
        ("bad-free", 2),
    ] {
        let want = findings(&memcheck(&glibc_exe, &[what], Malloc::Glibc));
        let ours = memcheck(&exe, &[what], malloc);
        assert_eq!(findings(&ours), want, "{what}:\n{ours}");
        let summary = format!("ERROR SUMMARY: {errors} errors");
        assert!(want.iter().any(|l| l.starts_with(&summary)), "{want:?}");
    }
}

#[test]
fn preloaded_memcheck_reports_as_with_glibc() {
    same_as_glibc(Malloc::Preloaded);
}

#[test]
fn statically_linked_memcheck_reports_as_with_glibc() {
    same_as_glibc(Malloc::Static);
}

#[test]
fn a_one_thread_program_whose_sweeps_give_back_idle_slots_is_clean() {
    // The sweeps read and write the stamps of free slots, which are
    // no-access to memcheck: no error may come of it.
    if !have_valgrind() {
        return;
    }
    let exe = compile(
        &scratch_dir("valgrind-single-churn"),
        "single_churn.c",
        &["-O2"],
    );
    let mut cmd = Command::new("valgrind");
    cmd.env("SMALLOC_PURGE_DELAY_MS", "1");
    let report = memcheck_in(cmd, &exe, &["6", "4000"], Malloc::Preloaded);
    assert!(report.contains("single churn ok"), "{report}");
    assert_eq!(
        findings(&report),
        ["ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 0 from 0)"],
        "{report}"
    );
}
