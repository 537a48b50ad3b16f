//! Heap profiling from C: the profiling library (`--features profile`)
//! under `LD_PRELOAD` estimates a C program's two allocation sites within
//! a stated bound with either unwinder, writes its files at exit, on a
//! signal and through `smalloc_prof_dump` (SVG, folded, pprof that decodes
//! and that `go tool pprof` reads), and names python3's allocation sites;
//! the default library answers `smalloc_prof_dump` with `ENOSYS`.

mod common;

#[cfg(feature = "profile")]
use std::fs;
#[cfg(feature = "profile")]
use std::path::Path;
use std::process::Command;

use common::*;

#[cfg(not(feature = "profile"))]
#[test]
fn the_default_library_has_no_profiler() {
    let script = "import ctypes\n\
        lib = ctypes.CDLL(None, use_errno=True)\n\
        print(lib.smalloc_prof_dump(b'/nonexistent/x'), ctypes.get_errno())";
    let out = run_ok(preloaded(&mut Command::new("python3")).args(["-c", script]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(stdout.trim(), format!("-1 {}", libc_enosys()));
}

#[cfg(not(feature = "profile"))]
fn libc_enosys() -> i32 {
    38
}

/// Estimated bytes of the folded lines through `site`.
#[cfg(feature = "profile")]
fn site_bytes(folded: &str, site: &str) -> f64 {
    folded
        .lines()
        .filter(|l| l.contains(site))
        .map(|l| l.rsplit_once(' ').unwrap().1.parse::<f64>().unwrap())
        .sum()
}

/// The function names of a gzipped pprof file, decoded with the core's
/// message definitions.
#[cfg(feature = "profile")]
fn pprof_functions(path: &Path) -> (Vec<String>, smalloc_core::profile::pprof::PProfile) {
    use prost::Message;
    use std::io::Read;
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(fs::File::open(path).unwrap())
        .read_to_end(&mut raw)
        .unwrap();
    let p = smalloc_core::profile::pprof::PProfile::decode(&raw[..]).unwrap();
    let names = p
        .function
        .iter()
        .map(|f| p.string_table[f.name as usize].clone())
        .collect();
    (names, p)
}

/// The files in `dir` whose names start with `prefix` and end with `ext`.
#[cfg(feature = "profile")]
fn files(dir: &Path, prefix: &str, ext: &str) -> Vec<std::path::PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with(prefix) && n.ends_with(ext)
        })
        .collect()
}

#[cfg(feature = "profile")]
#[test]
fn two_sites_within_the_bound_with_either_unwinder_and_every_output() {
    let dir = scratch_dir("prof");
    let exe = compile(&dir, "prof.c", &["-fno-omit-frame-pointer"]);
    for unwind in ["fp", "dwarf"] {
        let (folded, svg, pb) = (
            dir.join(format!("{unwind}.folded")),
            dir.join(format!("{unwind}.svg")),
            dir.join(format!("{unwind}.pb.gz")),
        );
        let out = run_ok(
            preloaded(&mut target_command(&exe))
                .args([&folded, &svg, &pb])
                .env("SMALLOC_PROF", "64k")
                .env("SMALLOC_PROF_UNWIND", unwind)
                .env("SMALLOC_PROF_OUT", dir.join(format!("exit-{unwind}"))),
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("prof ok"));
        let text = fs::read_to_string(&folded).unwrap();
        let (a, b) = (
            site_bytes(&text, "site_three"),
            site_bytes(&text, "site_one"),
        );
        // The bound of smalloc/tests/profile.rs: at a 64 KiB mean, 48 MiB
        // and 16 MiB give estimates with relative standard deviations of
        // 3.6% and 6.25%; five of them each way.
        let mib = 1048576.0;
        assert!(
            (a / (48.0 * mib) - 1.0).abs() < 0.18,
            "{unwind}: site_three {:.1} MiB\n{text}",
            a / mib
        );
        assert!(
            (b / (16.0 * mib) - 1.0).abs() < 0.32,
            "{unwind}: site_one {:.1} MiB",
            b / mib
        );
        assert_eq!(site_bytes(&text, "site_freed"), 0.0, "freed: not live");
        // The big block (sampled for sure at its size) once: the freed one
        // left the live profile, also after its move by realloc.
        assert_eq!(site_bytes(&text, "site_big"), (3u64 << 30) as f64 + 1.0);
        assert!(fs::read_to_string(&svg).unwrap().contains("<svg"));
        let (names, p) = pprof_functions(&pb);
        assert!(
            names.iter().any(|n| n == "site_three"),
            "{unwind}: {names:?}"
        );
        assert!(
            names.iter().any(|n| n == "site_freed"),
            "allocated: {names:?}"
        );
        assert!(
            names.iter().all(|n| n != "sample"),
            "profiler frames: {names:?}"
        );
        assert_eq!(p.sample_type.len(), 4);
        // At exit: the three files.
        for ext in [".pb.gz", ".folded", ".svg"] {
            assert_eq!(
                files(&dir, &format!("exit-{unwind}."), ext).len(),
                1,
                "{ext}"
            );
        }
        eprintln!(
            "{unwind}: site_three {:.1} MiB, site_one {:.1} MiB (of 48 and 16)",
            a / mib,
            b / mib
        );
        go_reads(&pb, "site_three");
    }
}

