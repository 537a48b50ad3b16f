//! Slab exhaustion: a thread whose slab runs out of a size class gets its
//! slots from another slab of the same size class, keeping the slab it owns
//! for everything else; when every slab of the size class is empty it gets
//! slots of the next larger size class; when no slot is left, a mapping of
//! its own.

use std::alloc::{GlobalAlloc, Layout};

use smalloc::Smalloc;
use smalloc::layout::{MAX_SC, MAX_SLOT_SIZE, THREAD_SLABS, num_slots, sc_of, slab_of, slot_size};

static A: Smalloc = Smalloc::new();

#[test]
fn exhaustion_fails_over_to_other_slabs_then_the_next_size_class() {
    // The class below the largest (1 GiB): four slots per slab, and
    // allocating them touches nothing.
    let sc = MAX_SC - 1;
    let per_slab = num_slots(sc) as usize;
    let size = slot_size(sc);
    let l = Layout::from_size_align(size, 1).unwrap();
    let mut got = Vec::new();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let first = unsafe { A.alloc(l) };
    let home = slab_of(first.addr());
    got.push(first);
    for _ in 1..per_slab {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        got.push(unsafe { A.alloc(l) });
    }
    assert!(
        got.iter()
            .all(|p| slab_of(p.addr()) == home && sc_of(p.addr()) == sc)
    );

    // The home slab is empty: the next slot comes from another slab ...
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let moved = unsafe { A.alloc(l) };
    assert_ne!(slab_of(moved.addr()), home);
    assert_eq!(sc_of(moved.addr()), sc);
    got.push(moved);
    // ... which the statistics (and the sweeps) now read as a used slab,
    // though no thread lives there (a snapshot reads residency with
    // `mincore`, which Miri does not have).
    if !cfg!(miri) {
        let snap = smalloc::stats::snapshot();
        assert_eq!(
            snap.classes[sc as usize].handed_out,
            got.len() as u64,
            "the other slab's slot counted"
        );
    }
    // ... while the thread keeps the slab it owns for other size classes
    // (and its frees of them).
    let small = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let s = unsafe { A.alloc(small) };
    assert_eq!(slab_of(s.addr()), home);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(s, small) };
    // SAFETY: a non-zero layout.
    let again = unsafe { A.alloc(small) };
    assert_eq!(again, s, "freed to its own private list");

    // Use up every slab of this size class.
    while got.len() < per_slab * THREAD_SLABS {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let p = unsafe { A.alloc(l) };
        assert_eq!(sc_of(p.addr()), sc, "after {} slots", got.len());
        got.push(p);
    }
    let mut seen = got.iter().map(|p| p.addr()).collect::<Vec<_>>();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), got.len(), "a slot was handed out twice");

    // Every slab is empty: the next larger size class serves the request.
    let mut bigger = Vec::new();
    let top = num_slots(MAX_SC) as usize * THREAD_SLABS;
    for _ in 0..top {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let p = unsafe { A.alloc(l) };
        assert!(!p.is_null());
        assert_eq!(sc_of(p.addr()), MAX_SC);
        bigger.push(p);
    }
    // No slot left at all: a mapping of its own (as a block above the
    // largest slot gets), usable, not a crash or null.
    let top_l = Layout::from_size_align(MAX_SLOT_SIZE, 1).unwrap();
    for l in [l, top_l] {
        // SAFETY: a non-zero layout; the block is written inside its size
        // and freed with its layout.
        unsafe {
            let m = A.alloc(l);
            assert!(!m.is_null() && !A.owns_slot(m), "{l:?}");
            m.write(1);
            m.add(l.size() - 1).write(2);
            assert_eq!((m.read(), m.add(l.size() - 1).read()), (1, 2));
            A.dealloc(m, l);
        }
    }
    // A mapping that shrinks to a size only used-up slots serve stays a
    // mapping, shrunk, with its contents.
    let over = Layout::from_size_align(MAX_SLOT_SIZE + 4096, 1).unwrap();
    // SAFETY: a non-zero layout; the block is written inside its sizes and
    // freed with the layout of its last size.
    unsafe {
        let m = A.alloc(over);
        assert!(!m.is_null() && !A.owns_slot(m));
        m.write(3);
        m.add(size - 1).write(4);
        let q = A.realloc(m, over, size);
        assert!(!q.is_null() && !A.owns_slot(q), "shrunk to a used-up class");
        assert_eq!((q.read(), q.add(size - 1).read()), (3, 4));
        A.dealloc(q, l);
    }

    // Touch a few of them for real: first and last byte.
    for &p in got.iter().step_by(37).chain(bigger.iter().step_by(29)) {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe {
            p.write(0xa5);
            p.add(size - 1).write(0x5a);
            assert_eq!((p.read(), p.add(size - 1).read()), (0xa5, 0x5a));
        }
    }

    // Freeing one slot makes it available again (to a thread on any slab).
    let back = got.pop().unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(back, l) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { A.alloc(l) }, back);
}

#[test]
#[cfg_attr(miri, ignore = "half a million allocations: too slow under Miri")]
fn a_small_size_class_runs_out_on_the_hot_path_and_fails_over() {
    // 56 KiB slots: the largest size class of the hot path, with the
    // fewest slots per region (74,898). Allocating them touches nothing.
    // The hot path notices the end of the region with the same test that
    // notices new memory; the allocation after the last slot must come
    // from another slab, not from past the region's end.
    let sc = smalloc::layout::LARGE_SC - 1;
    let n = num_slots(sc) as usize;
    let size = slot_size(sc);
    let l = Layout::from_size_align(size, 8).unwrap();
    // SAFETY: a non-zero layout.
    let first = unsafe { A.alloc(l) };
    let home = slab_of(first.addr());
    let mut last = first;
    for i in 1..n {
        // SAFETY: as above.
        let p = unsafe { A.alloc(l) };
        assert_eq!(slab_of(p.addr()), home, "slot {i} left home early");
        assert_eq!(smalloc::layout::slot_of(p.addr(), sc) as usize, i);
        last = p;
    }
    // SAFETY: as above.
    let next = unsafe { A.alloc(l) };
    assert!(!next.is_null());
    assert_ne!(slab_of(next.addr()), home);
    assert_eq!(sc_of(next.addr()), sc);
    // Both ends of the home region hold writable, distinct slots.
    // SAFETY: live blocks of `size` bytes.
    unsafe {
        first.write(1);
        last.add(size - 1).write(2);
        next.write(3);
        assert_eq!(
            (first.read(), last.add(size - 1).read(), next.read()),
            (1, 2, 3)
        );
    }
}
