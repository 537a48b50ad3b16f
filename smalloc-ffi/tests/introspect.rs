//! The statistics from C: glibc's introspection calls under `LD_PRELOAD`
//! (a C program checks their numbers and that `malloc_trim` lowers RSS),
//! python3 calling `malloc_stats` through ctypes, and the `SMALLOC_STATS`
//! report at exit.

mod common;

use std::fs;
use std::process::Command;

use common::*;

#[test]
fn mallinfo_malloc_trim_malloc_info_and_malloc_stats() {
    let dir = scratch_dir("introspect");
    let exe = compile(&dir, "introspect.c", &[]);
    // Nothing given back unasked (a one-thread heap that shrinks gives
    // large slots back as it frees): the trim is what lowers RSS here.
    let out = run_ok(preloaded(&mut target_command(&exe)).env("SMALLOC_PURGE_DELAY_MS", "0"));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(stdout.contains("introspect ok"), "{stdout}\n{stderr}");
    let xml = &stdout[stdout
        .find("<malloc version=\"1\">")
        .expect("malloc_info's XML")..];
    assert!(
        xml.contains("</malloc>") && xml.contains("<total type=\"mmap\""),
        "{xml}"
    );
    assert!(
        xml.contains("<size from=\"97\" to=\"112\" total=\"56000\" count=\"500\"/>"),
        "the freed 112-byte slots: {xml}"
    );
    assert!(
        stderr.contains("MALLOC:") && stderr.contains("Bytes in use by the application"),
        "malloc_stats: {stderr}"
    );
    eprintln!("{}", stdout.lines().last().unwrap_or(""));
}

#[test]
fn python_calls_malloc_stats_through_ctypes() {
    let out = run_ok(
        preloaded(&mut Command::new("python3"))
            .env("SMALLOC_PURGE_DELAY_MS", "0")
            .args(["-c", "import ctypes; ctypes.CDLL(None).malloc_stats()"]),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stats = Stats::parse(&stderr).unwrap_or_else(|| panic!("no report in {stderr}"));
    assert!(stats.handed_out > 1000 && stats.classes >= 5, "{stats:?}");
}

#[test]
fn smalloc_stats_prints_a_report_at_exit() {
    let dir = scratch_dir("smalloc_stats");
    let file = dir.join("stats.txt");
    // On stderr (python3: coreutils close stderr at exit).
    let out = run_ok(
        preloaded(&mut Command::new("python3"))
            .args(["-c", "pass"])
            .env("SMALLOC_STATS", "1"),
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("smalloc statistics at exit: pid="),
        "{stderr}"
    );
    assert!(Stats::parse(&stderr).is_some(), "{stderr}");
    // Into a file, appended by every process.
    for _ in 0..2 {
        run_ok(
            preloaded(&mut Command::new("sort"))
                .arg("--version")
                .env("SMALLOC_STATS", "1")
                .env("SMALLOC_STATS_FILE", &file),
        );
    }
    assert_eq!(read_stats(&file).len(), 2);
    // Off: nothing.
    let out = run_ok(
        preloaded(&mut Command::new("sort"))
            .arg("--version")
            .env("SMALLOC_STATS", "0"),
    );
    assert!(!String::from_utf8_lossy(&out.stderr).contains("MALLOC:"));
    let _ = fs::remove_file(&file);
}

/// The row of size class `sc` in the counters' table of a report: allocs,
/// frees, remote allocs, remote frees.
fn counts_row(report: &str, sc: u32) -> Option<Vec<u64>> {
    let table = report.split("Frees by threads that do not own").nth(1)?;
    let row = table
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&sc.to_string()))?;
    Some(
        row.split_whitespace()
            .skip(3)
            .map(|w| w.parse().unwrap())
            .collect(),
    )
}

