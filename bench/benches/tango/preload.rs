//! The LD_PRELOAD programs of bench/preload as `preload/PROGRAM@THREADS`
//! (2 and 8 threads): an iteration runs the program once, at 1/100 of
//! run.sh's amount of work, with this build's libsmalloc.so preloaded, and
//! checks that it succeeded (the programs check their blocks' contents).
//! The library is looked for beside this executable and one directory up
//! (where bench/ab.sh and cargo put it); the programs are compiled with
//! `cc` on first use. Without the library or `cc`, there are no such
//! benchmarks.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use tango_bench::{Benchmark, benchmark_fn};

/// A program and its work, as bench/preload/run.sh runs it.
struct Program {
    name: &'static str,
    /// The total amount of work (`-n` over all threads and rounds).
    work: u64,
    /// Rounds (`-r`), if the program has them.
    rounds: Option<u64>,
    /// Whether `-n` is per thread (else the total).
    per_thread: bool,
}

const PROGRAMS: [Program; 5] = [
    Program {
        name: "larson",
        work: 12_000_000,
        rounds: Some(5),
        per_thread: true,
    },
    Program {
        name: "xmalloc-test",
        work: 4_000_000,
        rounds: None,
        per_thread: true,
    },
    Program {
        name: "cache-thrash",
        work: 1_000_000,
        rounds: None,
        per_thread: false,
    },
    Program {
        name: "cache-scratch",
        work: 1_000_000,
        rounds: None,
        per_thread: false,
    },
    Program {
        name: "mstress",
        work: 800_000,
        rounds: Some(10),
        per_thread: true,
    },
];

impl Program {
    /// The command line at `t` threads and 1/100 of run.sh's work.
    fn args(&self, t: u64) -> Vec<String> {
        let div = self.rounds.unwrap_or(1) * if self.per_thread { t } else { 1 };
        let mut a = vec![
            format!("-t{t}"),
            format!("-n{}", (self.work / 100 / div).max(1)),
        ];
        a.extend(self.rounds.map(|r| format!("-r{r}")));
        a
    }
}

/// This build's libsmalloc.so.
fn library() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [dir, dir.parent()?]
        .iter()
        .map(|d| d.join("libsmalloc.so"))
        .find(|p| p.is_file())
}

/// The directory of the compiled programs (compiled on the first call).
fn programs() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let src = devutils::workspace_dir().join("bench/preload");
        let out = std::env::temp_dir().join(format!("smalloc-tango-{}", std::process::id()));
        std::fs::create_dir_all(&out).expect("a directory for the preload programs");
        for Program { name: p, .. } in PROGRAMS {
            let ok = Command::new("cc")
                .args(["-O2", "-std=gnu11", "-pthread", "-o"])
                .arg(out.join(p))
                .arg(src.join(format!("{p}.c")))
                .status()
                .is_ok_and(|s| s.success());
            assert!(ok, "compiling bench/preload/{p}.c failed");
        }
        out
    })
}

/// Runs `exe` with `args` and `lib` preloaded; panics if it fails.
fn run(exe: &Path, args: &[String], lib: &Path) {
    let out = Command::new(exe)
        .args(args)
        .env("LD_PRELOAD", lib)
        .output()
        .expect("run a preload program");
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}",
        exe.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The benchmarks, one per (program, thread count).
pub fn all() -> Vec<Benchmark> {
    if !crate::global::IS_SMALLOC {
        return Vec::new();
    }
    let have_cc = Command::new("cc").arg("--version").output().is_ok();
    let Some(lib) = library().filter(|_| have_cc) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for p in &PROGRAMS {
        for t in [2, 8] {
            let (name, args, lib) = (p.name, p.args(t), lib.clone());
            v.push(benchmark_fn(format!("preload/{name}@{t}"), move |b| {
                let (exe, lib, args) = (programs().join(name), lib.clone(), args.clone());
                b.iter(move || run(&exe, &args, &lib))
            }));
        }
    }
    v
}
