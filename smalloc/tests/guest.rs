//! Guest cells: a thread that owns no slab (every slab has an owner) keeps
//! the small slots it frees of a class (a chain, once it allocated one) in
//! cells of its own and hands them out again at its next allocations of
//! the class, the last freed first; what it holds goes
//! home when it ends, in a trim (from any thread), and in a `fork` child
//! of another thread.

use std::alloc::{GlobalAlloc, Layout};
use std::sync::mpsc;
use std::thread;

use devutils::{check, fill};
use smalloc::{Smalloc, hooks, layout};

static A: Smalloc = Smalloc::new();

/// 720-byte blocks (768-byte slots): a class the test harness's own
/// allocations leave alone.
const SIZE: usize = 720;

fn l() -> Layout {
    Layout::from_size_align(SIZE, 8).unwrap()
}

fn sc() -> u32 {
    layout::size_class(SIZE, 8)
}

fn alloc() -> usize {
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(l()) };
    assert!(!p.is_null());
    p.addr()
}

fn free(p: usize) {
    // SAFETY: `p` came from `alloc` and is live.
    unsafe { A.dealloc(std::ptr::with_exposed_provenance_mut(p), l()) }
}

/// Frees `p` (whole, `tag`), after checking it.
fn check_and_free(p: usize, tag: u64) {
    // SAFETY: a live block of SIZE bytes filled with `tag`.
    let ok = unsafe { check(std::ptr::with_exposed_provenance_mut(p), SIZE, tag) };
    assert_eq!(ok, Ok(()), "block {p:#x} corrupted");
    free(p);
}

/// Threads that own every slab, alive until [`Owners::end`]; each handed
/// over a block of its slab filled with the slab's number (and keeps a
/// second one, so that no sweep resets the region).
struct Owners {
    blocks: Vec<usize>,
    stop: mpsc::Sender<()>,
    threads: Vec<thread::JoinHandle<()>>,
}

impl Owners {
    fn new() -> Owners {
        let (stop, stopped) = mpsc::channel::<()>();
        let stopped = std::sync::Arc::new(std::sync::Mutex::new(stopped));
        let all = (1usize << layout::THREAD_SLABS) - 1;
        let (mut blocks, mut threads) = (Vec::new(), Vec::new());
        free(alloc());
        if let Some(slab) = hooks::owned_slab() {
            let p = alloc();
            // SAFETY: a live block of SIZE bytes.
            unsafe { fill(std::ptr::with_exposed_provenance_mut(p), SIZE, slab as u64) };
            blocks.push(p);
        }
        while hooks::owned_slabs() != all {
            let (to_me, from_it) = mpsc::channel();
            let stopped = stopped.clone();
            threads.push(thread::spawn(move || {
                let keep = alloc();
                let p = alloc();
                let slab = hooks::owned_slab();
                if let Some(slab) = slab {
                    // SAFETY: a live block of SIZE bytes.
                    unsafe { fill(std::ptr::with_exposed_provenance_mut(p), SIZE, slab as u64) };
                }
                to_me.send(slab.map(|_| p)).unwrap();
                let _ = stopped.lock().unwrap().recv();
                free(keep);
                if slab.is_none() {
                    free(p);
                }
            }));
            if let Some(p) = from_it.recv().unwrap() {
                blocks.push(p);
            }
        }
        Owners {
            blocks,
            stop,
            threads,
        }
    }

