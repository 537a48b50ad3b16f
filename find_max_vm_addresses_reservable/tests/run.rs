//! Runs find_max_vm_addresses_reservable and checks what it reports.

use std::process::{Command, Output};

use smalloc::layout::TOTAL_SIZE;

const BIN: &str = env!("CARGO_BIN_EXE_find_max_vm_addresses_reservable");

fn stdout_of(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {}:\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("UTF-8 output")
}

fn run(args: &[&str]) -> String {
    stdout_of(
        &Command::new(BIN)
            .args(args)
            .output()
            .expect("binary starts"),
    )
}

#[test]
fn quiet_reports_enough_for_smalloc() {
    let out = run(&["--quiet"]);
    let bytes: usize = out.trim().parse().expect("--quiet prints one number");
    assert_eq!(out, format!("{bytes}\n"), "--quiet prints only the number");
    assert_eq!(bytes % 4096, 0, "page granularity");
    assert!(
        bytes >= TOTAL_SIZE,
        "this machine grants only {bytes} bytes; smalloc needs {TOTAL_SIZE}"
    );
}

#[test]
fn report_has_expected_lines() {
    let out = run(&[]);
    for expected in [
        "page size: ",
        "vm.overcommit_memory: ",
        "RLIMIT_AS (ulimit -v): ",
        "largest mmap granted: ",
        &format!("smalloc reservation: {TOTAL_SIZE} bytes (8.000 TiB)"),
        &format!(
            "smalloc transient mapping for alignment: {} bytes (16.000 TiB)",
            2 * TOTAL_SIZE
        ),
        "verdict: smalloc ",
    ] {
        assert!(out.contains(expected), "missing {expected:?} in:\n{out}");
    }
    assert!(
        !out.contains("does NOT fit"),
        "smalloc should fit on this machine:\n{out}"
    );
    let line = out
        .lines()
        .find(|l| l.starts_with("largest mmap granted: "))
        .expect("result line");
    let bytes: usize = line["largest mmap granted: ".len()..]
        .split(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .expect("byte count on the result line");
    assert!(bytes >= TOTAL_SIZE);
}

#[test]
fn rejects_unknown_arguments() {
    let out = Command::new(BIN)
        .arg("--bogus")
        .output()
        .expect("binary starts");
    assert_eq!(out.status.code(), Some(2));
}

/// Under `ulimit -v` the measurement must follow the limit, and the verdict
/// must say smalloc does not fit.
#[test]
fn follows_address_space_limit() {
    const LIMIT_KIB: usize = 1 << 20; // 1 GiB
    let script = format!("ulimit -v {LIMIT_KIB} && exec \"$0\" \"$@\"");
    let quiet = stdout_of(
        &Command::new("sh")
            .args(["-c", &script, BIN, "--quiet"])
            .output()
            .expect("sh starts"),
    );
    let bytes: usize = quiet.trim().parse().expect("one number");
    let limit = LIMIT_KIB * 1024;
    // The process's own mappings use part of the limit, but not most of it.
    assert!(
        bytes < limit && bytes > limit / 2,
        "{bytes} bytes under a {limit}-byte limit"
    );

    let full = stdout_of(
        &Command::new("sh")
            .args(["-c", &script, BIN])
            .output()
            .expect("sh starts"),
    );
    assert!(full.contains(&format!("soft {limit} bytes")), "{full}");
    assert!(full.contains("verdict: smalloc does NOT fit"), "{full}");
}
