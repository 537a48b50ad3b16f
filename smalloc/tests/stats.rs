//! Statistics (`smalloc::stats`): the snapshot is exact after known
//! sequences of operations (one thread, after threads join, and while a
//! trim sweeps the lists), the report
//! carries its numbers, a trim gives back the pages of freed slots without
//! harming anyone's blocks, and snapshots and trims taken while threads
//! allocate and free never crash, hang or hand a slot out twice.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use devutils::{Rng, check, check_sparse, fill, fill_sparse};
use smalloc::Smalloc;
use smalloc::stats::{self, Counts, Snapshot};

static A: Smalloc = Smalloc::new();

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// The size class of `layout(size)`, as an index of `Snapshot::classes`.
fn class(size: usize) -> usize {
    smalloc::layout::size_class(size, 8) as usize
}

/// A block of `size` bytes filled with `tag`'s pattern.
fn alloc(size: usize, tag: u64) -> *mut u8 {
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(layout(size)) };
    assert!(!p.is_null(), "alloc({size}) failed");
    // SAFETY: `p` holds `size` bytes.
    unsafe {
        if size <= 4 << 20 {
            fill(p, size, tag)
        } else {
            fill_sparse(p, size, tag)
        }
    };
    p
}

/// Checks `tag`'s pattern in the block and frees it.
fn free(p: *mut u8, size: usize, tag: u64) {
    // SAFETY: `p` is a live block of `size` bytes filled with `tag`.
    unsafe {
        let ok = if size <= 4 << 20 {
            check(p, size, tag)
        } else {
            check_sparse(p, size, tag)
        };
        ok.unwrap_or_else(|at| panic!("block {p:p} of {size} B corrupted at {at}"));
        A.dealloc(p, layout(size));
    }
}

const PAGE: u64 = 4096;

/// `allocs` and `frees` (none remote) with the `counters` feature, zero
/// without.
fn counted(allocs: u64, frees: u64, remote_allocs: u64, remote_frees: u64) -> Counts {
    if cfg!(feature = "counters") {
        Counts {
            allocs,
            frees,
            remote_allocs,
            remote_frees,
        }
    } else {
        Counts::ZERO
    }
}

#[test]
fn a_heap_that_never_allocated_is_empty() {
    let s = stats::snapshot();
    assert_eq!(s, Snapshot::EMPTY);
    assert_eq!(stats::trim(0), 0);
}

