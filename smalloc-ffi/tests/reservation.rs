//! The reservation as C programs meet it under `LD_PRELOAD`: a crash dumps
//! a core of the size glibc's would be, in which a debugger finds a live
//! block; under a data limit (the shape of strict overcommit: every
//! writable mapping counted) the program runs on regions mapped on demand;
//! under a limit that leaves no room, `malloc` returns null with `ENOMEM`;
//! a program that lowers its own limit later keeps working.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::*;
use devutils::process::{Crash, core_files_land_in_cwd, set_limit};

/// Runs `cmd` with `limit` (bytes) on `resource`, in `dir`.
fn limited(cmd: &mut Command, resource: libc::__rlimit_resource_t, limit: u64) -> Output {
    // SAFETY: the closure makes async-signal-safe system calls only.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(cmd, move || {
            set_limit(resource, limit);
            Ok(())
        })
    };
    cmd.output().unwrap()
}

#[test]
fn a_crash_dumps_what_the_program_used() {
    if let Err(why) = core_files_land_in_cwd() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = scratch_dir("core_dump");
    let exe = compile(&dir, "crash.c", &[]);
    let glibc = Crash::run(&mut Command::new(&exe), &dir.join("glibc"));
    eprintln!("glibc: {:?}, {} bytes", glibc.took, glibc.core_size());
    for (name, on_demand) in [("reserved", false), ("on_demand", true)] {
        let mut cmd = Command::new(&exe);
        preloaded(&mut cmd);
        if on_demand {
            cmd.env("SMALLOC_RESERVE", "0");
        }
        let ours = Crash::run(&mut cmd, &dir.join(name));
        let size = ours.core_size();
        eprintln!("smalloc, {name}: {:?}, {size} bytes", ours.took);
        assert!(
            ours.took < Duration::from_secs(1),
            "{name}: the dump took {:?}",
            ours.took
        );
        assert!(
            size.abs_diff(glibc.core_size()) < 10 << 20,
            "{name}: a core of {size} bytes, glibc's {}",
            glibc.core_size()
        );
        let addr = ours.printed("MARKER_AT ");
        let text = ours.gdb_string(&exe, &addr);
        assert!(
            text.contains("smalloc-c-core-marker-0123456789"),
            "{name}: gdb did not find the block at {addr}: {text}"
        );
    }
}

#[test]
fn a_data_limit_runs_on_regions_mapped_on_demand() {
    // RLIMIT_DATA counts every private writable mapping, MAP_NORESERVE or
    // not, as strict overcommit charges them: the reservation is refused
    // the same way.
    let dir = scratch_dir("data_limit");
    let exe = compile(&dir, "stress.c", &["-O2"]);
    let report = dir.join("report.txt");
    let mut cmd = Command::new(&exe);
    // No purge: it would reset regions, and the report counts the slots
    // handed out since.
    preloaded(&mut cmd)
        .env("SMALLOC_STATS", "1")
        .env("SMALLOC_STATS_FILE", &report)
        .env("SMALLOC_PURGE_DELAY_MS", "0");
    let out = limited(&mut cmd, libc::RLIMIT_DATA, 1 << 30);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("stress ok"),
        "{}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.contains("mapped on demand") && text.contains("a data limit of 1024 MiB"),
        "{text}"
    );
    let reports = read_stats(&report);
    assert!(reports.iter().any(|r| r.handed_out > 1_000), "{reports:?}");
}

#[test]
fn a_program_that_lowers_its_own_limit_keeps_working() {
    // Without the reservation given up first, the 8 TiB it holds would
    // count against the new limit: no thread could start, no library load.
    let dir = scratch_dir("lower_limit");
    let exe = compile(&dir, "lower_limit.c", &["-O2", "-pthread", "-ldl"]);
    let report = dir.join("report.txt");
    let mut cmd = Command::new(&exe);
    preloaded(&mut cmd)
        .env("SMALLOC_STATS", "1")
        .env("SMALLOC_STATS_FILE", &report);
    let out = cmd.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("lower ok"),
        "{}: {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&report).unwrap();
    assert!(
        text.contains("mapped on demand") && text.contains("gave the reservation up"),
        "{text}"
    );
}

#[test]
fn a_program_that_locks_all_its_memory_keeps_working() {
    // Without the reservation given up first, `mlockall(MCL_CURRENT)`
    // would lock all 8 TiB: refused under RLIMIT_MEMLOCK, which the
    // program makes apply to itself even as root.
    let dir = scratch_dir("lock_all");
    let exe = compile(&dir, "lock_all.c", &["-O2"]);
    let run = |cmd: &mut Command| {
        let out = cmd.output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let glibc = run(&mut Command::new(&exe));
    if !glibc.contains("lock ok") {
        eprintln!("SKIPPED: on glibc the program printed {glibc:?}");
        return;
    }
    let ours = run(preloaded(&mut Command::new(&exe)));
    assert!(ours.contains("lock ok"), "{ours}");
}

/// One run of `no_room` with `LD_PRELOAD` under an address-space limit of
/// `limit` bytes (`SMALLOC_RESERVE=0` makes the run that measures use the
/// same mappings as the limited ones): its output, or `None` when the
/// program could not even start (the dynamic loader refused).
fn no_room(exe: &Path, limit: u64) -> Option<String> {
    let mut cmd = Command::new(exe);
    preloaded(&mut cmd).env("SMALLOC_RESERVE", "0");
    let out = limited(&mut cmd, libc::RLIMIT_AS, limit);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.code().is_some(),
        "killed by a signal under a limit of {limit}: {}, {stdout}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    if !stdout.starts_with("vm ") {
        return None;
    }
    assert!(out.status.success(), "{}: {stdout}", out.status);
    Some(stdout)
}

#[test]
fn a_limit_that_leaves_no_room_gives_enomem() {
    let dir = scratch_dir("no_room");
    let exe = compile(&dir, "no_room.c", &[]);
    // The address space at main, with the slabs' metadata mapped.
    let free = no_room(&exe, libc::RLIM_INFINITY).unwrap();
    assert!(
        free.contains("malloc ok") && free.contains("calloc ok"),
        "{free}"
    );
    let vm: u64 = free.lines().next().unwrap()[3..].parse().unwrap();
    // From below what the program needs to start to well above what it
    // needs to allocate, in 64 KiB steps: every run either cannot start,
    // or its calls succeed, or they return null with ENOMEM.
    let (mut refused, mut served) = (0, 0);
    for limit in (vm - (1 << 20)..vm + (4 << 20)).step_by(64 << 10) {
        let Some(out) = no_room(&exe, limit) else {
            continue;
        };
        for what in ["malloc", "calloc"] {
            let line = out.lines().find(|l| l.starts_with(what)).unwrap();
            match &line[what.len() + 1..] {
                "ok" => served += 1,
                "null 12" => refused += 1,
                other => panic!("{what} under a limit of {limit}: {other}\n{out}"),
            }
        }
    }
    eprintln!("refused {refused}, served {served}");
    assert!(
        refused > 0 && served > 0,
        "refused {refused}, served {served}"
    );
}
