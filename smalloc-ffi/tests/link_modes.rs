//! The other ways to use the library: linked statically with the header,
//! and loaded with `dlopen`; and the properties that make both (and
//! `LD_PRELOAD`) safe: initial-exec TLS only, and nothing from `std`
//! (allocation, formatting, panics, `__tls_get_addr`) reachable from any
//! allocation entry point.

mod common;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::process::Command;

use common::*;
use devutils::workspace_dir;

#[test]
fn static_link_with_the_header() {
    let dir = scratch_dir("static_link");
    let include = workspace_dir().join("smalloc-ffi/include");
    let lib = lib_a();
    let exe = compile(
        &dir,
        "static_link.c",
        &[
            "-I",
            include.to_str().unwrap(),
            lib.to_str().unwrap(),
            // What `rustc --print native-static-libs` asks for.
            "-lm",
            "-lrt",
            "-lutil",
            "-lgcc_s",
        ],
    );
    let out = run_ok(&mut target_command(&exe));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "static ok\n");
}

#[test]
fn dlopen_with_threads_created_before() {
    let dir = scratch_dir("dlopen");
    let exe = compile(&dir, "dlopen.c", &[]);
    let out = run_ok(target_command(&exe).arg(lib_so()));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "dlopen ok\n");
}

/// Runs the binutils program `name` on the library: the target's
/// (`SMALLOC_TEST_TOOL_PREFIX`, e.g. `aarch64-linux-gnu-`, when the tests
/// run under an emulator).
fn tool(name: &str, args: &[&str]) -> String {
    let prefix = std::env::var("SMALLOC_TEST_TOOL_PREFIX").unwrap_or_default();
    let out = run_ok(
        Command::new(format!("{prefix}{name}"))
            .args(args)
            .arg(lib_so()),
    );
    String::from_utf8(out.stdout).expect("utf-8")
}

#[test]
fn tls_is_initial_exec() {
    // x86-64's linker marks a library with initial-exec accesses
    // STATIC_TLS; aarch64's does not (the loader places its TLS block in the
    // static surplus when it applies the relocation).
    if cfg!(target_arch = "x86_64") {
        let dynamic = tool("readelf", &["-d", "-W"]);
        let flags = dynamic
            .lines()
            .find(|l| l.contains("(FLAGS)"))
            .expect("a FLAGS entry");
        assert!(flags.contains("STATIC_TLS"), "{flags}");
    }
    let relocs = tool("readelf", &["-r", "-W"]);
    // The initial-exec access to the core's thread slab word. (std's own
    // thread-locals use the general-dynamic model, but none of them is
    // reachable from an entry point: see the next test.)
    let initial_exec = if cfg!(target_arch = "aarch64") {
        "R_AARCH64_TLS_TPREL"
    } else {
        "R_X86_64_TPOFF64"
    };
    assert!(
        relocs.contains(initial_exec),
        "no initial-exec TLS relocation"
    );
}

#[test]
fn the_release_library_needs_only_the_c_library() {
    // Without std (the release build has its own panic handler) nothing
    // loads libgcc_s or std's backtrace code: about 0.3 MiB less resident
    // in every program that preloads the library (docs/memory.md).
    let dynamic = tool("readelf", &["-d", "-W"]);
    let needed: Vec<&str> = dynamic.lines().filter(|l| l.contains("(NEEDED)")).collect();
    assert!(
        needed
            .iter()
            .all(|l| l.contains("[libc.so.6]") || l.contains("[ld-linux")),
        "{needed:#?}"
    );
    let symbols = tool("nm", &["-C"]);
    for std_part in ["gimli", "addr2line", "backtrace", "_Unwind_"] {
        assert!(!symbols.contains(std_part), "{std_part} is linked in");
    }
}

/// The statistics calls: they format text (with `core::fmt`, as glibc's
/// use stdio) and are not allocation entry points.
const STATISTICS: [&str; 9] = [
    "malloc_stats",
    "mallinfo",
    "mallinfo2",
    "malloc_trim",
    "malloc_info",
    "smalloc_malloc_stats",
    "smalloc_mallinfo2",
    "smalloc_malloc_trim",
    "smalloc_malloc_info",
];

