//! The LD_PRELOAD stress programs of bench/preload compile, run to the end
//! under smalloc (and glibc) with tiny parameters and exit 0, and the
//! runner script produces its tables. Nothing about timing is asserted.
//! Needs `target/release/libsmalloc.so` (`cargo build --release -p
//! smalloc-ffi`, which devutils/test.sh runs first) and a C compiler.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use devutils::target_dir;

/// Each program with tiny parameters (threads are appended).
const PROGRAMS: [(&str, &[&str]); 7] = [
    ("larson", &["-c", "50", "-n", "2000", "-r", "2"]),
    ("xmalloc-test", &["-n", "5000"]),
    ("cache-thrash", &["-n", "2000", "-w", "10"]),
    ("cache-scratch", &["-n", "2000", "-w", "10"]),
    ("mstress", &["-r", "2", "-n", "2000", "-S", "256K"]),
    ("kv", &["-k", "500", "-n", "5000", "-v", "2048"]),
    ("heapread", &["-n", "2000", "-r", "20000"]),
];

fn preload_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("preload")
}

fn lib_so() -> PathBuf {
    let so = target_dir().join("release/libsmalloc.so");
    assert!(
        so.is_file(),
        "{} is missing: build it first with `cargo build --release -p smalloc-ffi` \
         (devutils/test.sh does)",
        so.display()
    );
    so
}

fn have_cc() -> bool {
    Command::new("cc").arg("--version").output().is_ok()
}

fn scratch(name: &str) -> PathBuf {
    let dir = target_dir().join("bench-tests").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

use devutils::run_ok as ok;

fn compile(dir: &Path, name: &str) -> PathBuf {
    let exe = dir.join(name);
    ok(Command::new("cc")
        .args([
            "-O1",
            "-g",
            "-std=gnu11",
            "-pthread",
            "-Wall",
            "-Wextra",
            "-Werror",
        ])
        .arg("-o")
        .arg(&exe)
        .arg(preload_dir().join(format!("{name}.c"))));
    exe
}

#[test]
fn every_program_runs_under_smalloc_and_glibc() {
    if !have_cc() {
        eprintln!("skipped: no C compiler (cc)");
        return;
    }
    let so = lib_so();
    let dir = scratch("preload-programs");
    let measure = compile(&dir, "measure");
    for (name, args) in PROGRAMS {
        let exe = compile(&dir, name);
        for threads in ["2", "8"] {
            // glibc.
            let out = ok(Command::new(&exe).args(args).args(["-t", threads]));
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                stdout.starts_with(&format!("{name}: threads={threads}")),
                "{stdout}"
            );
            // smalloc, through the runner's measuring wrapper, which must
            // report a peak RSS and pass LD_PRELOAD to the program only.
            let report = dir.join(format!("{name}-{threads}.report"));
            let result = dir.join(format!("{name}-{threads}.measure"));
            ok(Command::new(&measure)
                .arg("-p")
                .arg(&so)
                .arg("-o")
                .arg(&result)
                .arg("--")
                .arg(&exe)
                .args(args)
                .args(["-t", threads])
                .env("SMALLOC_STATS", "1")
                .env("SMALLOC_STATS_FILE", &report));
            let m = fs::read_to_string(&result).expect("measure wrote its line");
            let fields: Vec<&str> = m.split_whitespace().collect();
            assert_eq!(fields.len(), 5, "{m}");
            assert!(fields[1].parse::<u64>().unwrap() > 0, "peak RSS: {m}");
            assert_eq!(fields[4], "0", "{m}");
            let reports = fs::read_to_string(&report).unwrap_or_default();
            assert_eq!(
                reports.matches("smalloc statistics at exit").count(),
                1,
                "{name}: one smalloc report (the program's, not the wrapper's): {reports}"
            );
            let handed_out = reports
                .lines()
                .find(|l| l.ends_with("Slots ever handed out"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok());
            assert!(
                handed_out.is_some_and(|n| n > 0),
                "{name} ran on smalloc: {reports}"
            );
        }
    }
}

/// `heapread -P` places the blocks itself (no malloc) and reads them back
/// checked; a spacing too small for its classes is refused or reported.
#[test]
fn heapread_places_blocks_itself_with_a_spacing() {
    if !have_cc() {
        eprintln!("skipped: no C compiler (cc)");
        return;
    }
    let dir = scratch("preload-heapread");
    let exe = compile(&dir, "heapread");
    for spacing in ["4M", "4G"] {
        let out =
            ok(Command::new(&exe).args(["-t", "3", "-n", "2000", "-r", "20000", "-P", spacing]));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with("heapread: threads=3 blocks=2000 reads=60000"),
            "{stdout}"
        );
    }
    let refused = Command::new(&exe)
        .args(["-P", "512K"])
        .output()
        .expect("run");
    assert_eq!(refused.status.code(), Some(2), "a spacing below 1M");
    let refused = Command::new(&exe)
        .args(["-P", "4M", "-S", "128K"])
        .output()
        .expect("run");
    assert_eq!(refused.status.code(), Some(2), "blocks above 64K");
    let full = Command::new(&exe)
        .args(["-n", "64K", "-P", "1M", "-r", "1"])
        .output()
        .expect("run");
    assert_eq!(full.status.code(), Some(1), "a region that fills");
    assert!(
        String::from_utf8_lossy(&full.stderr).contains("region is full"),
        "{}",
        String::from_utf8_lossy(&full.stderr)
    );
}

#[test]
fn programs_reject_bad_arguments() {
    if !have_cc() {
        eprintln!("skipped: no C compiler (cc)");
        return;
    }
    let dir = scratch("preload-args");
    for (name, _) in PROGRAMS {
        let exe = compile(&dir, name);
        let out = Command::new(&exe).arg("-Q").output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{name} -Q");
        let out = Command::new(&exe).args(["-t", "0"]).output().expect("run");
        assert_eq!(out.status.code(), Some(2), "{name} -t 0");
    }
}

#[test]
fn runner_prints_both_tables() {
    if !have_cc() {
        eprintln!("skipped: no C compiler (cc)");
        return;
    }
    let so = lib_so();
    let dir = scratch("preload-runner");
    let out = ok(Command::new("bash")
        .arg(preload_dir().join("run.sh"))
        .env("QUICK", "1")
        .env("ALLOCS", "glibc smalloc")
        .env("THREADS", "2")
        .env("SMALLOC_SO", &so)
        .env("OUT", &dir));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("== wall time"), "{stdout}");
    assert!(stdout.contains("== peak RSS"), "{stdout}");
    assert!(stdout.contains("smalloc/glibc"), "{stdout}");
    for (name, _) in PROGRAMS {
        let rows = stdout
            .lines()
            .filter(|l| l.starts_with(&format!("{name}@2 ")))
            .count();
        assert_eq!(rows, 2, "{name}: a row in each table\n{stdout}");
    }
    assert!(!stdout.contains("FAIL"), "{stdout}");
}