#[test]
fn exact_after_known_operations_on_one_thread() {
    no_purge();
    // (size, size class, count, how many to free): powers of two, and
    // classes between them (112 B, 20 KiB), and 1 MiB + 1 in a 2 MiB slot
    let plan = [
        (32, class(32), 1000, 400),
        (100, class(100), 300, 100),
        (8 << 10, class(8 << 10), 50, 20),
        (20_000, class(20_000), 10, 3),
        (64 << 10, class(64 << 10), 2, 1),
        (1 << 20, class(1 << 20), 4, 1),
        ((1 << 20) + 1, class((1 << 20) + 1), 2, 1),
    ];
    let slot = |sc: usize| smalloc::layout::slot_size(sc as u32) as u64;
    assert_eq!(
        plan.map(|(_, sc, _, _)| slot(sc)),
        [32, 112, 8192, 20 << 10, 64 << 10, 1 << 20, 2 << 20]
    );
    let mut blocks = Vec::new();
    for (size, _, n, _) in plan {
        for i in 0..n {
            blocks.push((alloc(size, i), size, i));
        }
    }
    let big = alloc(3 << 30, 7);
    for (size, _, _, k) in plan {
        let mut freed = 0;
        blocks.retain(|&(p, s, t)| {
            if s == size && freed < k {
                freed += 1;
                free(p, s, t);
                false
            } else {
                true
            }
        });
    }
    let s = stats::snapshot();
    assert_ne!(s.reservation_base, 0);
    for (size, sc, n, k) in plan {
        let c = s.classes[sc];
        assert_eq!(c.handed_out, n, "class {sc} ({size} B) handed out");
        assert_eq!(c.free(), k, "class {sc} freed");
        assert_eq!(c.live(), n - k, "class {sc} live");
        assert_eq!(c.counts, counted(n, k, 0, 0), "class {sc} counts");
    }
    assert_eq!(s.counters, cfg!(feature = "counters"));
    assert_eq!(s.used_classes().count(), plan.len());
    let live: u64 = plan.iter().map(|&(_, sc, n, k)| (n - k) * slot(sc)).sum();
    assert_eq!(s.live_bytes(), live);
    assert_eq!(s.live_slots(), plan.iter().map(|&(_, _, n, k)| n - k).sum());
    assert_eq!((s.big_count, s.big_bytes), (1, 3 << 30));
    // The pages past the first of the freed 8 KiB, 20 KiB, 64 KiB, 1 MiB
    // and 2 MiB slots (all whole pages), as far as they were written (the
    // last only up to its block's 1 MiB + 1 byte).
    let trimmable = 20 * (8192 - PAGE)
        + 3 * ((20 << 10) - PAGE)
        + ((64 << 10) - PAGE)
        + ((1 << 20) - PAGE)
        + ((1 << 20) + 1u64).next_multiple_of(PAGE)
        - PAGE;
    assert_eq!(s.trimmable_bytes, trimmable);
    // Every page of the blocks up to 64 KiB was written (the sparse fill
    // writes a word in every page up to there), and no page beyond the slots.
    let handed_out: u64 = plan.iter().map(|&(_, sc, n, _)| n * slot(sc)).sum();
    assert_eq!(s.handed_out_bytes(), handed_out);
    let written = (1000 * 32u64).next_multiple_of(PAGE) + 50 * 8192 + 2 * 65536;
    assert!(
        s.resident_bytes >= written,
        "{} < {written}",
        s.resident_bytes
    );
    assert!(s.resident_bytes <= handed_out.next_multiple_of(PAGE));
    assert_eq!(s.walks_cut, 0);
    let owned: Vec<_> = s.slabs.iter().filter(|l| l.owned).collect();
    assert_eq!(owned.len(), 1, "this thread owns its slab");
    assert_eq!(owned[0].handed_out_bytes, handed_out);
    assert_eq!(owned[0].threads, 1);

    free(big, 3 << 30, 7);
    for (p, size, tag) in blocks {
        free(p, size, tag);
    }
    let s = stats::snapshot();
    assert_eq!((s.big_count, s.big_bytes, s.live_slots()), (0, 0, 0));
    assert_eq!(s.free_bytes(), handed_out);
    let n: u64 = plan.iter().map(|&(_, _, n, _)| n).sum();
    assert_eq!(s.counts(), counted(n, n, 0, 0));
}

#[test]
fn exact_after_threads_join_with_cross_thread_frees() {
    no_purge();
    const THREADS: usize = 4;
    const EACH: u64 = 500;
    // Each thread allocates EACH 48-byte blocks, frees 100 itself and
    // hands 150 to the main thread, which frees them after the join.
    // All alive at once (a barrier), so each has a slab of its own.
    let barrier = Arc::new(std::sync::Barrier::new(THREADS));
    let handles: Vec<_> = (0..THREADS)
        .map(|_| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut mine: Vec<_> = (0..EACH).map(|i| (alloc(48, i) as usize, i)).collect();
                for (p, tag) in mine.drain(..100) {
                    free(p as *mut u8, 48, tag);
                }
                barrier.wait();
                // The remaining 250 stay live (leaked on purpose).
                mine.split_off(mine.len() - 150)
            })
        })
        .collect();
    let handed: Vec<Vec<(usize, u64)>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let before = stats::snapshot();
    let c = before.classes[class(48)];
    assert_eq!(c.handed_out, THREADS as u64 * EACH);
    assert_eq!(c.free(), THREADS as u64 * 100);
    for (p, tag) in handed.into_iter().flatten() {
        free(p as *mut u8, 48, tag);
    }
    let s = stats::snapshot();
    let c = s.classes[class(48)];
    assert_eq!(c.handed_out, THREADS as u64 * EACH);
    assert_eq!(c.free(), THREADS as u64 * 250);
    assert_eq!(c.live(), THREADS as u64 * 250);
    // The main thread owns no slab of theirs: its frees went to the shared
    // lists.
    assert!(c.free_shared >= THREADS as u64 * 150, "{c:?}");
    assert!(c.shared_frees >= THREADS as u64 * 150, "{c:?}");
    assert_eq!(s.walks_cut, 0);
    // Each thread allocated and freed on the slab it owned; the main thread
    // owns none: its frees are remote.
    let (all, remote) = (THREADS as u64 * EACH, THREADS as u64 * 150);
    assert_eq!(c.counts, counted(all, THREADS as u64 * 250, 0, remote));
    let theirs = counted(EACH, 250, 0, 150);
    let slabs = s.slabs.iter().filter(|l| l.counts != Counts::ZERO);
    assert!(slabs.clone().all(|l| l.counts == theirs), "{:?}", s.slabs);
    assert_eq!(slabs.count(), if s.counters { THREADS } else { 0 });
}

