//! The valgrind build (the `valgrind` feature) under memcheck: a leak, a use
//! after free, reads of uninitialised bytes (fresh, and past a block grown
//! in place), a read past a block's end, a double free and a free of an
//! interior pointer are each reported as memcheck reports them with glibc;
//! a clean run (many size classes, big blocks, threads freeing each other's
//! blocks) has no error and no leak. Each scenario runs this test binary
//! again under valgrind, for one `scenario_*` test, with
//! `SMALLOC_VALGRIND_CHILD` set (without it a scenario does nothing).
//! Skipped, with a line saying so, where valgrind is not installed.
#![cfg(feature = "valgrind")]

use std::alloc::{GlobalAlloc, Layout};
use std::hint::black_box;
use std::process::Command;
use std::ptr;

use devutils::have_valgrind;
use smalloc::Smalloc;

#[global_allocator]
static A: Smalloc = Smalloc::new();

/// Whether this process is a scenario's child.
fn in_child() -> bool {
    std::env::var_os("SMALLOC_VALGRIND_CHILD").is_some()
}

/// memcheck's report of scenario `name` (its stderr, then the scenario's
/// stdout), or `None` without
/// valgrind.
fn memcheck(name: &str) -> Option<String> {
    if !have_valgrind() {
        return None;
    }
    let out = Command::new("valgrind")
        .args([
            "--leak-check=full",
            "--show-leak-kinds=definite",
            "--errors-for-leak-kinds=definite",
            // smalloc's blocks have no redzones between them: memcheck then
            // names the block an address is in, not a neighbour's redzone.
            "--redzone-size=0",
        ])
        .arg(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("SMALLOC_VALGRIND_CHILD", "1")
        .output()
        .unwrap();
    let report =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{name}: {:?}\n{report}", out.status);
    assert!(report.contains("Memcheck"), "{report}");
    Some(report)
}

/// The number of errors in memcheck's summary.
fn errors(report: &str) -> usize {
    let line = report
        .lines()
        .find(|l| l.contains("ERROR SUMMARY:"))
        .expect("an error summary");
    let n = line.split("ERROR SUMMARY:").nth(1).unwrap();
    n.split_whitespace().next().unwrap().parse().unwrap()
}

/// Asserts that the report holds each of `want`, in order.
fn reports(report: &str, want: &[&str]) {
    let mut rest = report;
    for w in want {
        let at = rest
            .find(w)
            .unwrap_or_else(|| panic!("no {w:?} in memcheck's report:\n{report}"));
        rest = &rest[at + w.len()..];
    }
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// A block of `size` bytes filled with `byte`.
fn block(size: usize, byte: u8) -> *mut u8 {
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(layout(size)) };
    assert!(!p.is_null());
    // SAFETY: `p` holds `size` bytes.
    unsafe { ptr::write_bytes(p, byte, size) };
    p
}

/// Reads the byte at `p` as a buggy program would (a volatile read, so the
/// compiler keeps it).
fn peek(p: *const u8) -> u8 {
    // SAFETY: not always (that is the point): memcheck reports it.
    unsafe { ptr::read_volatile(p) }
}

#[test]
fn a_clean_program_runs_clean() {
    let Some(r) = memcheck("scenario_clean") else {
        return;
    };
    assert_eq!(errors(&r), 0, "{r}");
    assert!(r.contains("definitely lost: 0 bytes in 0 blocks"), "{r}");
    assert!(r.contains("clean run done"), "{r}");
}

#[test]
fn scenario_clean() {
    if !in_child() {
        return;
    }
    // Every size class, written, grown and shrunk, read back.
    let mut v: Vec<Vec<u8>> = (0..26).map(|k| vec![k as u8; 1 << k]).collect();
    for (k, b) in v.iter_mut().enumerate() {
        b.extend_from_slice(&[1, 2, 3]);
        b.truncate((1 << k) / 2 + 1);
        b.shrink_to_fit();
        assert_eq!(b[0], k as u8);
    }
    // Zeroed blocks, fresh and reused.
    for _ in 0..3 {
        let z = vec![0u64; 5000];
        assert!(z.iter().all(|&x| x == 0));
    }
    // A big block (past the valgrind build's 8 MiB slots), grown by mremap.
    let mut big = vec![5u8; 40 << 20];
    big.resize(80 << 20, 6);
    assert_eq!(big[(40 << 20) - 1], 5);
    assert_eq!(big[(80 << 20) - 1], 6);
    drop(big);
    // Threads freeing each other's blocks (the shared lists, the quarantine
    // handing other slabs' slots back).
    let (tx, rx) = std::sync::mpsc::channel::<Vec<String>>();
    let producers: Vec<_> = (0..3)
        .map(|t| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for i in 0..200 {
                    tx.send((0..20).map(|j| format!("{t}-{i}-{j}")).collect())
                        .unwrap();
                }
            })
        })
        .collect();
    drop(tx);
    let n: usize = rx.iter().map(|batch| batch.len()).sum();
    for p in producers {
        p.join().unwrap();
    }
    assert_eq!(n, 3 * 200 * 20);
    drop(v);
    println!("clean run done");
}