#[test]
fn the_report_shows_the_counters_only_when_compiled_in() {
    let dir = scratch_dir("counts");
    let exe = compile(&dir, "counts.c", &["-pthread"]);
    let file = dir.join("stats.txt");
    let _ = fs::remove_file(&file);
    let out = run_ok(
        preloaded(&mut target_command(&exe))
            .env("SMALLOC_STATS", "1")
            .env("SMALLOC_STATS_FILE", &file),
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("counts ok"));
    let report = fs::read_to_string(&file).unwrap();
    let _ = fs::remove_file(&file);
    if !cfg!(feature = "counters") {
        assert!(!report.contains("Event first-alloc"), "{report}");
        return;
    }
    let class = |size| smalloc_core::layout::size_class(size, 16);
    // 6000 bytes (a 6 KiB slot): 1000 allocated, 300 freed by their thread,
    // 200 by main.
    assert_eq!(
        counts_row(&report, class(6000)),
        Some(vec![1000, 500, 0, 200]),
        "{report}"
    );
    // 20000 bytes (a 20 KiB slot, a multiple of 4096 as the aligned ones
    // need): calloc, posix_memalign, aligned_alloc four times, and the
    // realloc's first block; 64 KiB: where the realloc moved it.
    assert_eq!(
        class(20_000),
        smalloc_core::layout::size_class(20_000, 4096)
    );
    assert_eq!(
        counts_row(&report, class(20_000)),
        Some(vec![13, 13, 0, 0]),
        "{report}"
    );
    assert_eq!(
        counts_row(&report, class(65536)),
        Some(vec![1, 1, 0, 0]),
        "{report}"
    );
    assert!(report.contains("Event first-alloc"), "{report}");
}

/// Every `SMALLOC_*` variable is read with `secure_getenv`: in
/// secure-execution mode (here a setuid-root program run by `nobody`)
/// `SMALLOC_STATS_FILE` is ignored, so a system-wide smalloc cannot be made
/// to write files as root; the same program without the setuid bit writes
/// its report. Needs root and setpriv (skipped, loudly, without them).
#[test]
fn smalloc_variables_are_ignored_in_secure_execution_mode() {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root || Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!("SKIPPED: needs root and setpriv");
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    // A directory `nobody` can enter and write.
    let dir = std::env::temp_dir().join(format!("smalloc-secure-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o777)).unwrap();
    let mut vfs = std::mem::MaybeUninit::<libc::statvfs>::zeroed();
    let path = std::ffi::CString::new(dir.to_str().unwrap()).unwrap();
    // SAFETY: a NUL-terminated path and a valid out-pointer.
    let ok = unsafe { libc::statvfs(path.as_ptr(), vfs.as_mut_ptr()) } == 0;
    // SAFETY: statvfs filled it when it returned 0.
    if !ok || unsafe { vfs.assume_init() }.f_flag & libc::ST_NOSUID != 0 {
        eprintln!(
            "SKIPPED: {} is mounted nosuid (setuid has no effect there)",
            dir.display()
        );
        let _ = fs::remove_dir_all(&dir);
        return;
    }
    let include = devutils::workspace_dir().join("smalloc-ffi/include");
    let lib = lib_a();
    let static_flags = ["-lm", "-lrt", "-lutil", "-lgcc_s"];
    let mut args = vec!["-I", include.to_str().unwrap(), lib.to_str().unwrap()];
    args.extend(static_flags);
    let exe = compile(&dir, "static_link.c", &args);
    let report = dir.join("report.txt");
    let run = |mode: u32| {
        fs::set_permissions(&exe, fs::Permissions::from_mode(mode)).unwrap();
        let _ = fs::remove_file(&report);
        run_ok(
            Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&exe)
                .env("SMALLOC_STATS", "1")
                .env("SMALLOC_STATS_FILE", &report),
        );
        report.exists()
    };
    assert!(run(0o755), "control: the report is written without setuid");
    assert!(!run(0o4755), "setuid: SMALLOC_STATS_FILE must be ignored");
    let _ = fs::remove_dir_all(&dir);
}

/// libsmalloc.so imports no plain `getenv` (the standard library's readers
/// of `RUST_*` variables go through `secure_getenv` too, by the link's
/// `--wrap=getenv`), imports `secure_getenv`, and does not export the
/// wrapper.
#[test]
fn the_library_imports_no_plain_getenv() {
    let out = run_ok(Command::new("nm").args(["-D"]).arg(lib_so()));
    let text = String::from_utf8_lossy(&out.stdout);
    let symbol = |l: &str| l.split_whitespace().last().unwrap_or("").to_string();
    let names: Vec<String> = text.lines().map(symbol).collect();
    assert!(
        !names
            .iter()
            .any(|n| n == "getenv" || n.starts_with("getenv@")),
        "getenv imported:\n{text}"
    );
    assert!(
        names.iter().any(|n| n.starts_with("secure_getenv")),
        "secure_getenv not imported"
    );
    assert!(
        !names.iter().any(|n| n.contains("__wrap_getenv")),
        "wrapper exported"
    );
}