/// Names of every function reachable through direct calls and jumps from
/// the library's exported allocation functions.
fn reachable_from_entry_points() -> BTreeSet<String> {
    let exported = tool("nm", &["-D", "--defined-only"]);
    let roots: Vec<u64> = exported
        .lines()
        .filter_map(|l| {
            let mut f = l.split_whitespace();
            let addr = u64::from_str_radix(f.next()?, 16).ok()?;
            let exported_fn = f.next()? == "T" && !STATISTICS.contains(&f.next()?);
            exported_fn.then_some(addr)
        })
        .collect();
    assert!(roots.len() >= 50, "exported functions: {}", roots.len());

    // Function start address -> (name, direct branch targets).
    let disasm = tool("objdump", &["-d", "--no-show-raw-insn"]);
    let mut funcs: BTreeMap<u64, (String, Vec<u64>)> = BTreeMap::new();
    let mut current = None;
    for line in disasm.lines() {
        if let Some(rest) = line.strip_suffix(">:") {
            if let Some((addr, name)) = rest.split_once(" <")
                && let Ok(a) = u64::from_str_radix(addr.trim(), 16)
            {
                funcs.insert(a, (name.to_string(), Vec::new()));
                current = Some(a);
            }
            continue;
        }
        let Some(cur) = current else { continue };
        let Some((_, insn)) = line.split_once(":\t") else {
            continue;
        };
        let op = insn.split_whitespace().next().unwrap_or("");
        // The target of a direct branch is the address objdump writes
        // before the `<symbol>` it names.
        let target = insn
            .split_once(" <")
            .and_then(|(before, _)| before.rsplit([' ', ',', '\t']).next())
            .and_then(|t| u64::from_str_radix(t, 16).ok());
        if is_direct_branch(op)
            && let Some(target) = target
        {
            funcs.get_mut(&cur).unwrap().1.push(target);
        }
    }
    let containing = |addr: u64| funcs.range(..=addr).next_back().map(|(a, _)| *a);
    let mut seen = BTreeSet::new();
    let mut names = BTreeSet::new();
    let mut queue: VecDeque<u64> = roots.iter().filter_map(|&r| containing(r)).collect();
    while let Some(f) = queue.pop_front() {
        if !seen.insert(f) {
            continue;
        }
        let (name, targets) = &funcs[&f];
        names.insert(name.clone());
        for &t in targets {
            if let Some(g) = containing(t) {
                queue.push_back(g);
            }
        }
    }
    names
}

/// Whether `op` is a direct jump or call (conditional or not).
fn is_direct_branch(op: &str) -> bool {
    if cfg!(target_arch = "aarch64") {
        matches!(op, "b" | "bl" | "cbz" | "cbnz" | "tbz" | "tbnz") || op.starts_with("b.")
    } else {
        op.starts_with('j') || op.starts_with("call")
    }
}

#[test]
fn no_std_tls_or_panic_reachable_from_entry_points() {
    let names = reachable_from_entry_points();
    // Sanity: the walk does follow calls into the core.
    assert!(
        names.iter().any(|n| n.contains("cold_path8failover")),
        "walk too shallow: {names:?}"
    );
    let forbidden = [
        "__tls_get_addr",
        "panic",
        "3fmt",
        "__rust_alloc",
        "__rdl_alloc",
        "_Unwind",
        "4core6result13unwrap_failed",
    ];
    let bad: Vec<&String> = names
        .iter()
        .filter(|n| forbidden.iter().any(|f| n.contains(f)))
        .collect();
    assert!(bad.is_empty(), "reachable from an entry point: {bad:?}");
}

/// The instructions of `symbol`'s fall-through path, from its entry to its
/// first `ret`, branches assumed not taken (the hot path: every branch off it
/// goes to a cold path).
fn hot_path(symbol: &str) -> Vec<String> {
    let exported = tool("nm", &["-D", "--defined-only"]);
    let addr = exported
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() == 3 && f[2] == symbol).then(|| u64::from_str_radix(f[0], 16).unwrap())
        })
        .unwrap_or_else(|| panic!("{symbol} not exported"));
    let start = format!("--start-address={addr:#x}");
    let stop = format!("--stop-address={:#x}", addr + 256);
    let disasm = tool("objdump", &["-d", "--no-show-raw-insn", &start, &stop]);
    let mut insns = Vec::new();
    for line in disasm.lines() {
        let Some((_, insn)) = line.split_once(":\t") else {
            continue;
        };
        let insn = insn.trim().to_string();
        // Up to the first return: the straight path, with any tail call of
        // a rarer case that it jumps over (malloc's larger requests).
        let done = insn == "ret";
        insns.push(insn);
        if done {
            break;
        }
    }
    insns
}

#[test]
fn hot_paths_are_short_and_have_no_atomic_read_modify_write() {
    // A thread's own small slot: malloc pops its private list, free pushes
    // onto it, with plain loads and stores (docs/hot-path.md shows them).
    for symbol in ["malloc", "free"] {
        let path = hot_path(symbol);
        assert_eq!(
            path.last().map(String::as_str),
            Some("ret"),
            "{symbol}: {path:#?}"
        );
        // aarch64 takes more instructions for the same work: addresses
        // are built from two (adrp and add), the thread pointer read apart.
        // malloc's path up to its `ret`, the prefetch of the next slot
        // included, takes all of it.
        let most = if cfg!(target_arch = "aarch64") {
            25
        } else {
            19
        };
        assert!(
            path.len() <= most,
            "{symbol}: {} instructions: {path:#?}",
            path.len()
        );
        // Atomic read-modify-writes and calls: x86-64's `lock` prefix and
        // `xchg`; aarch64's exclusive pairs, LSE atomics and `bl`/`blr`.
        let forbidden: &[&str] = if cfg!(target_arch = "aarch64") {
            &[
                "ldxr", "ldaxr", "stxr", "stlxr", "cas", "ldadd", "ldset", "ldclr", "swp", "bl",
            ]
        } else {
            &["lock", "xchg", "call"]
        };
        for insn in &path {
            let op = insn.split_whitespace().next().unwrap_or("");
            assert!(
                !forbidden.iter().any(|f| op.starts_with(f)),
                "{symbol}: {insn} on the hot path: {path:#?}"
            );
        }
    }
}