#[test]
fn a_leak_is_reported() {
    let Some(r) = memcheck("scenario_leak") else {
        return;
    };
    reports(
        &r,
        &[
            "1,234 bytes in 1 blocks are definitely lost",
            "leak_one_block",
            "definitely lost: 1,234 bytes in 1 blocks",
        ],
    );
}

#[inline(never)]
fn leak_one_block() {
    black_box(block(1234, 7));
}

#[test]
fn scenario_leak() {
    if in_child() {
        leak_one_block();
    }
}

#[test]
fn a_use_after_free_is_reported() {
    let Some(r) = memcheck("scenario_use_after_free") else {
        return;
    };
    reports(
        &r,
        &[
            "Invalid read of size 1",
            "Address 0x",
            " is 8 bytes inside a block of size 48 free'd",
            "Block was alloc'd at",
            "Invalid write of size 1",
            "16 bytes inside a block of size 48 free'd",
        ],
    );
    assert_eq!(errors(&r), 2, "{r}");
}

#[test]
fn scenario_use_after_free() {
    if !in_child() {
        return;
    }
    let p = block(48, 1);
    // SAFETY: `p` is live with this layout.
    unsafe { A.dealloc(p, layout(48)) };
    // The next block of that size is another slot: the quarantine.
    let q = block(48, 2);
    assert_ne!(p, q);
    black_box(peek(p.wrapping_add(8)));
    // SAFETY: not (that is the point).
    unsafe { ptr::write_volatile(p.wrapping_add(16), 3) };
    // SAFETY: `q` is live with this layout.
    unsafe { A.dealloc(q, layout(48)) };
}

#[test]
fn uninitialised_reads_are_reported() {
    let Some(r) = memcheck("scenario_uninit") else {
        return;
    };
    reports(
        &r,
        &[
            "Conditional jump or move depends on uninitialised value(s)",
            "scenario_uninit",
            "Conditional jump or move depends on uninitialised value(s)",
            "scenario_uninit",
        ],
    );
    assert_eq!(errors(&r), 2, "{r}");
}

#[test]
fn scenario_uninit() {
    if !in_child() {
        return;
    }
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(layout(64)) };
    if black_box(peek(p.wrapping_add(10))) == 42 {
        println!("42");
    }
    // Grown in place (its slot is 32 bytes): bytes 20..30 are new.
    let q = block(20, 1);
    // SAFETY: `q` is live with this layout.
    let q2 = unsafe { A.realloc(q, layout(20), 30) };
    assert_eq!(q2, q, "grows in its slot");
    if black_box(peek(q2.wrapping_add(25))) == 1 {
        println!("1");
    }
    // Written bytes are defined: no error.
    if black_box(peek(q2.wrapping_add(5))) == 2 {
        println!("2");
    }
    // SAFETY: both live with these layouts.
    unsafe {
        A.dealloc(p, layout(64));
        A.dealloc(q2, layout(30));
    }
}

#[test]
fn a_read_past_a_block_is_reported() {
    let Some(r) = memcheck("scenario_overflow") else {
        return;
    };
    reports(
        &r,
        &[
            "Invalid read of size 1",
            "0 bytes after a block of size 20 alloc'd",
        ],
    );
    assert_eq!(errors(&r), 1, "{r}");
}

#[test]
fn scenario_overflow() {
    if !in_child() {
        return;
    }
    let p = block(20, 1);
    // Inside its 32-byte slot, past the block.
    black_box(peek(p.wrapping_add(20)));
    // SAFETY: live with this layout.
    unsafe { A.dealloc(p, layout(20)) };
}

#[test]
fn bad_frees_are_reported_and_ignored() {
    let Some(r) = memcheck("scenario_bad_free") else {
        return;
    };
    reports(
        &r,
        &[
            "Invalid free() / delete / delete[] / realloc()",
            "inside a block of size 32 free'd",
            "Invalid free() / delete / delete[] / realloc()",
            "8 bytes inside a block of size 100 alloc'd",
        ],
    );
    assert_eq!(errors(&r), 2, "{r}");
    assert!(r.contains("heap still sound"), "{r}");
}

#[test]
fn scenario_bad_free() {
    if !in_child() {
        return;
    }
    let p = block(32, 1);
    // SAFETY: not the second time (that is the point).
    unsafe {
        A.dealloc(p, layout(32));
        A.dealloc(p, layout(32));
    }
    let q = block(100, 1);
    // SAFETY: not (an interior pointer), then the real one.
    unsafe {
        A.dealloc(q.wrapping_add(8), layout(100));
        A.dealloc(q, layout(100));
    }
    // Neither bad free put a slot on a list twice.
    let blocks: Vec<*mut u8> = (0..3000).map(|_| block(32, 9)).collect();
    let mut sorted = blocks.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), blocks.len(), "a slot handed out twice");
    for b in blocks {
        // SAFETY: live with this layout.
        unsafe { A.dealloc(b, layout(32)) };
    }
    println!("heap still sound");
}