#[test]
fn a_snapshot_is_exact_while_a_trim_sweeps_the_lists() {
    no_purge();
    const SIZES: [usize; 3] = [64 << 10, 128 << 10, 320 << 10];
    const EACH: usize = 32;
    let blocks: Vec<(usize, usize, u64)> = (0..2 * EACH as u64)
        .flat_map(|i| SIZES.map(|size| (alloc(size, i) as usize, size, i)))
        .collect();
    let (kept, freed): (Vec<_>, Vec<_>) = blocks.into_iter().partition(|b| b.2 % 2 == 0);
    // Freed by a thread that does not own their slab: onto the shared
    // lists, which a trim takes whole and puts back.
    thread::spawn(move || {
        for (p, size, tag) in freed {
            free(p as *mut u8, size, tag);
        }
    })
    .join()
    .unwrap();
    let (stop, ready): (Arc<AtomicBool>, Arc<AtomicBool>) = Default::default();
    let trimmer = {
        let (stop, ready) = (stop.clone(), ready.clone());
        thread::spawn(move || {
            ready.store(true, Ordering::Release);
            let mut trims = 0u64;
            while !stop.load(Ordering::Relaxed) {
                stats::trim(0);
                trims += 1;
            }
            trims
        })
    };
    while !ready.load(Ordering::Acquire) {
        thread::yield_now();
    }
    // From here on no thread allocates or frees: every snapshot is exact.
    let live = stats::snapshot().live_slots();
    let start = Instant::now();
    let mut snaps = 0;
    while start.elapsed() < Duration::from_secs(1) || snaps < 100 {
        let s = stats::snapshot();
        assert_eq!(s.live_slots(), live, "snapshot {snaps}");
        for size in SIZES {
            assert_eq!(
                s.classes[class(size)].free(),
                EACH as u64,
                "{size} B, snapshot {snaps}"
            );
        }
        snaps += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let trims = trimmer.join().unwrap();
    eprintln!("{snaps} snapshots during {trims} trims");
    assert!(trims > 10, "{trims} trims");
    for (p, size, tag) in kept {
        free(p as *mut u8, size, tag);
    }
}

#[test]
fn the_report_carries_the_snapshots_numbers() {
    no_purge();
    let blocks: Vec<_> = (0..300).map(|i| alloc(100, i)).collect();
    for (i, &p) in blocks.iter().enumerate().take(100) {
        free(p, 100, i as u64);
    }
    let s = stats::snapshot();
    let mut text = String::new();
    stats::report(&mut text, &s).unwrap();
    let number = |what: &str| -> u64 {
        let line = text
            .lines()
            .find(|l| l.starts_with("MALLOC:") && l.ends_with(what))
            .unwrap_or_else(|| panic!("no line {what:?} in\n{text}"));
        line["MALLOC:".len()..]
            .split_whitespace()
            .find_map(|w| w.parse().ok())
            .unwrap()
    };
    assert_eq!(
        number("Bytes in use by the application (whole slots)"),
        200 * 112
    );
    assert_eq!(number("Bytes in freed slots on smalloc's lists"), 100 * 112);
    assert_eq!(number("Bytes of slots ever handed out"), 300 * 112);
    assert_eq!(number("Slots in use"), 200);
    assert_eq!(number("Freed slots on lists"), 100);
    // 100-byte blocks live in 112-byte slots.
    let sc = class(100).to_string();
    let row = text
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&sc))
        .unwrap_or_else(|| panic!("no row for class {sc} in\n{text}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cells[..5], [&sc, "112", "B", "300", "200"], "{row}");
    // The counters' part, only when they are compiled in.
    assert_eq!(text.contains("Event first-alloc"), s.counters, "{text}");
    if s.counters {
        assert_eq!(number("Allocations"), 300);
        assert_eq!(number("Frees"), 100);
        assert_eq!(number("slot's slab (remote)"), 0);
        let rows: Vec<_> = text
            .lines()
            .filter(|l| l.split_whitespace().next() == Some(&sc))
            .collect();
        let cells: Vec<&str> = rows[1].split_whitespace().collect();
        assert_eq!(cells, [&sc, "112", "B", "300", "100", "0", "0"], "{text}");
    }
}

#[test]
fn trim_gives_back_freed_pages_and_the_slots_stay_usable() {
    no_purge();
    const N: usize = 64;
    const SIZE: usize = 256 << 10;
    // Half freed by this thread (its private list), half by another
    // thread (the shared list); one more stays live, so the region is not
    // reset (tests/purge.rs has that) but its free slots trimmed.
    let blocks: Vec<_> = (0..N).map(|i| alloc(SIZE, i as u64) as usize).collect();
    let live = alloc(SIZE, 7777);
    let (mine, theirs) = blocks.split_at(N / 2);
    for (i, &p) in mine.iter().enumerate() {
        free(p as *mut u8, SIZE, i as u64);
    }
    let theirs = theirs.to_vec();
    thread::spawn(move || {
        for (i, p) in theirs.into_iter().enumerate() {
            free(p as *mut u8, SIZE, (N / 2 + i) as u64);
        }
    })
    .join()
    .unwrap();
    let before = stats::snapshot();
    assert_eq!(before.trimmable_bytes, N as u64 * (SIZE as u64 - PAGE));
    assert_eq!(
        stats::trim(usize::MAX),
        0,
        "a pad above everything keeps all"
    );
    let released = stats::trim(0);
    assert!(
        released as u64 >= N as u64 * (SIZE as u64 - PAGE) * 9 / 10,
        "{released}"
    );
    let after = stats::snapshot();
    assert_eq!(after.trimmable_bytes, 0, "nothing left to trim");
    assert!(after.resident_bytes + released as u64 <= before.resident_bytes + PAGE * 4);
    // The lists are intact (the trim's own pushes back count as shared
    // frees): the same slots come back, usable and distinct.
    let (b, a) = (before.classes[class(SIZE)], after.classes[class(SIZE)]);
    assert_eq!((a.handed_out, a.free()), (b.handed_out, b.free()));
    let again: HashSet<usize> = (0..N)
        .map(|i| alloc(SIZE, 1000 + i as u64) as usize)
        .collect();
    assert_eq!(again, blocks.iter().copied().collect());
    // A zeroed allocation of a trimmed slot reads zero.
    for p in again {
        free_any(p);
    }
    // SAFETY: a non-zero layout.
    let z = unsafe { A.alloc_zeroed(layout(SIZE)) };
    // SAFETY: `z` holds SIZE bytes.
    let zeroed = unsafe { std::slice::from_raw_parts(z, SIZE) };
    assert!(zeroed.iter().all(|&b| b == 0));
    free(live, SIZE, 7777);
}

/// Turns the purge off: exact figures must not change under a sweep of
/// the background thread (tests/purge.rs tests it).
fn no_purge() {
    smalloc::set_purge_delay(Duration::ZERO);
}

/// Frees a block of the trim test without checking its pattern (the tags
/// were given in an order the set does not keep).
fn free_any(p: usize) {
    // SAFETY: a live block of that test's size.
    unsafe { A.dealloc(p as *mut u8, layout(256 << 10)) }
}

#[test]
fn snapshots_and_trims_while_threads_allocate_and_free() {
    let secs = std::env::var("SMALLOC_STATS_STRESS_SECS").map_or(2, |s| s.parse().unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let live: Arc<Mutex<HashSet<usize>>> = Arc::default();
    // A ring of blocks passed between threads, for cross-thread frees.
    let pass: Arc<Mutex<Vec<(usize, usize, u64)>>> = Arc::default();
    // Operations so far, so that a slow machine (an emulator) runs on until
    // there were enough of them.
    let done: Arc<AtomicU64> = Arc::default();
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let (stop, live, pass) = (stop.clone(), live.clone(), pass.clone());
            let done = done.clone();
            thread::spawn(move || {
                let mut rng = Rng::new(t + 1);
                let mut mine: Vec<(usize, usize, u64)> = Vec::new();
                let (mut ops, mut allocs) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    ops += 1;
                    done.fetch_add(1, Ordering::Relaxed);
                    if mine.len() < 200 && rng.below(2) == 0 {
                        let size = rng.log_size(8, 1 << 20);
                        let p = alloc(size, ops) as usize;
                        allocs += 1;
                        assert!(live.lock().unwrap().insert(p), "{p:#x} handed out twice");
                        mine.push((p, size, ops));
                    } else if let Some(b) = mine.pop() {
                        if rng.below(4) == 0 {
                            pass.lock().unwrap().push(b);
                        } else {
                            release(&live, b);
                        }
                    }
                    if rng.below(8) == 0 {
                        let theirs = pass.lock().unwrap().pop();
                        if let Some(b) = theirs {
                            release(&live, b);
                        }
                    }
                }
                for b in mine {
                    release(&live, b);
                }
                (ops, allocs)
            })
        })
        .collect();
    let start = Instant::now();
    let (end, cap) = (Duration::from_secs(secs), Duration::from_secs(120));
    let mut snaps = 0;
    while start.elapsed() < end
        || (snaps <= 10 || done.load(Ordering::Relaxed) <= 1000) && start.elapsed() < cap
    {
        let s = stats::snapshot();
        assert!(s.live_slots() <= s.used_classes().map(|(_, c)| c.handed_out).sum());
        let mut text = String::new();
        stats::report(&mut text, &s).unwrap();
        if snaps % 4 == 0 {
            stats::trim(0);
        }
        snaps += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let (ops, allocs) = workers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold((0, 0), |(o, a), (x, y)| (o + x, a + y));
    for b in std::mem::take(&mut *pass.lock().unwrap()) {
        release(&live, b);
    }
    let s = stats::snapshot();
    assert_eq!(s.live_slots(), 0, "every block was freed: {s:?}");
    // The trims' own pops and pushes are not counted.
    let (n, want) = (s.counts(), counted(allocs, allocs, 0, 0));
    assert_eq!((n.allocs, n.frees), (want.allocs, want.frees));
    for (sc, c) in s.used_classes() {
        assert_eq!(c.counts.allocs, c.counts.frees, "class {sc}");
    }
    eprintln!(
        "{snaps} snapshots during {ops} operations; walks cut: {}",
        s.walks_cut
    );
    assert!(snaps > 10 && ops > 1000);
}

fn release(live: &Mutex<HashSet<usize>>, (p, size, tag): (usize, usize, u64)) {
    assert!(live.lock().unwrap().remove(&p));
    free(p as *mut u8, size, tag);
}

#[test]
fn a_snapshot_of_a_million_live_blocks() {
    let blocks: Vec<_> = (0..1_000_000).map(|i| alloc(24, i) as usize).collect();
    for (i, &p) in blocks.iter().enumerate().step_by(2) {
        free(p as *mut u8, 24, i as u64);
    }
    let start = Instant::now();
    let s = stats::snapshot();
    let took = start.elapsed();
    assert_eq!(s.classes[class(24)].live(), 500_000);
    assert_eq!(s.classes[class(24)].free(), 500_000);
    eprintln!("snapshot of 500000 live and 500000 freed 32-byte slots: {took:?}");
}
