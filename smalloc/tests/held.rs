//! Held slots: an owner whose supply of a small size class ran dry keeps
//! the last slot of another slab it frees of that class and hands it out
//! again at its next allocation of it; what it held goes home when it
//! holds another, at its hand-overs and when it ends.

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

/// A block of another thread's slab, filled with `tag`, and one of our own
/// (our first allocation of the class: our private list of it is dry, so
/// from then on we hold what we free of it). The other thread stays alive
/// (owning its slab, and a second block of the class, so that no sweep
/// resets the region) until [`Scene::end`].
struct Scene {
    theirs: usize,
    mine: usize,
    stop: mpsc::Sender<()>,
    t: thread::JoinHandle<()>,
}

impl Scene {
    fn new(tag: u64) -> Scene {
        let (to_me, from_it) = mpsc::channel();
        let (stop, stopped) = mpsc::channel::<()>();
        let t = thread::spawn(move || {
            let p = alloc();
            let keep = alloc();
            // SAFETY: a live block of SIZE bytes.
            unsafe { fill(std::ptr::with_exposed_provenance_mut(p), SIZE, tag) };
            to_me.send(p).unwrap();
            let _ = stopped.recv();
            free(keep);
        });
        let theirs = from_it.recv().unwrap();
        Scene {
            theirs,
            mine: alloc(),
            stop,
            t,
        }
    }

    /// Frees our block and lets the other thread end.
    fn end(self) {
        free(self.mine);
        drop(self.stop);
        self.t.join().unwrap();
    }
}

/// Frees `p` (whole, `tag`), after checking it.
fn check_and_free(p: usize, tag: u64) {
    // SAFETY: a live block of SIZE bytes filled with `tag`.
    let ok = unsafe { check(std::ptr::with_exposed_provenance_mut(p), SIZE, tag) };
    assert_eq!(ok, Ok(()), "block {p:#x} corrupted");
    free(p);
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "slabs of their own need threads Miri runs slowly")]
fn an_owner_hands_out_again_the_slot_of_another_slab_it_freed_last() {
    let scene = Scene::new(7);
    let theirs = scene.theirs;
    let slab = hooks::owned_slab().unwrap();
    assert_ne!(layout::slab_of(theirs), slab, "another slab's block");
    check_and_free(theirs, 7);
    // Our private list of the class is empty: the held slot comes first.
    let again = alloc();
    assert_eq!(again, theirs, "the slot we freed last, not new memory");
    free(again);
    scene.end();
}