    fn end(self) {
        drop(self.stop);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

/// A block of `pool`, taken: one of a slab other than the calling thread's
/// current one.
fn take(pool: &mut Vec<usize>) -> usize {
    let not = hooks::current_slab();
    let i = pool
        .iter()
        .position(|&p| Some(layout::slab_of(p)) != not)
        .expect("blocks of 16 slabs");
    pool.swap_remove(i)
}

/// Runs `f` on a new thread, which owns no slab (asserted), with a block of
/// its own allocated.
fn as_guest<T: Send + 'static>(f: impl FnOnce(usize) -> T + Send + 'static) -> T {
    thread::spawn(move || {
        let own = alloc();
        assert_eq!(hooks::owned_slab(), None, "every slab has an owner");
        let out = f(own);
        free(own);
        out
    })
    .join()
    .unwrap()
}

/// Runs `f` as [`as_guest`] does, with a block of the owners' pool from a
/// slab other than the guest's, its slab, and the pushes onto that slab's
/// shared list of the class so far.
fn as_guest_with_a_block<T: Send + 'static>(
    owners: &mut Owners,
    f: impl FnOnce(usize, usize, u64) -> T + Send + 'static,
) -> T {
    let mut blocks = std::mem::take(&mut owners.blocks);
    as_guest(move |_| {
        let p = take(&mut blocks);
        let origin = layout::slab_of(p);
        f(p, origin, hooks::list_usage(origin, sc()).shared_frees)
    })
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "16 owners need threads Miri runs slowly")]
fn a_guest_hands_out_again_the_slot_it_freed_last() {
    let mut owners = Owners::new();
    let sc = sc();
    let (p, pushes, pushed, again) =
        as_guest_with_a_block(&mut owners, move |p, origin, pushes| {
            check_and_free(p, origin as u64);
            let pushed = hooks::list_usage(origin, sc).shared_frees;
            let again = alloc();
            // Freed again at once: home (a thread cycling on one block of
            // another slab must not keep it).
            free(again);
            (p, pushes, pushed, again)
        });
    assert_eq!(again, p, "the slot the guest freed last");
    assert_eq!(pushed, pushes, "held, not sent home");
    assert_eq!(
        hooks::list_usage(layout::slab_of(p), sc).shared_frees,
        pushes + 1,
        "home after its second free"
    );
    owners.end();
}

