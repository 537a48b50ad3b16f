//! The purge: freed memory given back to the kernel without a call from the
//! program, after the purge delay (and on claims of new memory: `pressure`).
//! Each test runs in its own process.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use devutils::{Rng, check, fill, is_zero};
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

/// Threads build a peak of mixed blocks (64 B to 256 KiB) and free them
/// all, then end; returns the resident bytes of the slots at the peak.
fn peak_then_free(threads: u64, peak: usize) -> u64 {
    let at_peak = Arc::new(Mutex::new(0));
    let barrier = Arc::new(std::sync::Barrier::new(threads as usize + 1));
    let workers: Vec<_> = (0..threads)
        .map(|t| {
            let barrier = barrier.clone();
            thread::spawn(move || {
                let mut rng = Rng::new(t + 1);
                let (mut held, mut blocks) = (0, Vec::new());
                while held < peak / threads as usize {
                    let size = rng.log_size(64, 256 << 10);
                    blocks.push((alloc(size, held as u64), size, held as u64));
                    held += size;
                }
                barrier.wait(); // at the peak
                barrier.wait(); // measured
                for (p, size, tag) in blocks {
                    free(p, size, tag);
                }
            })
        })
        .collect();
    barrier.wait();
    *at_peak.lock().unwrap() = stats::snapshot().resident_bytes;
    // Workers that live past the purging thread's bound on thread churn
    // (50 ms from the last thread's start to an end), as a pool's do.
    thread::sleep(Duration::from_millis(60));
    barrier.wait();
    for w in workers {
        w.join().unwrap();
    }
    *at_peak.lock().unwrap()
}

/// Waits up to `limit` for the slots' resident bytes to fall to `target`;
/// returns the last figure.
fn resident_falls_to(target: u64, limit: Duration) -> u64 {
    let start = Instant::now();
    loop {
        let now = stats::snapshot().resident_bytes;
        if now <= target || start.elapsed() > limit {
            return now;
        }
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_peak_freed_on_threads_that_end_is_given_back() {
    let peak = peak_then_free(4, 128 << 20);
    assert!(peak >= 100 << 20, "{peak}");
    // A thread's end brings a sweep of its slab forward (10 ms). Generous:
    // within 2 s, below 10%.
    let after = resident_falls_to(peak / 10, Duration::from_secs(2));
    let mut text = String::new();
    if after > peak / 10 {
        stats::report(&mut text, &stats::snapshot()).unwrap();
    }
    assert!(
        after <= peak / 10,
        "resident {after} of a peak of {peak}\n{text}"
    );
    let s = stats::snapshot();
    assert!(s.purge_resets > 0 && s.purged_bytes >= peak / 2, "{s:?}");
}

#[test]
fn what_threads_freed_goes_back_soon_after_they_end() {
    goes_back_soon_after_threads_end(false);
}

#[test]
fn what_threads_freed_goes_back_soon_after_they_end_while_snapshots_are_taken() {
    // Each snapshot holds the sweep lock for a moment, and they come back
    // to back: the sweep that a thread's end brings forward must wait for
    // the one in progress and go before the next, not pass.
    goes_back_soon_after_threads_end(true);
}

fn goes_back_soon_after_threads_end(snapshots: bool) {
    // A delay far longer than the bound: only the sweep that a thread's
    // end brings forward can meet it (one thread: such sweeps come at most
    // one a delay, and a second thread may end after the first sweep).
    smalloc::set_purge_delay(Duration::from_secs(10));
    if snapshots {
        // Half a million freed slots, which each snapshot walks: a lock
        // held for milliseconds.
        let blocks: Vec<_> = (0..500_000).map(|i| (alloc(32, i), i)).collect();
        for (p, tag) in blocks {
            free(p, 32, tag);
        }
    }
    let stop = Arc::new(AtomicBool::new(false));
    let watcher = snapshots.then(|| {
        let stop = stop.clone();
        thread::spawn(move || {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                std::hint::black_box(stats::snapshot());
                n += 1;
            }
            n
        })
    });
    // What stays (those freed slots, on this thread's private list).
    let kept = stats::snapshot().resident_bytes;
    let peak = peak_then_free(1, 64 << 20).saturating_sub(kept);
    assert!(peak >= 48 << 20, "{peak}");
    // A sweep may give the kept slots back too (under qemu the loop above
    // outlasts more of the delay): below `kept` counts as nothing left.
    let after = resident_falls_to(kept + peak / 10, Duration::from_secs(1)).saturating_sub(kept);
    stop.store(true, Ordering::Relaxed);
    let taken = watcher.map(|w| w.join().unwrap());
    assert!(
        after <= peak / 10,
        "resident {after} of {peak} above {kept}; snapshots meanwhile: {taken:?}"
    );
}

#[test]
fn a_thread_replaced_at_once_leaves_what_it_freed_for_its_successor() {
    // A thread ends just after another started (a program that replaces
    // its threads): no sweep is brought forward, so what it freed stays
    // for its successor until the delay (far away here) has passed.
    smalloc::set_purge_delay(Duration::from_secs(10));
    // What the harness's start swept counts for nothing here.
    let start = stats::snapshot();
    let (freed_tx, freed_rx) = std::sync::mpsc::channel();
    let (end_tx, end_rx) = std::sync::mpsc::channel::<()>();
    let first = thread::spawn(move || {
        let mut rng = Rng::new(5);
        let blocks: Vec<_> = (0..2000)
            .map(|i| {
                let size = rng.log_size(64, 64 << 10);
                (alloc(size, i), size, i)
            })
            .collect();
        for (p, size, tag) in blocks {
            free(p, size, tag);
        }
        freed_tx.send(()).unwrap();
        end_rx.recv().unwrap();
    });
    freed_rx.recv().unwrap();
    // Short threads start one after another meanwhile (each start within a
    // few milliseconds of the first thread's end, even on a loaded machine).
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                thread::spawn(|| free(alloc(100, 7), 100, 7))
                    .join()
                    .unwrap();
                thread::sleep(Duration::from_millis(1));
            }
        })
    };
    thread::sleep(Duration::from_millis(10));
    end_tx.send(()).unwrap();
    first.join().unwrap();
    // Ten times the delay a thread's end brings a sweep forward by.
    thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    churn.join().unwrap();
    let s = stats::snapshot();
    assert_eq!(
        (s.purged_bytes, s.purge_resets),
        (start.purged_bytes, start.purge_resets),
        "bytes given back, regions reset: {s:?}"
    );
}