/// `n` blocks of another thread's slab, each filled with its index, and
/// one of our own, as [`Scene`] sets them up; the other thread lives until
/// the returned sender is dropped.
fn theirs_and_mine(n: usize) -> (Vec<usize>, usize, mpsc::Sender<()>, thread::JoinHandle<()>) {
    let (to_me, from_it) = mpsc::channel();
    let (stop, stopped) = mpsc::channel::<()>();
    let t = thread::spawn(move || {
        let blocks: Vec<usize> = (0..n).map(|_| alloc()).collect();
        let keep = alloc();
        for (i, &p) in blocks.iter().enumerate() {
            // SAFETY: a live block of SIZE bytes.
            unsafe { fill(std::ptr::with_exposed_provenance_mut(p), SIZE, i as u64) };
        }
        to_me.send(blocks).unwrap();
        let _ = stopped.recv();
        free(keep);
    });
    let theirs = from_it.recv().unwrap();
    (theirs, alloc(), stop, t)
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "slabs of their own need threads Miri runs slowly")]
fn an_owner_holds_up_to_its_depth_and_hands_them_out_last_freed_first() {
    let depth = hooks::HELD_DEPTH;
    let (theirs, mine, stop, t) = theirs_and_mine(depth + 2);
    let origin = layout::slab_of(theirs[0]);
    assert_ne!(Some(origin), hooks::owned_slab(), "another slab's blocks");
    let sc = layout::size_class(SIZE, 8);
    let pushes = hooks::list_usage(origin, sc).shared_frees;
    let before = smalloc::stats::snapshot();
    for (i, &p) in theirs.iter().enumerate() {
        check_and_free(p, i as u64);
    }
    assert_eq!(
        hooks::list_usage(origin, sc).shared_frees,
        pushes + 2,
        "past the depth, home"
    );
    let after = smalloc::stats::snapshot();
    assert_eq!(
        after.classes[sc as usize].free_private,
        before.classes[sc as usize].free_private + depth as u64,
        "every held slot counted"
    );
    assert_eq!(
        after.slabs[origin].free_bytes,
        before.slabs[origin].free_bytes + ((depth + 2) * layout::slot_size(sc)) as u64,
        "with the slab they belong to"
    );
    // Our private list of the class is empty: the held slots come first.
    let again: Vec<usize> = (0..depth).map(|_| alloc()).collect();
    let held: Vec<usize> = theirs[..depth].iter().rev().copied().collect();
    assert_eq!(again, held, "the slots we held, the last freed first");
    assert_eq!(
        hooks::list_usage(origin, sc).shared_frees,
        pushes + 2,
        "none sent home"
    );
    for p in again {
        free(p);
    }
    free(mine);
    drop(stop);
    t.join().unwrap();
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "slabs of their own need threads Miri runs slowly")]
fn the_statistics_count_a_held_slot_as_free() {
    let scene = Scene::new(8);
    let theirs = scene.theirs;
    let sc = layout::size_class(SIZE, 8);
    let before = smalloc::stats::snapshot();
    check_and_free(theirs, 8);
    let after = smalloc::stats::snapshot();
    let (b, a) = (&before.classes[sc as usize], &after.classes[sc as usize]);
    assert_eq!(a.handed_out, b.handed_out);
    assert_eq!(
        a.free_private,
        b.free_private + 1,
        "held: free, on our side"
    );
    assert_eq!(a.free_shared, b.free_shared, "not sent home yet");
    let origin = layout::slab_of(theirs);
    assert_eq!(
        after.slabs[origin].free_bytes,
        before.slabs[origin].free_bytes + layout::slot_size(sc) as u64,
        "counted with the slab it belongs to"
    );
    scene.end();
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "slabs of their own need threads Miri runs slowly")]
fn the_slots_a_thread_holds_go_home_when_it_ends() {
    // We own a slab and allocate the block; a thread frees it and ends.
    free(alloc());
    let slab = hooks::owned_slab().unwrap();
    let p = alloc();
    // SAFETY: a live block of SIZE bytes.
    unsafe { fill(std::ptr::with_exposed_provenance_mut(p), SIZE, 9) };
    let sc = layout::size_class(SIZE, 8);
    let pushes = hooks::list_usage(slab, sc).shared_frees;
    let held_there = thread::spawn(move || {
        let own = alloc();
        check_and_free(p, 9);
        let held =
            smalloc::stats::snapshot().classes[layout::size_class(SIZE, 8) as usize].free_private;
        free(own);
        held
    })
    .join()
    .unwrap();
    assert!(held_there >= 1);
    // Home now: pushed onto our shared list of the class, and our next
    // allocation (private list empty) takes that list whole.
    assert_eq!(
        hooks::list_usage(slab, sc).shared_frees,
        pushes + 1,
        "sent home"
    );
    let again = alloc();
    assert_eq!(again, p, "the slot came back to its own slab");
    free(again);
}

#[test]
#[cfg_attr(miri, ignore = "Miri cannot fork")]
#[cfg_attr(
    smalloc_tsan,
    ignore = "ThreadSanitizer does not support threads after a multi-threaded fork"
)]
fn a_fork_child_of_a_thread_that_holds_a_slot_loses_and_doubles_nothing() {
    let scene = Scene::new(10);
    let (theirs, mine) = (scene.theirs, scene.mine);
    check_and_free(theirs, 10);
    let first = (!cfg!(feature = "secure")).then_some(theirs);
    devutils::fork::child_allocates(&A, l(), mine, first, || {});
    scene.end();
}

#[test]
#[cfg_attr(feature = "secure", ignore = "the secure mode holds nothing")]
#[cfg_attr(miri, ignore = "slabs of their own need threads Miri runs slowly")]
fn a_trim_sends_held_slots_home() {
    let depth = hooks::HELD_DEPTH;
    let (theirs, mine, stop, t) = theirs_and_mine(depth);
    let origin = layout::slab_of(theirs[0]);
    let sc = layout::size_class(SIZE, 8);
    for (i, &p) in theirs.iter().enumerate() {
        check_and_free(p, i as u64);
    }
    let before = hooks::list_usage(origin, sc).free;
    smalloc::stats::trim(0);
    assert_eq!(
        hooks::list_usage(origin, sc).free,
        before + depth as u64,
        "on its own slab's lists"
    );
    free(mine);
    drop(stop);
    t.join().unwrap();
}