/// The pushes onto the shared lists of class `sc` of every slab.
fn all_shared_frees(sc: u32) -> u64 {
    (0..layout::THREAD_SLABS)
        .map(|slab| hooks::list_usage(slab, sc).shared_frees)
        .sum()
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "16 owners need threads Miri runs slowly")]
fn a_guest_holds_a_chain_up_to_its_depth_and_hands_it_out_last_freed_first() {
    let mut owners = Owners::new();
    let mut blocks = std::mem::take(&mut owners.blocks);
    let (sc, depth) = (sc(), hooks::HELD_DEPTH);
    let before = smalloc::stats::snapshot();
    let (freed, got, pushed, counted) = as_guest(move |_| {
        // An allocation of the class: a credit to hold more than one.
        let credit = alloc();
        let freed: Vec<usize> = (0..=depth).map(|_| take(&mut blocks)).collect();
        let pushes = all_shared_frees(sc);
        let held_before = smalloc::stats::snapshot().classes[sc as usize].free_private;
        for &p in &freed {
            check_and_free(p, layout::slab_of(p) as u64);
        }
        let pushed = all_shared_frees(sc) - pushes;
        let counted = smalloc::stats::snapshot().classes[sc as usize].free_private - held_before;
        let got: Vec<usize> = (0..depth).map(|_| alloc()).collect();
        for &p in &got {
            free(p);
        }
        free(credit);
        (freed, got, pushed, counted)
    });
    let held: Vec<usize> = freed[..depth].iter().rev().copied().collect();
    assert_eq!(got, held, "the chain, last freed first");
    assert_eq!(pushed, 1, "only the block past the depth went home");
    assert_eq!(counted, depth as u64, "the statistics count the chain");
    let after = smalloc::stats::snapshot();
    assert_eq!(
        after.classes[sc as usize].free_private, before.classes[sc as usize].free_private,
        "the chain went home at the guest's end"
    );
    assert_eq!(
        after.classes[sc as usize].live(),
        before.classes[sc as usize].live() - (depth as u64 + 1),
        "every block it freed is on a list: none lost"
    );
    owners.end();
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "16 owners need threads Miri runs slowly")]
fn the_statistics_count_a_guests_slot_as_free_and_it_goes_home_at_its_end() {
    let mut owners = Owners::new();
    let sc = sc();
    let (origin, pushes, before, after) =
        as_guest_with_a_block(&mut owners, move |p, origin, pushes| {
            let before = smalloc::stats::snapshot();
            check_and_free(p, origin as u64);
            (origin, pushes, before, smalloc::stats::snapshot())
        });
    let (b, a) = (&before.classes[sc as usize], &after.classes[sc as usize]);
    assert_eq!(a.handed_out, b.handed_out);
    assert_eq!(a.free_private, b.free_private + 1, "held: free");
    assert_eq!(a.free_shared, b.free_shared, "not sent home yet");
    assert_eq!(
        after.slabs[origin].free_bytes,
        before.slabs[origin].free_bytes + layout::slot_size(sc) as u64,
        "counted with the slab it belongs to"
    );
    // The guest ended: its slot is on its slab's shared list.
    assert_eq!(hooks::list_usage(origin, sc).shared_frees, pushes + 1);
    let end = smalloc::stats::snapshot();
    assert_eq!(end.classes[sc as usize].free_private, b.free_private);
    // It and the guest's own block (sent home: the cell was full).
    assert_eq!(end.classes[sc as usize].free_shared, b.free_shared + 2);
    owners.end();
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "16 owners need threads Miri runs slowly")]
fn a_trim_on_another_thread_sends_a_guests_slot_home() {
    let mut owners = Owners::new();
    let mut blocks = std::mem::take(&mut owners.blocks);
    let sc = sc();
    let (held_tx, held_rx) = mpsc::channel();
    let (trimmed_tx, trimmed_rx) = mpsc::channel::<()>();
    let guest = thread::spawn(move || {
        let own = alloc();
        assert_eq!(hooks::owned_slab(), None);
        let p = take(&mut blocks);
        check_and_free(p, layout::slab_of(p) as u64);
        held_tx.send(p).unwrap();
        trimmed_rx.recv().unwrap();
        // Its cell is empty: a slot from the shared lists, not `p` from
        // the cell (its own slab is not `p`'s, whose shared list has it).
        let next = alloc();
        free(next);
        free(own);
        next
    });
    let p = held_rx.recv().unwrap();
    let origin = layout::slab_of(p);
    let before = hooks::list_usage(origin, sc).free;
    smalloc::stats::trim(0);
    assert_eq!(
        hooks::list_usage(origin, sc).free,
        before + 1,
        "on its own slab's lists"
    );
    trimmed_tx.send(()).unwrap();
    let next = guest.join().unwrap();
    assert_ne!(next, p, "taken from the guest by the trim");
    owners.end();
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot fork")]
#[cfg_attr(
    smalloc_tsan,
    ignore = "ThreadSanitizer does not support threads after a multi-threaded fork"
)]
fn a_fork_child_empties_the_cells_of_the_parents_other_guests() {
    let mut owners = Owners::new();
    let (p, q, r) = (
        take(&mut owners.blocks),
        take(&mut owners.blocks),
        take(&mut owners.blocks),
    );
    let sc = sc();
    // Another guest holds a chain, `q` then `r`, while this one forks.
    let (held_tx, held_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let other = thread::spawn(move || {
        let own = alloc();
        assert_eq!(hooks::owned_slab(), None);
        // A second allocation of the class: a credit to chain.
        let credit = alloc();
        check_and_free(q, layout::slab_of(q) as u64);
        check_and_free(r, layout::slab_of(r) as u64);
        held_tx.send(()).unwrap();
        done_rx.recv().unwrap();
        free(credit);
        free(own);
    });
    held_rx.recv().unwrap();
    as_guest(move |own| {
        check_and_free(p, layout::slab_of(p) as u64);
        let free_of = |x: usize| hooks::list_usage(layout::slab_of(x), sc).free;
        let (q_free, r_free) = (free_of(q), free_of(r));
        let held = !cfg!(feature = "secure");
        devutils::fork::child_allocates(&A, l(), own, held.then_some(p), || {
            if held {
                assert_eq!(
                    free_of(q),
                    q_free + 1,
                    "the other guest's first slot went home"
                );
                assert_eq!(free_of(r), r_free + 1, "and the rest of its chain");
            }
        });
    });
    done_tx.send(()).unwrap();
    other.join().unwrap();
    owners.end();
}