#[test]
fn slabs_that_new_threads_took_up_go_back_again_after_their_end() {
    smalloc::set_purge_delay(Duration::from_millis(200));
    for round in 0..3 {
        // The same slabs each time: the lists were swept, then used again
        // (after the first round: two quiet sweeps, by the backoff).
        let peak = peak_then_free(2, 64 << 20);
        assert!(peak >= 48 << 20, "{peak}");
        let after = resident_falls_to(peak / 10, Duration::from_secs(3));
        assert!(
            after <= peak / 10,
            "round {round}: resident {after} of {peak}"
        );
    }
}

#[test]
fn a_peak_freed_by_a_sleeping_owner_is_given_back_where_it_reached_a_cold_path() {
    // The owner frees its own blocks and then only sleeps: what it freed
    // onto its private lists after its last cold path stays (only it may
    // touch them); its large slots and the rest go back.
    let mut rng = Rng::new(9);
    let blocks: Vec<_> = (0..2000)
        .map(|i| {
            let size = rng.log_size(64 << 10, 256 << 10);
            (alloc(size, i), size, i)
        })
        .collect();
    let peak = stats::snapshot().resident_bytes;
    // A thread's free onto the shared lists starts the background thread.
    let p = alloc(100, 1);
    thread::spawn(move || free(p, 100, 1)).join().unwrap();
    thread::sleep(Duration::from_millis(150));
    for (p, size, tag) in blocks {
        free(p, size, tag);
    }
    let after = resident_falls_to(peak / 10, Duration::from_secs(2));
    assert!(after <= peak / 10, "resident {after} of a peak of {peak}");
}

#[test]
fn owners_that_come_and_go_while_the_purging_thread_nudges_them() {
    // Every sweep (one a millisecond) points the alloc word of each owner
    // that took no cold path since the sweep before at the empty block;
    // owners end meanwhile, and their thread-local words go away with
    // them. Every block is checked, and no two live blocks share an
    // address.
    smalloc::set_purge_delay(Duration::from_millis(1));
    let live = Arc::new(Mutex::new(HashSet::new()));
    let start = Instant::now();
    let mut rounds = 0;
    while rounds < 40 || start.elapsed() < Duration::from_secs(2) {
        let workers: Vec<_> = (0..6u64)
            .map(|t| {
                let live = live.clone();
                thread::spawn(move || {
                    let mut rng = Rng::new(rounds * 8 + t + 1);
                    let mut kept = Vec::new();
                    for i in 0..300u64 {
                        let size = rng.log_size(16, 4096);
                        let p = alloc(size, i);
                        assert!(live.lock().unwrap().insert(p), "{p:#x} handed out twice");
                        if i % 3 == 0 {
                            thread::sleep(Duration::from_micros(50));
                        }
                        kept.push((p, size, i));
                    }
                    // Half back on this thread, half to the main thread.
                    let theirs = kept.split_off(kept.len() / 2);
                    for (p, size, tag) in kept {
                        assert!(live.lock().unwrap().remove(&p));
                        free(p, size, tag);
                    }
                    theirs
                })
            })
            .collect();
        for w in workers {
            for (p, size, tag) in w.join().unwrap() {
                assert!(live.lock().unwrap().remove(&p));
                free(p, size, tag);
            }
        }
        rounds += 1;
    }
    assert!(live.lock().unwrap().is_empty());
    // Thread words with an address of their own (not the pthread-key
    // fallback) are nudged.
    let nudged = cfg!(any(target_arch = "x86_64", target_arch = "aarch64"))
        && !cfg!(smalloc_portable_tls)
        && !cfg!(miri);
    let s = stats::snapshot();
    assert_eq!(s.purge_nudges > 0, nudged, "{s:?}");
}

