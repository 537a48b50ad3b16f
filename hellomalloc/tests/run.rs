//! Runs the hellomalloc binary and checks its exit status and report.

use std::process::Command;

#[test]
fn hellomalloc_runs_and_reports() {
    let out = Command::new(env!("CARGO_BIN_EXE_hellomalloc"))
        .output()
        .expect("hellomalloc should start");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "hellomalloc failed ({}):\n{stdout}\n{stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "unexpected stderr:\n{stderr}");

    for expected in [
        "hellomalloc: ",
        "vec: pushed 200000 u64s",
        "smalloc::raw::owns = true",
        "string: formatted 10000 lines",
        "hashmap: inserted 100000, found 100000, removed 50000, 50000 remain",
        "box: built and walked a 10000-node boxed list",
        "threads: 4 producers sent 1000 batches (40000 strings) to 1 consumer",
        "peak RSS (VmHWM): ",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in output:\n{stdout}"
        );
    }
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("all ") && last.ends_with(" checks passed"),
        "last line should report success, got {last:?}"
    );

    // The buffer address printed must be a real, nonzero hex address.
    let addr_line = stdout
        .lines()
        .find(|l| l.starts_with("vec: buffer at 0x"))
        .expect("buffer address line");
    let hex = addr_line["vec: buffer at 0x".len()..]
        .split(',')
        .next()
        .unwrap_or_default();
    let addr = usize::from_str_radix(hex, 16).expect("hex address");
    assert_ne!(addr, 0);

    // The peak RSS is a plausible number of kB.
    let rss_line = stdout
        .lines()
        .find(|l| l.starts_with("peak RSS (VmHWM): "))
        .expect("peak RSS line");
    let kb: u64 = rss_line["peak RSS (VmHWM): ".len()..]
        .trim_end_matches(" kB")
        .parse()
        .expect("VmHWM in kB");
    assert!(kb > 0);
}
