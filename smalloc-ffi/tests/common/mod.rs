//! Shared by the integration tests: where the release artifacts are,
//! compiling the C/C++ test programs, running programs with and without
//! `LD_PRELOAD`, and reading smalloc's exit reports.
#![allow(dead_code)] // each test binary uses a different subset

use std::ffi::OsStr;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use devutils::target_dir;

/// Modification time of `path` (the epoch if it cannot be read).
fn mtime(path: &Path) -> SystemTime {
    fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

/// A release artifact of smalloc-ffi, checked to exist and to be newer than
/// every source file it was built from (as listed in cargo's dep-info file
/// `libsmalloc.d` beside it).
fn release_artifact(name: &str) -> PathBuf {
    let release = release_dir();
    let path = release.join(name);
    assert!(
        path.is_file(),
        "{} is missing: build it first with `cargo build --release -p smalloc-ffi` \
         (devutils/test.sh does)",
        path.display()
    );
    let built = mtime(&path);
    let dep_info = fs::read_to_string(release.join("libsmalloc.d")).unwrap_or_default();
    for line in dep_info.lines() {
        let Some((_, sources)) = line.split_once(": ") else {
            continue;
        };
        for src in sources.split_whitespace().map(Path::new) {
            assert!(
                mtime(src) <= built,
                "{} is older than {}: rebuild it with `cargo build --release -p smalloc-ffi`",
                path.display(),
                src.display()
            );
        }
    }
    path
}

/// The release build's directory for this test binary's target: beside
/// the directory of its own profile (`target/release`, or
/// `target/<triple>/release` when the tests were built with `--target`).
fn release_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // The binary is `<dir>/<profile>/deps/<name>`.
    match exe.ancestors().nth(3) {
        Some(dir) if exe.ancestors().nth(1).is_some_and(|d| d.ends_with("deps")) => {
            dir.join("release")
        }
        _ => target_dir().join("release"),
    }
}

/// `libsmalloc.so` of the release build.
pub fn lib_so() -> PathBuf {
    release_artifact("libsmalloc.so")
}

/// `libsmalloc.a` of the release build.
pub fn lib_a() -> PathBuf {
    release_artifact("libsmalloc.a")
}

/// A fresh scratch directory for one test.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = target_dir().join("ffi-tests").join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create scratch dir");
    dir
}

/// Source file of a C/C++ test program.
pub fn c_source(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/c")
        .join(file)
}

/// Compiles `file` (C, or C++ if it ends in `.cpp`) from `tests/c` into
/// `dir` with `extra` arguments after the source; returns the executable.
pub fn compile(dir: &Path, file: &str, extra: &[&str]) -> PathBuf {
    let cxx = file.ends_with(".cpp");
    let out = dir.join(file.split('.').next().unwrap_or(file));
    let mut cmd = Command::new(devutils::target_cc(cxx));
    cmd.args(["-O1", "-g", "-Wall", "-Werror", "-fno-builtin"])
        .arg(if cxx { "-std=c++17" } else { "-std=gnu11" })
        .arg("-Wno-alloc-size-larger-than")
        .arg("-o")
        .arg(&out)
        .arg(c_source(file))
        .args(extra)
        .args(["-ldl", "-lpthread"]);
    let output = cmd.output().expect("run the C compiler (is cc installed?)");
    assert!(
        output.status.success(),
        "compiling {file} failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    out
}

pub use devutils::{run_ok, target_command};

/// `cmd` with `LD_PRELOAD` set to libsmalloc.so.
pub fn preloaded(cmd: &mut Command) -> &mut Command {
    devutils::preload(cmd, &lib_so())
}

/// Runs the test program `exe` with smalloc preloaded and checks that it
/// succeeds and prints `expect` on stdout.
pub fn run_preloaded_expect(exe: &Path, args: &[&OsStr], expect: &str) {
    let out = run_ok(preloaded(&mut target_command(exe)).args(args));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(expect),
        "{} printed {stdout:?}, expected {expect:?}",
        exe.display()
    );
}

/// The numbers of one smalloc statistics report (`malloc_stats`, or
/// `SMALLOC_STATS` at exit) that the tests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Size classes that ever handed out a slot (rows of the table).
    pub classes: u64,
    /// Slots ever handed out.
    pub handed_out: u64,
    /// Bytes of those slots.
    pub bytes: u64,
    /// How the layout's address space was held (the report's first line).
    pub address_space: AddressSpace,
}

/// What a report's "Address space:" line says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddressSpace {
    /// One reservation.
    Reserved,
    /// Regions mapped on demand, the reservation refused under an
    /// address-space limit.
    OnDemandUnderLimit,
    /// Anything else.
    Other,
}

impl Stats {
    /// Parses the first report in `text`.
    pub fn parse(text: &str) -> Option<Stats> {
        let number = |what: &str| -> Option<u64> {
            let line = text
                .lines()
                .find(|l| l.starts_with("MALLOC:") && l.ends_with(what))?;
            line["MALLOC:".len()..]
                .split_whitespace()
                .find_map(|w| w.parse().ok())
        };
        let table = text
            .split("------------------------------------------------")
            .nth(2)?;
        let classes = table
            .lines()
            .filter(|l| {
                l.split_whitespace()
                    .next()
                    .is_some_and(|w| w.parse::<u32>().is_ok())
            })
            .count() as u64;
        let line = text.lines().find(|l| l.starts_with("Address space:"))?;
        let address_space = if line.contains("one reservation") {
            AddressSpace::Reserved
        } else if line.contains("mapped on demand") && line.contains("address-space limit") {
            AddressSpace::OnDemandUnderLimit
        } else {
            AddressSpace::Other
        };
        Some(Stats {
            classes,
            handed_out: number("Slots ever handed out")?,
            bytes: number("Bytes of slots ever handed out")?,
            address_space,
        })
    }
}

/// Parses the reports of a `SMALLOC_STATS_FILE`, one per process.
pub fn read_stats(path: &Path) -> Vec<Stats> {
    let text = fs::read_to_string(path).unwrap_or_default();
    text.split("smalloc statistics at exit: pid=")
        .skip(1)
        .filter_map(Stats::parse)
        .collect()
}