/// What threads racing the purge share: the addresses of live blocks,
/// blocks one thread hands another to free, and the signal to stop.
#[derive(Default)]
struct Race {
    live: Mutex<HashSet<usize>>,
    handoff: Mutex<Vec<(usize, usize, u64)>>,
    stop: AtomicBool,
}

impl Race {
    fn running(&self) -> bool {
        !self.stop.load(Ordering::Relaxed)
    }

    /// A block of `size` bytes, whose address no live block has.
    fn alloc(&self, size: usize, tag: u64) -> (usize, usize, u64) {
        let p = alloc(size, tag);
        assert!(
            self.live.lock().unwrap().insert(p),
            "{p:#x} handed out twice"
        );
        (p, size, tag)
    }

    /// Frees `b` here, or hands it to another thread to free.
    fn free(&self, b: (usize, usize, u64), hand_over: bool) {
        assert!(self.live.lock().unwrap().remove(&b.0));
        if hand_over {
            self.handoff.lock().unwrap().push(b);
        } else {
            free(b.0, b.1, b.2);
        }
    }

    /// Frees what other threads handed over.
    fn free_theirs(&self) {
        for (p, size, tag) in std::mem::take(&mut *self.handoff.lock().unwrap()) {
            free(p, size, tag);
        }
    }
}

/// Runs `worker` on 4 threads for 3 s and then until a snapshot shows
/// `tested` (a loaded machine is slow to get there; 120 s at most), and
/// returns the statistics once they have all ended.
fn race(tested: fn(&stats::Snapshot) -> bool, worker: fn(u64, &Race)) -> stats::Snapshot {
    let race = Arc::new(Race::default());
    let workers: Vec<_> = (0..4)
        .map(|t| {
            let race = race.clone();
            thread::spawn(move || worker(t, &race))
        })
        .collect();
    let start = Instant::now();
    while workers.iter().any(|w| !w.is_finished()) && start.elapsed() < Duration::from_secs(120) {
        thread::sleep(Duration::from_millis(200));
        if start.elapsed() >= Duration::from_secs(3) && tested(&stats::snapshot()) {
            break;
        }
    }
    race.stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    race.free_theirs();
    stats::snapshot()
}

#[test]
fn purges_racing_allocations_and_frees_never_touch_a_live_block() {
    // Sweeps every millisecond while threads allocate, fill, check and free
    // blocks of every kind (some freed by other threads), and a set of
    // live addresses catches a slot handed out twice.
    smalloc::set_purge_delay(Duration::from_millis(1));
    // (The secure mode gives back no spans: docs/secure.md.)
    let tested =
        |s: &stats::Snapshot| s.purge_resets > 0 && (s.purge_spans > 0 || cfg!(feature = "secure"));
    let s = race(tested, |t, race| {
        let mut rng = Rng::new(100 + t);
        let mut mine = Vec::new();
        let mut tag = t << 40;
        while race.running() {
            // Waves: fill up, then drain, so regions empty and reset.
            let target = rng.range(0, 3000) as usize;
            while mine.len() < target {
                tag += 1;
                mine.push(race.alloc(rng.log_size(8, 512 << 10), tag));
            }
            while mine.len() > target / 4 {
                let b = mine.swap_remove(rng.below(mine.len() as u64) as usize);
                race.free(b, rng.chance(1, 4));
            }
            race.free_theirs();
        }
        for b in mine {
            race.free(b, false);
        }
    });
    assert!(tested(&s), "the race was not tested: {s:?}");
}

/// Frees `blocks` (of `size` bytes, tagged by index) on another thread:
/// onto the shared list, where sweeps see them. This thread owns the slab
/// and keeps its fresh run while it works; a trim (the same sweep) hands
/// it back with its lists, and resets the region.
fn free_elsewhere_and_reset(blocks: &[usize], size: usize) {
    let theirs = blocks.to_vec();
    thread::spawn(move || {
        for (i, p) in theirs.into_iter().enumerate() {
            free(p, size, i as u64);
        }
    })
    .join()
    .unwrap();
    smalloc::set_purge_delay(Duration::ZERO);
    stats::trim(0);
    assert!(stats::snapshot().purge_resets > 0, "no reset");
}

