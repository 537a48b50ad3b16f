//! Slab ownership: a thread alone on its slab owns it, allocates and frees
//! its small slots on private lists, and hands them on when it ends; the
//! private lists of slabs nobody owns stay reachable (the next owner, the
//! search before new memory, a `fork` child); threads beyond the slabs'
//! count share slabs without owning them and take over slabs as owners
//! leave.

use std::alloc::{GlobalAlloc, Layout};
use std::collections::HashSet;
use std::sync::{Arc, Barrier, mpsc};
use std::thread;

use devutils::{check, fill};
use smalloc::Smalloc;
use smalloc::hooks;
use smalloc::layout::{THREAD_SLABS, slab_of};

static A: Smalloc = Smalloc::new();

/// The size of most blocks here.
const SIZE: usize = 48;

fn alloc() -> *mut u8 {
    alloc_of(SIZE)
}

fn free(p: *mut u8) {
    free_of(p, SIZE)
}

fn alloc_of(size: usize) -> *mut u8 {
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(Layout::from_size_align(size, 8).unwrap()) };
    assert!(!p.is_null());
    p
}

fn free_of(p: *mut u8, size: usize) {
    // SAFETY: every caller passes a live block of this size, alignment 8.
    unsafe { A.dealloc(p, Layout::from_size_align(size, 8).unwrap()) }
}

/// Allocates `n` blocks, fills each with a pattern of its index.
fn alloc_filled(n: usize) -> Vec<*mut u8> {
    alloc_filled_of(n, SIZE)
}

/// Allocates `n` blocks of `size` bytes, fills each with a pattern of its
/// index.
fn alloc_filled_of(n: usize, size: usize) -> Vec<*mut u8> {
    (0..n)
        .map(|i| {
            let p = alloc_of(size);
            // SAFETY: a live block of `size` bytes.
            unsafe { fill(p, size, i as u64) };
            p
        })
        .collect()
}

/// Checks the patterns of `alloc_filled`, then frees the blocks.
fn check_and_free(blocks: Vec<*mut u8>) {
    check_and_free_of(blocks, SIZE)
}

/// Checks the patterns of `alloc_filled_of`, then frees the blocks.
fn check_and_free_of(blocks: Vec<*mut u8>, size: usize) {
    for (i, &p) in blocks.iter().enumerate() {
        // SAFETY: a live block of `size` bytes.
        assert_eq!(unsafe { check(p, size, i as u64) }, Ok(()), "block {i}");
    }
    blocks.into_iter().for_each(|p| free_of(p, size));
}

fn addrs(blocks: &[*mut u8]) -> HashSet<usize> {
    let set: HashSet<usize> = blocks.iter().map(|p| p.addr()).collect();
    assert_eq!(set.len(), blocks.len(), "a slot handed out twice");
    set
}

/// Allocates `n` blocks of `size`, fills, checks and frees them; returns
/// their addresses.
fn use_and_free(n: usize, size: usize) -> HashSet<usize> {
    let blocks = alloc_filled_of(n, size);
    let set = addrs(&blocks);
    check_and_free_of(blocks, size);
    set
}

/// [`use_and_free`] of `n` blocks of `SIZE` on a new thread: the slab it
/// owned and the addresses.
fn on_a_new_thread(n: usize) -> (usize, HashSet<usize>) {
    thread::spawn(move || {
        let set = use_and_free(n, SIZE);
        (hooks::owned_slab().unwrap(), set)
    })
    .join()
    .unwrap()
}

/// Thread A, on a slab of its own, allocates and frees `n` blocks of `size`
/// and ends; then thread B, which owns another slab, allocates `n` blocks
/// of `size`. Returns B's slab before, A's slab, B's owned slab after, and
/// how many of B's blocks were slots A freed.
fn after_a_left_slab(n: usize, size: usize) -> (usize, usize, Option<usize>, usize) {
    let (to_b, from_a) = mpsc::channel();
    let (a_done, a_exited) = mpsc::channel::<()>();
    // Both threads take their slabs before A allocates, so they own
    // different ones.
    let placed = Arc::new(Barrier::new(2));
    let placed_b = placed.clone();
    let a = thread::spawn(move || {
        free(alloc());
        placed.wait();
        let set = use_and_free(n, size);
        to_b.send((hooks::owned_slab().unwrap(), set)).unwrap();
        drop(a_done);
    });
    let b = thread::spawn(move || {
        free(alloc());
        placed_b.wait();
        let mine = hooks::owned_slab().unwrap();
        let (a_slab, freed) = from_a.recv().unwrap();
        assert_ne!(mine, a_slab);
        let _ = a_exited.recv(); // A has sent everything and is ending.
        while hooks::owned_slabs() & (1 << a_slab) != 0 {
            thread::yield_now();
        }
        let got = use_and_free(n, size);
        let reused = got.intersection(&freed).count();
        (mine, a_slab, hooks::owned_slab(), reused)
    });
    a.join().unwrap();
    b.join().unwrap()
}