/// `go tool pprof -top` reads the profile and names `site`; skipped,
/// loudly, without Go.
#[cfg(feature = "profile")]
fn go_reads(pb: &Path, site: &str) {
    let Ok(out) = Command::new("go")
        .args(["tool", "pprof", "-top", "-sample_index=alloc_space"])
        .arg(pb)
        .output()
    else {
        eprintln!("SKIPPED: go tool pprof (no Go on this machine)");
        return;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(site),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(feature = "profile")]
#[test]
fn a_signal_asks_for_a_dump() {
    let dir = scratch_dir("prof_signal");
    let exe = compile(&dir, "prof.c", &["-fno-omit-frame-pointer"]);
    run_ok(
        preloaded(&mut target_command(&exe))
            .arg("signal")
            .env("SMALLOC_PROF", "64k")
            .env("SMALLOC_PROF_SIGNAL", "USR2")
            .env("SMALLOC_PROF_OUT", dir.join("sig")),
    );
    // sig.PID.1.* from the signal, sig.PID.* at exit.
    let dumps = files(&dir, "sig.", ".1.folded");
    assert_eq!(
        dumps.len(),
        1,
        "{:?}",
        fs::read_dir(&dir).unwrap().collect::<Vec<_>>()
    );
    assert!(site_bytes(&fs::read_to_string(&dumps[0]).unwrap(), "site_three") > 0.0);
}

#[cfg(feature = "profile")]
#[test]
fn a_python3_profile_names_its_allocation_sites() {
    let dir = scratch_dir("prof_python");
    // The interpreter itself (pyenv's python3 is a shell script).
    let exe = run_ok(Command::new("python3").args(["-c", "import sys; print(sys.executable)"]));
    let python = String::from_utf8_lossy(&exe.stdout).trim().to_string();
    let script = "import json\n\
        d = [{'a': i, 'b': str(i) * 100, 'c': [i] * 50} for i in range(50000)]\n\
        s = json.dumps(d)\n";
    run_ok(
        preloaded(&mut Command::new(&python))
            .args(["-c", script])
            .env("SMALLOC_PROF", "256k")
            .env("SMALLOC_PROF_OUT", dir.join("py")),
    );
    let pb = files(&dir, "py.", ".pb.gz");
    assert_eq!(pb.len(), 1);
    let (names, p) = pprof_functions(&pb[0]);
    // One pprof sample per distinct stack.
    assert!(p.sample.len() > 10, "{} stacks", p.sample.len());
    // CPython's allocation functions and callers, by name.
    for want in ["_PyObject_Malloc", "PyList_Append"] {
        assert!(
            names.iter().any(|n| n.contains(want)),
            "{want} not in {names:?}"
        );
    }
    go_reads(&pb[0], "_PyObject_Malloc");
}