#[test]
fn a_reset_region_hands_out_zeroed_slots_and_keeps_working() {
    const SIZE: usize = 3000;
    let blocks: Vec<_> = (0..5000).map(|i| alloc(SIZE, i)).collect();
    free_elsewhere_and_reset(&blocks, SIZE);
    // The region's slots are never-used again: zero for `alloc_zeroed`
    // (not written), and `alloc` hands them out again in order.
    let l = layout(SIZE);
    // SAFETY: non-zero layouts; the blocks are freed below.
    let (z, p) = unsafe { (A.alloc_zeroed(l), A.alloc(l)) };
    // SAFETY: `z` holds SIZE bytes.
    assert!(unsafe { is_zero(z, SIZE) });
    assert!(blocks.contains(&(z as usize)) && blocks.contains(&(p as usize)));
    // SAFETY: both are ours.
    unsafe {
        fill(p, SIZE, 1);
        assert!(check(p, SIZE, 1).is_ok());
        A.dealloc(z, l);
        A.dealloc(p, l);
    }
}

#[test]
fn a_delay_of_zero_never_purges() {
    smalloc::set_purge_delay(Duration::ZERO);
    assert_eq!(smalloc::purge_delay(), Duration::ZERO);
    // What the harness's start swept counts for nothing here.
    let start = stats::snapshot();
    let blocks: Vec<_> = (0..200).map(|i| alloc(256 << 10, i)).collect();
    thread::spawn(move || {
        for (i, p) in blocks.into_iter().enumerate() {
            free(p, 256 << 10, i as u64);
        }
    })
    .join()
    .unwrap();
    thread::sleep(Duration::from_millis(500));
    let s = stats::snapshot();
    assert_eq!(
        (s.purged_bytes, s.purge_resets),
        (start.purged_bytes, start.purge_resets)
    );
    assert!(s.resident_bytes >= 200 * (256 << 10));
    // Sub-millisecond delays count as one millisecond, not as "never".
    smalloc::set_purge_delay(Duration::from_micros(10));
    assert_eq!(smalloc::purge_delay(), Duration::from_millis(1));
}

#[test]
#[cfg_attr(miri, ignore = "no purging thread under Miri")]
fn a_delay_of_zero_set_while_the_purging_thread_waits_stops_its_next_sweep() {
    smalloc::set_purge_delay(Duration::from_secs(1));
    assert!(smalloc::start_purge_thread());
    let ended = |tag| {
        thread::spawn(move || {
            let blocks: Vec<_> = (0..32).map(|i| alloc(1 << 20, tag + i)).collect();
            for (i, p) in blocks.into_iter().enumerate() {
                free(p, 1 << 20, tag + i as u64);
            }
        })
        .join()
        .unwrap();
    };
    // The first end is swept at once; what the next thread frees waits
    // for two of the thread's sweeps, a delay apart: the delay becomes 0
    // between them.
    let before = stats::snapshot().purged_bytes;
    ended(0);
    let t = Instant::now();
    while stats::snapshot().purged_bytes == before {
        assert!(t.elapsed() < Duration::from_secs(10), "no sweep at the end");
        thread::sleep(Duration::from_millis(5));
    }
    ended(100);
    thread::sleep(Duration::from_millis(1400).saturating_sub(t.elapsed()));
    smalloc::set_purge_delay(Duration::ZERO);
    // A sweep under way when the delay changed ends first.
    thread::sleep(Duration::from_millis(50));
    let start = stats::snapshot();
    thread::sleep(Duration::from_millis(2800).saturating_sub(t.elapsed()));
    let s = stats::snapshot();
    assert_eq!(
        (s.purged_bytes, s.purge_resets),
        (start.purged_bytes, start.purge_resets),
        "swept after the delay was set to 0"
    );
}