#[test]
fn threads_alive_at_once_own_distinct_slabs_and_reuse_their_frees() {
    free(alloc());
    assert_eq!(hooks::owned_slab(), Some(0), "the first thread owns slab 0");
    let barrier = Arc::new(Barrier::new(5));
    let hs: Vec<_> = (0..5)
        .map(|_| {
            let b = barrier.clone();
            thread::spawn(move || {
                let p = alloc();
                let owned = hooks::owned_slab().expect("a thread alone on its slab owns it");
                assert_eq!(slab_of(p.addr()), owned);
                free(p);
                // Freed to its private list, it comes straight back.
                assert_eq!(alloc(), p);
                free(p);
                b.wait();
                owned
            })
        })
        .collect();
    let mut owned: Vec<usize> = hs.into_iter().map(|h| h.join().unwrap()).collect();
    owned.sort();
    assert_eq!(owned, [1, 2, 3, 4, 5]);
    // Finished threads gave their slabs back.
    assert_eq!(hooks::owned_slabs(), 1);
}

#[test]
fn a_new_thread_inherits_the_private_lists_of_a_finished_owner() {
    free(alloc());
    let n = if cfg!(miri) { 50 } else { 5000 };
    let (slab, freed) = on_a_new_thread(n);
    assert_eq!(hooks::owned_slabs() & (1 << slab), 0, "released at exit");
    let (again, got) = on_a_new_thread(n);
    assert_eq!(again, slab, "the next thread takes the free slab");
    assert_eq!(got, freed, "and allocates exactly the slots freed there");
}

#[test]
fn the_search_before_new_memory_reaches_private_lists_of_unowned_slabs() {
    free(alloc());
    // 2 KiB blocks: 32 to a new-memory step, so a few hundred are enough to
    // run out of the first step, also under Miri.
    const BIG: usize = 2048;
    let n = if cfg!(miri) { 100 } else { 2_000 };
    // B's own list is empty: before touching new memory it looks at the
    // other slabs, finds A's freed slots on the private list of a slab
    // nobody owns, and moves there.
    let (first, a_slab, now, reused) = after_a_left_slab(n, BIG);
    assert_eq!(now, Some(a_slab), "B moved to A's slab (from {first})");
    let step = smalloc::layout::NEW_MEMORY_STEP / BIG;
    assert!(
        reused + step >= n,
        "only {reused} of {n} freed slots reused"
    );
    assert_eq!(hooks::owned_slabs(), 1, "B gave its slabs back");
}

