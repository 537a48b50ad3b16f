//! Real programs under `LD_PRELOAD`, each compared with the same run
//! without it: same output, exit status 0. Each preloaded run also writes
//! smalloc's statistics at exit (`SMALLOC_STATS`), which prove the
//! program's allocations really came from smalloc: the counts are read
//! from smalloc's own free lists.

mod common;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use common::*;

/// Runs `make(dir)` once plainly and once with smalloc preloaded, each in
/// its own empty directory; asserts both succeed with the same stdout and
/// that some process of the preloaded run was handed at least `min_slots`
/// distinct slots of at least `min_lists` size classes, or got
/// at least `min_bytes` of slots.
/// Returns the stdout.
fn compare(
    name: &str,
    min_slots: u64,
    min_lists: u64,
    min_bytes: u64,
    make: impl Fn(&Path) -> Command,
) -> String {
    compare_under(name, None, min_slots, min_lists, min_bytes, make).0
}

/// [`compare`], both runs under an address-space limit (`ulimit -v`) of
/// `limit` bytes if given; returns the stdout and the preloaded run's
/// statistics reports.
fn compare_under(
    name: &str,
    limit: Option<u64>,
    min_slots: u64,
    min_lists: u64,
    min_bytes: u64,
    make: impl Fn(&Path) -> Command,
) -> (String, Vec<Stats>) {
    let make = |dir: &Path| {
        let mut c = make(dir);
        if let Some(limit) = limit {
            // SAFETY: the closure makes async-signal-safe system calls only.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut c, move || {
                    devutils::process::set_limit(libc::RLIMIT_AS, limit);
                    Ok(())
                })
            };
        }
        c
    };
    let base = scratch_dir(name);
    let plain_dir = base.join("plain");
    let smalloc_dir = base.join("smalloc");
    fs::create_dir_all(&plain_dir).unwrap();
    fs::create_dir_all(&smalloc_dir).unwrap();
    let report = base.join("report.txt");

    let plain = run_ok(make(&plain_dir).current_dir(&plain_dir));
    let mut cmd = make(&smalloc_dir);
    preloaded(cmd.current_dir(&smalloc_dir))
        .env("SMALLOC_STATS", "1")
        .env("SMALLOC_STATS_FILE", &report)
        // The report's counts are of slots handed out since the purge last
        // reset a region: no purge, so they say how busy the run was.
        .env("SMALLOC_PURGE_DELAY_MS", "0");
    let with = run_ok(&mut cmd);

    let (a, b) = (
        String::from_utf8_lossy(&plain.stdout),
        String::from_utf8_lossy(&with.stdout),
    );
    if a != b {
        let first = a.lines().zip(b.lines()).position(|(x, y)| x != y);
        panic!(
            "{name}: output differs under smalloc (first differing line: {first:?})\n\
             --- plain:\n{a}\n--- smalloc:\n{b}"
        );
    }
    assert!(!a.trim().is_empty(), "{name} printed nothing");

    let reports = read_stats(&report);
    let busiest = reports.iter().max_by_key(|r| r.handed_out);
    let biggest = reports.iter().max_by_key(|r| r.bytes);
    assert!(
        reports
            .iter()
            .any(|r| (r.handed_out >= min_slots && r.classes >= min_lists) || r.bytes >= min_bytes),
        "{name}: no process reports {min_slots} slots handed out in {min_lists} size classes \
         or {min_bytes} bytes; {} reports, busiest {busiest:?}, biggest {biggest:?}",
        reports.len()
    );
    eprintln!(
        "{name}: {} processes reported; busiest {busiest:?}",
        reports.len()
    );
    (a.into_owned(), reports)
}

fn program(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/programs")
        .join(file)
}