#[test]
fn the_delay_comes_from_the_environment() {
    // In a child process of this test binary, which reads the variable at
    // its first use.
    if let Ok(want) = std::env::var("PURGE_TEST_EXPECT") {
        assert_eq!(
            smalloc::purge_delay(),
            Duration::from_millis(want.parse().unwrap())
        );
        return;
    }
    let exe = std::env::current_exe().unwrap();
    for (value, expect) in [
        ("0", "0"),
        ("250", "250"),
        ("junk", "300"),
        ("-1", "300"),
        ("", "300"),
    ] {
        let out = devutils::target_command(&exe)
            .args([
                "--exact",
                "the_delay_comes_from_the_environment",
                "--nocapture",
            ])
            .env("SMALLOC_PURGE_DELAY_MS", value)
            .env("PURGE_TEST_EXPECT", expect)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "SMALLOC_PURGE_DELAY_MS={value:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A fork child's raw thread: frees the blocks of the `Vec` boxed at `arg`
/// (a failed check aborts the child, which its parent reports).
extern "C" fn free_all(arg: *mut libc::c_void) -> *mut libc::c_void {
    // SAFETY: `arg` is the box `fork_while_sweeps_run` leaked for us.
    let blocks = unsafe { Box::from_raw(arg.cast::<Vec<(usize, usize, u64)>>()) };
    for (p, size, tag) in *blocks {
        free(p, size, tag);
    }
    std::ptr::null_mut()
}

#[test]
fn fork_while_sweeps_run() {
    // Sweeps every millisecond while threads allocate and free in waves;
    // the main thread forks again and again. No child may find a list or a
    // region held by a sweep of the parent (a lost list, a region that
    // says "used up"): each allocates, checks and frees blocks of every
    // kind, also on a new thread (which starts the child's own purge).
    smalloc::set_purge_delay(Duration::from_millis(1));
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..3)
        .map(|t| {
            let stop = stop.clone();
            thread::spawn(move || {
                let mut rng = Rng::new(7 + t);
                let mut tag = 0;
                while !stop.load(Ordering::Relaxed) {
                    let blocks: Vec<_> = (0..rng.range(1, 500))
                        .map(|_| {
                            tag += 1;
                            let size = rng.log_size(8, 300 << 10);
                            (alloc(size, tag), size, tag)
                        })
                        .collect();
                    let theirs = blocks.clone();
                    thread::spawn(move || {
                        for (p, size, tag) in theirs {
                            free(p, size, tag);
                        }
                    })
                    .join()
                    .unwrap();
                }
            })
        })
        .collect();
    for round in 0..20u64 {
        // The allocator's fork handlers make it usable in the child.
        devutils::fork::in_child(|| {
            let mut rng = Rng::new(round);
            let blocks: Vec<_> = (0..300u64)
                .map(|i| {
                    let size = rng.log_size(8, 1 << 20);
                    (alloc(size, i), size, i)
                })
                .collect();
            // A raw thread: the parent's workers start and end std
            // threads all the time, and std's own lock for that may be
            // held at the fork (a deadlock in the child's
            // `thread::spawn`, seen once in CI).
            let arg = Box::into_raw(Box::new(blocks)).cast::<libc::c_void>();
            let mut t: libc::pthread_t = 0;
            // SAFETY: `free_all` takes the box back; default attributes.
            let rc = unsafe { libc::pthread_create(&mut t, std::ptr::null(), free_all, arg) };
            assert_eq!(rc, 0);
            // SAFETY: `t` was created above and is joined once.
            assert_eq!(unsafe { libc::pthread_join(t, std::ptr::null_mut()) }, 0);
        });
        thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, Ordering::Relaxed);
    for w in workers {
        w.join().unwrap();
    }
    assert!(stats::snapshot().purged_bytes > 0, "no sweep ran");
}

#[test]
fn a_trimmed_slot_reads_zero_through_alloc_zeroed_however_much_was_touched_since() {
    const SIZE: usize = 4 << 20;
    smalloc::set_purge_delay(Duration::ZERO);
    let l = layout(SIZE);
    // Another slot of the class stays live, so its region is not reset:
    // the freed slot keeps its first page and gives back the rest.
    let keep = alloc(SIZE, 1);
    let p = alloc(SIZE, 2);
    free(p, SIZE, 2);
    assert!(stats::trim(0) >= SIZE - 8192);
    // Handed out again by `alloc`: it reads as it was left (the first page,
    // which holds the link) or zero (the pages given back).
    // SAFETY: a non-zero layout.
    let q = unsafe { A.alloc(l) };
    assert_eq!(q as usize, p);
    // SAFETY: `q` holds SIZE bytes.
    let bytes = unsafe { std::slice::from_raw_parts_mut(q, SIZE) };
    assert!(bytes[4096..].iter().all(|&b| b == 0));
    // Touch a third of its pages, free it, and take it zeroed: resident
    // pages are written, the others given back; all read zero.
    for page in bytes.chunks_mut(4096).step_by(3) {
        page.fill(0xa5);
    }
    // SAFETY: `q` is ours, of layout `l`.
    unsafe { A.dealloc(q, l) };
    // SAFETY: a non-zero layout.
    let z = unsafe { A.alloc_zeroed(l) };
    assert_eq!(z as usize, p);
    // SAFETY: `z` holds SIZE bytes.
    assert!(unsafe { is_zero(z, SIZE) });
    // SAFETY: ours.
    unsafe { A.dealloc(z, l) };
    free(keep, SIZE, 1);
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode gives back no spans")]
fn pages_of_freed_small_slots_between_live_ones_go_back_and_come_back_zeroed() {
    // 48-byte slots: spans of three pages (256 slots). One block in 4096
    // stays live, so no region is wholly free and only spans can go back.
    smalloc::set_purge_delay(Duration::ZERO);
    const SIZE: usize = 48;
    const N: usize = 200_000;
    let sc = smalloc::layout::size_class(SIZE, 8);
    // On this thread's slab only: libtest's main thread may allocate
    // blocks of the class meanwhile.
    let slab = smalloc::hooks::owned_slab().expect("the test thread owns a slab");
    let in_use = || {
        let u = smalloc::hooks::list_usage(slab, sc);
        u.handed_out - u.free
    };
    let mut blocks = Vec::with_capacity(N);
    let base = in_use();
    blocks.extend((0..N).map(|i| alloc(SIZE, i as u64)));
    let kept: Vec<(usize, u64)> = (0..N)
        .step_by(4096)
        .map(|i| (blocks[i], i as u64))
        .collect();
    for (i, &p) in blocks.iter().enumerate() {
        if i % 4096 != 0 {
            free(p, SIZE, i as u64);
        }
    }
    let before = stats::snapshot();
    stats::trim(0);
    let after = stats::snapshot();
    assert!(
        after.purge_spans >= (N / 256 - 2 * kept.len()) as u64,
        "{after:?}"
    );
    assert!(
        after.resident_bytes < before.resident_bytes - (N * SIZE * 8 / 10) as u64,
        "resident {} of {} before",
        after.resident_bytes,
        before.resident_bytes
    );
    // Exact: the spans' slots count as free, the survivors in use.
    assert_eq!(in_use() - base, kept.len() as u64);
    // The survivors are intact (a reset of their region, which the trim
    // may make of regions the harness's threads left wholly free, would
    // have zeroed them); slots handed out again (from the spans
    // first: zero, not written; then the lists) read zero through
    // `alloc_zeroed`, and none is handed out twice.
    let mut live: HashSet<usize> = kept.iter().map(|&(p, _)| p).collect();
    let l = layout(SIZE);
    let again: Vec<usize> = (0..N)
        .map(|_| {
            // SAFETY: a non-zero layout; freed below.
            let z = unsafe { A.alloc_zeroed(l) };
            // SAFETY: `z` holds SIZE bytes.
            assert!(unsafe { is_zero(z, SIZE) }, "{z:p} not zeroed");
            assert!(live.insert(z as usize), "{z:p} handed out twice");
            // SAFETY: ours.
            unsafe { fill(z, SIZE, z as u64) };
            z as usize
        })
        .collect();
    for &(p, tag) in &kept {
        free(p, SIZE, tag);
    }
    for p in again {
        free(p, SIZE, p as u64);
    }
}

// New memory against freed large slots (`pressure`): a thread that claims
// never-used slots gives back about as many resident bytes of freed large
// slots first, whatever the purge delay.

const BIG: usize = 3 << 20;
const BIGS: u64 = 8;
const SMALL: usize = 1000;

/// Frees `BIGS` filled blocks of `BIG` bytes (4 MiB slots), then allocates
/// about as many bytes of blocks of `size`; returns (resident bytes of
/// slots after the big frees, after the new blocks, the new blocks).
fn big_then(size: usize) -> (u64, u64, Vec<usize>) {
    let bigs: Vec<_> = (0..BIGS).map(|i| alloc(BIG, i)).collect();
    for (i, p) in bigs.into_iter().enumerate() {
        free(p, BIG, i as u64);
    }
    let before = stats::snapshot().resident_bytes;
    let n = BIGS as usize * BIG / size;
    let blocks: Vec<_> = (0..n).map(|i| alloc(size, 1000 + i as u64)).collect();
    (before, stats::snapshot().resident_bytes, blocks)
}

/// With a delay far longer than the test (only the claims give back),
/// frees the big blocks, allocates about as many bytes of blocks of `size`
/// and checks that they took the big slots' place; frees them.
fn new_memory_takes_the_place_of_freed_big_slots(size: usize) {
    smalloc::set_purge_delay(Duration::from_secs(3600));
    let (before, after, blocks) = big_then(size);
    let bigs = BIGS * BIG as u64;
    assert!(before >= bigs, "the big blocks were not resident: {before}");
    // The new blocks' own bytes, and at most a quarter of the big ones
    // (their slots' first pages, and what the last claims left).
    assert!(
        after <= before + bigs / 4,
        "resident {after} after the new blocks, {before} before"
    );
    let s = stats::snapshot();
    assert!(s.purged_bytes >= bigs / 2, "{s:?}");
    for (i, p) in blocks.into_iter().enumerate() {
        free(p, size, 1000 + i as u64);
    }
    // The slots given back work again: filled and checked.
    let again: Vec<_> = (0..BIGS).map(|i| alloc(BIG, 50 + i)).collect();
    for (i, p) in again.into_iter().enumerate() {
        free(p, BIG, 50 + i as u64);
    }
}

#[test]
fn new_small_memory_takes_the_place_of_freed_large_slots() {
    new_memory_takes_the_place_of_freed_big_slots(SMALL);
    // And they read zero.
    for _ in 0..BIGS {
        // SAFETY: a non-zero layout.
        let p = unsafe { A.alloc_zeroed(layout(BIG)) };
        assert!(!p.is_null());
        // SAFETY: `p` holds BIG bytes.
        assert!(unsafe { is_zero(p, BIG) }, "a reused slot not zeroed");
        // SAFETY: allocated above with this layout.
        unsafe { A.dealloc(p, layout(BIG)) };
    }
}

#[test]
fn new_large_memory_takes_the_place_of_freed_larger_slots() {
    // Blocks of 100 KiB (112 KiB slots) cannot borrow the freed 4 MiB
    // slots (at most four times their size), so each is new memory.
    new_memory_takes_the_place_of_freed_big_slots(100 << 10);
}

#[test]
fn large_slots_used_again_after_claims_gave_them_back_are_given_back_less_often() {
    // Each round frees a large block, claims 2 MiB of new small memory
    // (two releases: the first notes the freed slot's list, the second
    // gives its pages back), then allocates the large block again (its
    // pages fault in again) and keeps the small blocks. Without the
    // backoff every round gives the slot back: 63 pages of 256 KiB. (A
    // program that reuses its slots much later, as the simd-json workload
    // does, keeps getting them back: not measured here.)
    smalloc::set_purge_delay(Duration::from_secs(3600));
    const LARGE: usize = 256 << 10;
    const ROUNDS: u64 = 48;
    let mut kept = Vec::new();
    let mut big = alloc(LARGE, 0);
    for round in 0..ROUNDS {
        free(big, LARGE, round);
        // Not written: the round takes microseconds, so the block is used
        // again soon (`purge::SOON_MS`) after its pages went back.
        for _ in 0..64 {
            // SAFETY: a non-zero layout.
            let p = unsafe { A.alloc(layout(32 << 10)) };
            assert!(!p.is_null());
            kept.push(p);
        }
        big = alloc(LARGE, round + 1);
    }
    free(big, LARGE, ROUNDS);
    let s = stats::snapshot();
    let every_round = ROUNDS * (LARGE as u64 - 4096);
    assert!(
        s.purged_bytes > 0 && s.purged_bytes <= every_round / 3,
        "{} of {every_round}",
        s.purged_bytes
    );
    for p in kept {
        // SAFETY: allocated above with this layout.
        unsafe { A.dealloc(p, layout(32 << 10)) };
    }
}

#[test]
fn a_delay_of_zero_gives_nothing_back_on_claims_either() {
    smalloc::set_purge_delay(Duration::ZERO);
    // What the harness's start swept counts for nothing here.
    let start = stats::snapshot().purged_bytes;
    let (before, after, _smalls) = big_then(SMALL);
    let s = stats::snapshot();
    assert_eq!(s.purged_bytes, start, "{s:?}");
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
    let s = race(
        |s| s.purged_bytes > 0,
        |t, race| {
            let mut rng = Rng::new(300 + t);
            let (mut large, mut kept) = (Vec::new(), Vec::new());
            let mut tag = t << 40;
            let mut kept_bytes = 0;
            while race.running() && kept_bytes < 96 << 20 {
                tag += 1;
                large.push(race.alloc(rng.log_size(64 << 10, 4 << 20), tag));
                if large.len() > 6 {
                    let b = large.swap_remove(rng.below(large.len() as u64) as usize);
                    race.free(b, rng.chance(1, 3));
                }
                for _ in 0..64 {
                    tag += 1;
                    let size = rng.log_size(16, 4096);
                    kept.push((alloc(size, tag), size, tag));
                    kept_bytes += size;
                }
                race.free_theirs();
            }
            for b in large {
                race.free(b, false);
            }
            for (p, size, tag) in kept {
                free(p, size, tag);
            }
        },
    );
    assert!(s.purged_bytes > 0, "the race was not tested: {s:?}");
}

// Pages a program locked (`mlock`, `mlockall`) refuse `MADV_DONTNEED`:
// what the purge hands out as never-used (a reset region, a span) must
// read zero all the same.

/// Locks the 16 pages around the middle of `[lo, hi)` (64 KiB: within
/// every kernel's default limit of locked memory); false if the kernel
/// refuses.
fn lock_middle(lo: usize, hi: usize) -> bool {
    let page = 4096;
    let start = ((lo + hi) / 2) & !(page - 1);
    // SAFETY: the pages lie inside blocks of ours; locking changes only
    // whether they may be swapped out or given back.
    unsafe { libc::mlock(start as *const libc::c_void, 16 * page) == 0 }
}

/// Takes `n` blocks of `size` bytes zeroed, checks that they read zero,
/// and frees them.
fn zeroed_blocks_read_zero(n: usize, size: usize) {
    let l = layout(size);
    let blocks: Vec<*mut u8> = (0..n)
        .map(|_| {
            // SAFETY: a non-zero layout; freed below.
            let z = unsafe { A.alloc_zeroed(l) };
            // SAFETY: `z` holds `size` bytes.
            assert!(unsafe { is_zero(z, size) }, "{z:p} not zeroed");
            z
        })
        .collect();
    for z in blocks {
        // SAFETY: ours, of layout `l`.
        unsafe { A.dealloc(z, l) };
    }
}

#[test]
#[cfg_attr(miri, ignore = "mlock")]
fn a_region_reset_over_locked_pages_hands_out_zeroed_slots() {
    const SIZE: usize = 3000;
    const N: usize = 1000;
    let blocks: Vec<_> = (0..N).map(|i| alloc(SIZE, i as u64)).collect();
    let (lo, hi) = (blocks[0], blocks[N - 1] + SIZE);
    if !lock_middle(lo, hi) {
        eprintln!("skipped: mlock refused");
        return;
    }
    free_elsewhere_and_reset(&blocks, SIZE);
    zeroed_blocks_read_zero(N, SIZE);
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode gives back no spans")]
#[cfg_attr(miri, ignore = "mlock")]
fn spans_over_locked_pages_come_back_zeroed() {
    const SIZE: usize = 48;
    const N: usize = 50_000;
    let blocks: Vec<_> = (0..N).map(|i| alloc(SIZE, i as u64)).collect();
    if !lock_middle(blocks[0], blocks[N - 1] + SIZE) {
        eprintln!("skipped: mlock refused");
        return;
    }
    for (i, &p) in blocks.iter().enumerate() {
        if i % 4096 != 0 {
            free(p, SIZE, i as u64);
        }
    }
    smalloc::set_purge_delay(Duration::ZERO);
    stats::trim(0);
    assert!(stats::snapshot().purge_spans > 0, "no span given back");
    zeroed_blocks_read_zero(N, SIZE);
    for i in (0..N).step_by(4096) {
        free(blocks[i], SIZE, i as u64);
    }
}

/// Whether a thread of this process is named `smalloc-purge`.
fn purging_thread_exists() -> bool {
    std::fs::read_dir("/proc/self/task").unwrap().any(|t| {
        let comm = std::fs::read_to_string(t.unwrap().path().join("comm")).unwrap_or_default();
        comm.trim_end() == "smalloc-purge"
    })
}

#[test]
#[cfg_attr(miri, ignore = "no purging thread under Miri")]
fn the_purging_thread_asked_for_starts_at_once_and_sweeps() {
    // This process has two threads that allocate (the test's and libtest's),
    // so it may have started already: that it starts where one thread
    // allocates is shown by the C library's tests (purge.rs there).
    assert!(smalloc::start_purge_thread());
    assert!(purging_thread_exists(), "asked for, not started");
    smalloc::set_purge_delay(Duration::from_millis(20));
    // Slots freed go back with no call from the program.
    let blocks: Vec<usize> = (0..64).map(|i| alloc(1 << 20, i)).collect();
    for (i, p) in blocks.into_iter().enumerate() {
        free(p, 1 << 20, i as u64);
    }
    let before = stats::snapshot().purged_bytes;
    let t = Instant::now();
    while stats::snapshot().purged_bytes == before {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "nothing given back in 10 s"
        );
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
#[cfg_attr(miri, ignore = "no purging thread under Miri")]
fn the_purging_thread_asked_for_with_purging_off_starts_when_a_delay_is_set() {
    smalloc::set_purge_delay(Duration::ZERO);
    // libtest's thread and the test's may have started it already (a cold
    // free before the line above): it then runs, idle.
    let already = purging_thread_exists();
    assert_eq!(smalloc::start_purge_thread(), already);
    assert_eq!(purging_thread_exists(), already, "started with purging off");
    smalloc::set_purge_delay(Duration::from_millis(20));
    assert!(purging_thread_exists(), "no thread once a delay was set");
}