#[test]
#[cfg_attr(miri, ignore = "17 threads: slow under Miri")]
fn threads_beyond_the_slabs_share_without_owning_and_take_over_a_left_slab() {
    free(alloc());
    // Main owns slab 0; 15 more owners fill the other slabs and stay until
    // told to end.
    let ready = Arc::new(Barrier::new(THREAD_SLABS));
    let mut owners = Vec::new();
    for _ in 1..THREAD_SLABS {
        let ready = ready.clone();
        let (end_tx, end_rx) = mpsc::channel::<()>();
        let h = thread::spawn(move || {
            free(alloc());
            let s = hooks::owned_slab().unwrap();
            ready.wait();
            end_rx.recv().unwrap();
            s
        });
        owners.push((end_tx, h));
    }
    ready.wait();
    assert_eq!(hooks::owned_slabs(), (1 << THREAD_SLABS) - 1);
    let (report_tx, report_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let extra = thread::spawn(move || {
        // Every slab is owned: this thread allocates on the shared lists.
        let blocks = alloc_filled(1000);
        report_tx.send(hooks::owned_slab()).unwrap();
        go_rx.recv().unwrap();
        // A slab has been left: the next allocation claims it.
        let more = alloc_filled(10);
        let owned = hooks::owned_slab();
        check_and_free(blocks);
        check_and_free(more);
        owned
    });
    assert_eq!(report_rx.recv().unwrap(), None);
    // One owner ends.
    let (end_tx, h) = owners.remove(6);
    end_tx.send(()).unwrap();
    let left = h.join().unwrap();
    assert_eq!(hooks::owned_slabs(), (1 << THREAD_SLABS) - 1 - (1 << left));
    go_tx.send(()).unwrap();
    assert_eq!(
        extra.join().unwrap(),
        Some(left),
        "the extra thread took over"
    );
    for (end_tx, h) in owners {
        end_tx.send(()).unwrap();
        h.join().unwrap();
    }
    assert_eq!(hooks::owned_slabs(), 1);
}

#[test]
fn a_pinned_thread_allocates_on_the_shared_lists_of_its_slab() {
    free(alloc());
    let got = thread::spawn(|| {
        free(alloc());
        let home = hooks::owned_slab().unwrap();
        assert!(hooks::move_current_thread_to_slab(0));
        assert_eq!(hooks::owned_slab(), None, "pinned threads own nothing");
        assert_eq!(
            hooks::owned_slabs() & (1 << home),
            0,
            "its old slab was left"
        );
        let blocks = alloc_filled(100);
        assert!(blocks.iter().all(|p| slab_of(p.addr()) == 0));
        let set = addrs(&blocks);
        check_and_free(blocks);
        // Frees went to the shared list: allocating again reuses them.
        let again = alloc_filled(100);
        let reused = addrs(&again).intersection(&set).count();
        check_and_free(again);
        reused
    })
    .join()
    .unwrap();
    assert_eq!(got, 100);
    // The main thread still owns slab 0, and its own list is intact.
    assert_eq!(hooks::owned_slab(), Some(0));
    check_and_free(alloc_filled(100));
}

#[test]
#[cfg_attr(miri, ignore = "pthread key destructor order is glibc's")]
fn allocations_after_the_exit_destructor_do_not_claim_a_slab() {
    free(alloc());
    // A key created after smalloc's own: glibc runs its destructor after
    // smalloc's, when the thread has given up its slab.
    extern "C" fn late(value: *mut libc::c_void) {
        let n = value.addr();
        let blocks = alloc_filled(n);
        check_and_free(blocks);
        assert_eq!(hooks::owned_slab(), None);
    }
    let mut key: libc::pthread_key_t = 0;
    // SAFETY: a valid out-pointer and destructor.
    assert_eq!(unsafe { libc::pthread_key_create(&mut key, Some(late)) }, 0);
    let slab = thread::spawn(move || {
        free(alloc());
        // SAFETY: a valid key; the value is a count, never dereferenced.
        unsafe { libc::pthread_setspecific(key, std::ptr::without_provenance(200)) };
        hooks::owned_slab().unwrap()
    })
    .join()
    .unwrap();
    assert_eq!(hooks::owned_slabs() & (1 << slab), 0, "nobody owns it now");
    // And the next thread owns it, with what the destructor freed.
    let again = thread::spawn(|| {
        free(alloc());
        hooks::owned_slab()
    })
    .join()
    .unwrap();
    assert_eq!(again, Some(slab));
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot fork")]
#[cfg_attr(
    smalloc_tsan,
    ignore = "ThreadSanitizer does not support threads after a multi-threaded fork"
)]
fn a_fork_child_can_claim_the_slabs_of_threads_it_does_not_have() {
    free(alloc());
    let n = 2000;
    let (to_main, from_t) = mpsc::channel();
    let (finish_tx, finish_rx) = mpsc::channel::<()>();
    let t = thread::spawn(move || {
        let set = use_and_free(n, SIZE);
        to_main.send((hooks::owned_slab().unwrap(), set)).unwrap();
        // Stay alive (owning the slab) while the main thread forks.
        finish_rx.recv().unwrap();
    });
    let (t_slab, freed) = from_t.recv().unwrap();
    // The child allocates (lock-free) and spawns a thread: `t`, the only
    // other thread, is waiting on its channel, not starting threads.
    devutils::fork::in_child(move || {
        // Only the forking thread exists: it alone owns a slab.
        assert_eq!(hooks::owned_slabs(), 1 << hooks::owned_slab().unwrap());
        let (slab, got) = on_a_new_thread(n);
        assert_eq!(slab, t_slab, "the child's new thread owns T's slab");
        assert_eq!(got, freed, "and reuses T's freed slots");
    });
    finish_tx.send(()).unwrap();
    t.join().unwrap();
}