/// The real Python interpreter (not a version manager's wrapper script).
fn python() -> String {
    let out = run_ok(Command::new("python3").args(["-c", "import sys; print(sys.executable)"]));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn python_sorts_objects_and_round_trips_json() {
    let py = python();
    let out = compare("python", 1_000_000, 8, u64::MAX, |_| {
        let mut c = Command::new(&py);
        // Every object through malloc (not Python's own small-object arenas).
        c.env("PYTHONMALLOC", "malloc").arg(program("objects.py"));
        c
    });
    assert!(out.contains("sorted 600000"), "{out}");
}

/// Each of python3 and sqlite3 under address-space limits of 1 and 4 GiB,
/// which refuse smalloc's reservation: the same output as without smalloc
/// (under the same limit), every process's allocations served by smalloc
/// from regions mapped on demand, as its report says.
fn under_limits(name: &str, min_slots: u64, make: impl Fn(&Path) -> Command + Copy) {
    for gib in [1u64, 4] {
        let (_, reports) = compare_under(
            &format!("{name}_limit_{gib}g"),
            Some(gib << 30),
            min_slots,
            4,
            u64::MAX,
            make,
        );
        assert!(
            reports
                .iter()
                .all(|r| r.address_space == AddressSpace::OnDemandUnderLimit),
            "{name} under {gib} GiB: {reports:?}"
        );
    }
}

#[test]
fn python_under_address_space_limits() {
    let py = python();
    under_limits("python", 300_000, |_| {
        let mut c = Command::new(&py);
        c.env("PYTHONMALLOC", "malloc")
            .env("OBJECTS_ROWS", "150000")
            .arg(program("objects.py"));
        c
    });
}

#[test]
fn sqlite3_under_address_space_limits() {
    under_limits("sqlite3", 600, |dir| {
        let mut c = Command::new("sqlite3");
        c.arg(dir.join("rows.db")).stdin(Stdio::from(
            fs::File::open(program("sqlite_rows.sql")).unwrap(),
        ));
        c
    });
}

#[test]
fn git_on_a_throwaway_repository() {
    let out = compare("git", 600, 5, u64::MAX, |_| {
        let mut c = Command::new("sh");
        c.arg(program("git_ops.sh"));
        c
    });
    assert!(out.contains("initial: 300 files"), "{out}");
}

#[test]
fn sqlite3_inserts_and_queries_rows() {
    let out = compare("sqlite3", 600, 8, u64::MAX, |dir| {
        let mut c = Command::new("sqlite3");
        c.arg(dir.join("rows.db")).stdin(Stdio::from(
            fs::File::open(program("sqlite_rows.sql")).unwrap(),
        ));
        c
    });
    assert!(out.contains("\n300000|"), "{out}");
}

/// A deterministic xorshift generator for the generated inputs.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn sort_of_a_large_file() {
    let input = scratch_dir("sort_input").join("input.txt");
    let mut rng = XorShift(0x5eed);
    let mut text = String::with_capacity(40 << 20);
    for i in 0..1_000_000u64 {
        let r = rng.next();
        text.push_str(&format!("{:016x},{},line{}\n", r, r % 100_000, i));
    }
    fs::write(&input, text).unwrap();
    let out = compare("sort", u64::MAX, 0, 32 << 20, |_| {
        let mut c = Command::new("sh");
        c.env("LC_ALL", "C").arg("-c").arg(format!(
            "sort -S 64M --parallel=2 '{0}' | md5sum && \
             sort -t, -k2,2n -k3,3 '{0}' | tee sorted.txt | tail -3 && md5sum < sorted.txt",
            input.display()
        ));
        c
    });
    assert_eq!(out.lines().count(), 5, "{out}");
}

#[test]
fn cc_compiles_a_c_file() {
    let dir = scratch_dir("cc_source");
    let src = dir.join("prog.c");
    let mut c = String::from("#include <stdio.h>\n#include <string.h>\n");
    for f in 0..600 {
        c.push_str(&format!(
            "static unsigned long f{f}(unsigned long x) {{\n\
             \tunsigned long a[{n}];\n\
             \tfor (int i = 0; i < {n}; i++) a[i] = x * {f}u + (unsigned long)i * i;\n\
             \tswitch (x % 5) {{ case 0: return a[{m}] ^ x; case 1: return a[0] + {f}; \
             case 2: return a[{n} - 1] - x; default: return x * 31 + a[x % {n}]; }}\n}}\n",
            n = 8 + f % 24,
            m = f % 8
        ));
    }
    c.push_str("int main(void) {\n\tunsigned long s = 0;\n");
    for f in 0..600 {
        c.push_str(&format!("\ts = s * 1099511628211ul + f{f}(s + {f});\n"));
    }
    c.push_str("\tprintf(\"%lu\\n\", s);\n\treturn 0;\n}\n");
    fs::write(&src, c).unwrap();
    let out = compare("cc", 20_000, 8, u64::MAX, |_| {
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!(
            "cp '{}' prog.c && cc -O2 -c prog.c -o prog.o && md5sum prog.o && \
             cc -O1 prog.c -o prog && ./prog",
            src.display()
        ));
        c
    });
    assert_eq!(out.lines().count(), 2, "{out}");
}

#[test]
fn perl_builds_rewrites_and_sorts_hashes() {
    let out = compare("perl", 300_000, 8, u64::MAX, |_| {
        let mut c = Command::new("perl");
        c.arg(program("hashes.pl"));
        c
    });
    assert!(out.contains("built 200000 keys"), "{out}");
    assert_eq!(out.lines().count(), 3, "{out}");
}

/// The C++ compiler, and what it builds: four threads churning standard
/// containers.
#[test]
fn cxx_compiles_and_runs_threads_of_containers() {
    let out = compare("cxx", 20_000, 8, u64::MAX, |_| {
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!(
            "c++ -O1 -std=c++17 -pthread -o prog '{}' && ./prog",
            program("containers.cpp").display()
        ));
        c
    });
    assert_eq!(out.lines().count(), 4, "{out}");
}
