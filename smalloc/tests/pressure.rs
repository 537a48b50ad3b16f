//! New memory against freed large slots: a thread that claims never-used
//! slots gives back about as many resident bytes of freed large slots first,
//! whatever the purge delay. Each test runs in its own process.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use devutils::{Rng, check, fill};
use smalloc::Smalloc;
use smalloc::stats;

#[global_allocator]
static A: Smalloc = Smalloc::new();

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// A block of `size` bytes filled with `tag`'s pattern.
fn alloc(size: usize, tag: u64) -> usize {
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(layout(size)) };
    assert!(!p.is_null(), "alloc({size}) failed");
    // SAFETY: `p` holds `size` bytes.
    unsafe { fill(p, size, tag) };
    p as usize
}

/// Checks `tag`'s pattern in the block and frees it.
fn free(p: usize, size: usize, tag: u64) {
    let p = p as *mut u8;
    // SAFETY: `p` is a live block of `size` bytes filled with `tag`.
    unsafe {
        check(p, size, tag)
            .unwrap_or_else(|at| panic!("block {p:p} of {size} B corrupted at {at}"));
        A.dealloc(p, layout(size));
    }
}

const BIG: usize = 3 << 20;
const BIGS: u64 = 8;
const SMALL: usize = 1000;

/// Frees `BIGS` filled blocks of `BIG` bytes (4 MiB slots), then allocates
/// about as many bytes of small blocks; returns (resident bytes of slots
/// after the big frees, after the small blocks, the small blocks).
fn big_then_small() -> (u64, u64, Vec<usize>) {
    let bigs: Vec<_> = (0..BIGS).map(|i| alloc(BIG, i)).collect();
    for (i, p) in bigs.into_iter().enumerate() {
        free(p, BIG, i as u64);
    }
    let before = stats::snapshot().resident_bytes;
    let n = BIGS as usize * BIG / SMALL;
    let smalls: Vec<_> = (0..n).map(|i| alloc(SMALL, 1000 + i as u64)).collect();
    (before, stats::snapshot().resident_bytes, smalls)
}

#[test]
fn new_small_memory_takes_the_place_of_freed_large_slots() {
    // A delay far longer than the test: only the claims give back.
    smalloc::set_purge_delay(Duration::from_secs(3600));
    let (before, after, smalls) = big_then_small();
    let bigs = BIGS * BIG as u64;
    assert!(before >= bigs, "the big blocks were not resident: {before}");
    // The small blocks' own bytes, and at most a quarter of the big ones
    // (their slots' first pages, and what the last claims left).
    assert!(
        after <= before + bigs / 4,
        "resident {after} after the small blocks, {before} before"
    );
    let s = stats::snapshot();
    assert!(s.purged_bytes >= bigs / 2, "{s:?}");
    for (i, p) in smalls.into_iter().enumerate() {
        free(p, SMALL, 1000 + i as u64);
    }
    // The slots given back work again: filled, checked; and read zero.
    let again: Vec<_> = (0..BIGS).map(|i| alloc(BIG, 50 + i)).collect();
    for (i, p) in again.into_iter().enumerate() {
        free(p, BIG, 50 + i as u64);
    }
    for _ in 0..BIGS {
        // SAFETY: a non-zero layout.
        let p = unsafe { A.alloc_zeroed(layout(BIG)) };
        assert!(!p.is_null());
        // SAFETY: `p` holds BIG bytes.
        let s = unsafe { std::slice::from_raw_parts(p, BIG) };
        assert!(s.iter().all(|&b| b == 0), "a reused slot not zeroed");
        // SAFETY: allocated above with this layout.
        unsafe { A.dealloc(p, layout(BIG)) };
    }
}

#[test]
fn a_delay_of_zero_gives_nothing_back_on_claims_either() {
    smalloc::set_purge_delay(Duration::ZERO);
    let (before, after, _smalls) = big_then_small();
    let s = stats::snapshot();
    assert_eq!(s.purged_bytes, 0, "{s:?}");
    assert!(after >= before + BIGS * BIG as u64 / 2, "{after} {before}");
}

#[test]
fn releases_on_claims_racing_allocations_and_frees_never_touch_a_live_block() {
    // Threads keep claiming new small memory (blocks they keep) while they
    // allocate, fill, check and free large blocks, some on other threads:
    // the claims give back freed large slots, taken off the lists they sit
    // on, while others pop and push them. A set of live addresses catches a
    // slot handed out twice, the patterns a page given back under a block.
    smalloc::set_purge_delay(Duration::from_secs(3600));
    let live = Arc::new(Mutex::new(HashSet::new()));
    let handoff = Arc::new(Mutex::new(Vec::<(usize, usize, u64)>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let (live, handoff, stop) = (live.clone(), handoff.clone(), stop.clone());
            thread::spawn(move || {
                let mut rng = Rng::new(300 + t);
                let (mut large, mut kept) = (Vec::new(), Vec::new());
                let mut tag = t << 40;
                let mut kept_bytes = 0;
                while !stop.load(Ordering::Relaxed) && kept_bytes < 96 << 20 {
                    tag += 1;
                    let size = rng.log_size(64 << 10, 4 << 20);
                    let p = alloc(size, tag);
                    assert!(live.lock().unwrap().insert(p), "{p:#x} handed out twice");
                    large.push((p, size, tag));
                    if large.len() > 6 {
                        let b = large.swap_remove(rng.below(large.len() as u64) as usize);
                        assert!(live.lock().unwrap().remove(&b.0));
                        if rng.chance(1, 3) {
                            handoff.lock().unwrap().push(b);
                        } else {
                            free(b.0, b.1, b.2);
                        }
                    }
                    for _ in 0..64 {
                        tag += 1;
                        let size = rng.log_size(16, 4096);
                        kept.push((alloc(size, tag), size, tag));
                        kept_bytes += size;
                    }
                    let theirs = std::mem::take(&mut *handoff.lock().unwrap());
                    for (p, size, tag) in theirs {
                        free(p, size, tag);
                    }
                }
                for (p, size, tag) in large {
                    assert!(live.lock().unwrap().remove(&p));
                    free(p, size, tag);
                }
                for (p, size, tag) in kept {
                    free(p, size, tag);
                }
            })
        })
        .collect();
    thread::sleep(Duration::from_secs(3));
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    for (p, size, tag) in std::mem::take(&mut *handoff.lock().unwrap()) {
        free(p, size, tag);
    }
    let s = stats::snapshot();
    assert!(s.purged_bytes > 0, "the race was not tested: {s:?}");
}