/// 112 KiB slots: large, below the release size.
const LARGE: usize = 100_000;

#[test]
#[cfg_attr(miri, ignore = "large slots do not exist under Miri's geometry")]
fn an_owner_keeps_freed_large_slots_up_to_its_cap_then_shares_them() {
    free(alloc());
    let slab = hooks::owned_slab().unwrap();
    let sc = smalloc::layout::size_class(LARGE, 8);
    let cap = (hooks::PRIVATE_LARGE_BYTES / smalloc::layout::slot_size(sc)).max(1);
    let blocks = alloc_filled_of(cap + 5, LARGE);
    let before = hooks::list_usage(slab, sc).shared_frees;
    check_and_free_of(blocks, LARGE);
    // The first `cap` frees stayed private, the rest went to the shared list.
    assert_eq!(hooks::list_usage(slab, sc).shared_frees - before, 5);
    // All of them come back to their owner, without touching new memory.
    let handed_out = hooks::list_usage(slab, sc).handed_out;
    check_and_free_of(alloc_filled_of(cap + 5, LARGE), LARGE);
    assert_eq!(hooks::list_usage(slab, sc).handed_out, handed_out);
}

/// 20 KiB slots: capped, below the large ones.
const CAPPED: usize = 20_000;

#[test]
#[cfg_attr(miri, ignore = "Miri's regions hold too few 20 KiB slots")]
fn an_owner_keeps_freed_capped_slots_up_to_its_cap_then_shares_them() {
    free(alloc());
    let slab = hooks::owned_slab().unwrap();
    let sc = smalloc::layout::size_class(CAPPED, 8);
    assert_eq!(smalloc::layout::slot_size(sc), 20 << 10);
    let secure = cfg!(feature = "secure");
    let cap = (hooks::PRIVATE_LARGE_BYTES / smalloc::layout::slot_size(sc)).max(1);
    let shared_frees = || hooks::list_usage(slab, sc).shared_frees;
    let blocks = alloc_filled_of(cap + 5, CAPPED);
    let before = shared_frees();
    check_and_free_of(blocks, CAPPED);
    // The first `cap` frees stayed private, the rest went to the shared list
    // (the secure mode caps nothing: every free stays private).
    assert_eq!(shared_frees() - before, if secure { 0 } else { 5 });
    // Ten taken from the private list and freed again: its length is read
    // right after pops, so they fit under the cap again, and one more does
    // not.
    let again = alloc_filled_of(10, CAPPED);
    check_and_free_of(again, CAPPED);
    assert_eq!(shared_frees() - before, if secure { 0 } else { 5 });
    let one = alloc_filled_of(cap + 6, CAPPED);
    let handed_out = hooks::list_usage(slab, sc).handed_out;
    check_and_free_of(one, CAPPED);
    assert_eq!(shared_frees() - before, if secure { 0 } else { 11 });
    // Every slot comes back, none twice, without touching new memory.
    let all = alloc_filled_of(cap + 6, CAPPED);
    assert_eq!(addrs(&all).len(), cap + 6);
    assert_eq!(hooks::list_usage(slab, sc).handed_out, handed_out);
    check_and_free_of(all, CAPPED);
}

#[test]
#[cfg_attr(miri, ignore = "large slots do not exist under Miri's geometry")]
fn private_large_slots_of_a_left_slab_are_reused_before_new_memory() {
    free(alloc());
    let sc = smalloc::layout::size_class(LARGE, 8);
    let n = (hooks::PRIVATE_LARGE_BYTES / smalloc::layout::slot_size(sc)).max(1);
    // B's own list of the class is empty: A's private slots are taken
    // (borrowed under a short claim) before new memory.
    let (first, _, now, reused) = after_a_left_slab(n, LARGE);
    assert_eq!(now, Some(first), "large slots are only borrowed");
    assert_eq!(reused, n, "every freed large slot reused");
}
