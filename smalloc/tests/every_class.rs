//! alloc, dealloc, realloc and alloc_zeroed across every size class, with
//! every alignment from 1 to the largest slot, contents verified with fill
//! patterns.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check_sparse, fill_sparse, is_zero};
use smalloc::Smalloc;
use smalloc::layout::{MAX_SC, MAX_SLOT_SIZE, MIN_SC, sc_of, slot_size};

static A: Smalloc = Smalloc::new();

/// Sizes around every slot size up to the largest slot.
fn sizes() -> Vec<usize> {
    let mut v = vec![1, 2, 3];
    for sc in MIN_SC..=MAX_SC {
        let s = slot_size(sc);
        v.extend([s - 1, s, s + 1]);
    }
    v.retain(|&s| s <= MAX_SLOT_SIZE);
    v.dedup();
    v
}

#[test]
fn alloc_fill_check_free_every_size_and_alignment() {
    let mut tag = 0;
    let top = MAX_SLOT_SIZE.ilog2();
    for size in sizes() {
        for align_bits in 0..=top {
            let align = 1usize << align_bits;
            // Keep the test's own work bounded: the largest alignments only
            // with small sizes and vice versa (both still hit the top class).
            if size > 1 << 24 && align > 4096 && align_bits != top {
                continue;
            }
            // Miri interprets every instruction: every fifth alignment.
            if cfg!(miri) && align_bits % 5 != 0 && align_bits != top {
                continue;
            }
            let l = Layout::from_size_align(size, align).unwrap();
            tag += 1;
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            let p = unsafe { A.alloc(l) };
            assert!(!p.is_null(), "size {size} align {align}");
            assert_eq!(p.addr() % align, 0, "size {size} align {align}");
            assert!(A.owns_slot(p), "{l:?} at {p:?}");
            // The slot holds the block (whatever class held it: a large one
            // may borrow a larger class's freed slot).
            assert!(slot_size(sc_of(p.addr())) >= size.max(align));
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            assert!(unsafe { A.usable_size(p, l) } >= size);
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            unsafe { fill_sparse(p, size, tag) };
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            assert_eq!(unsafe { check_sparse(p, size, tag) }, Ok(()));
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            unsafe { A.dealloc(p, l) };
        }
    }
}

#[test]
fn many_live_blocks_of_every_class_keep_their_contents() {
    let mut live = Vec::new();
    let mut tag = 1000;
    // Nothing is freed before the end, so every request gets its own class.
    let mut reached = [false; 256];
    for size in sizes() {
        for _ in 0..3 {
            let l = Layout::from_size_align(size, 8.min(size.next_power_of_two())).unwrap();
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            let p = unsafe { A.alloc(l) };
            assert!(!p.is_null());
            let sc = sc_of(p.addr());
            assert_eq!(sc, smalloc::layout::size_class(size, l.align()), "{l:?}");
            reached[sc as usize] = true;
            tag += 1;
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            unsafe { fill_sparse(p, size, tag) };
            live.push((p, l, tag));
        }
    }
    for sc in MIN_SC..=MAX_SC {
        let size = slot_size(sc);
        assert!(
            reached[sc as usize],
            "size class {sc} ({size} bytes) never reached"
        );
    }
    for &(p, l, tag) in &live {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { check_sparse(p, l.size(), tag) }, Ok(()), "{l:?}");
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { A.dealloc(p, l) };
    }
}

#[test]
fn realloc_keeps_contents_across_every_class() {
    let l = Layout::from_size_align(1, 1).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let mut p = unsafe { A.alloc(l) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill_sparse(p, 1, 7) };
    let mut size = 1;
    for sc in MIN_SC..=MAX_SC {
        let new = slot_size(sc) - 3;
        if new <= size {
            continue;
        }
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.realloc(p, Layout::from_size_align(size, 1).unwrap(), new) };
        assert!(!q.is_null());
        assert_eq!(
            // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
            unsafe { check_sparse(q, size.min(64), 7) },
            Ok(()),
            "to {new}"
        );
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { fill_sparse(q, new, 7) };
        p = q;
        size = new;
    }
    // And back down again: in place, except out of slots of 1 MiB and
    // more once the block needs an eighth of its slot or less.
    while size > 1 {
        let new = size / 5 + 1;
        let cur_sc = smalloc::layout::sc_of(p.addr());
        let moves = smalloc::grow::moves_on_shrink(cur_sc, smalloc::layout::size_class(new, 1));
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.realloc(p, Layout::from_size_align(size, 1).unwrap(), new) };
        assert_eq!(q != p, moves, "{size} -> {new} in a slot of class {cur_sc}");
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { check_sparse(q, new.min(64), 7) }, Ok(()));
        p = q;
        size = new;
    }
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(p, Layout::from_size_align(size, 1).unwrap()) };
}

#[test]
fn alloc_zeroed_is_zero_fresh_and_reused() {
    // Up to 1 MiB, all slots (under Miri's small geometry, the slots only:
    // the test relies on LIFO reuse).
    for sc in (MIN_SC..=MAX_SC).filter(|&sc| slot_size(sc) <= 1 << 20) {
        let size = slot_size(sc);
        let l = Layout::from_size_align(size, 1).unwrap();
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let p = unsafe { A.alloc_zeroed(l) };
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert!(unsafe { is_zero(p, size) }, "fresh, size {size}");
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { fill_sparse(p, size, 3) };
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { A.dealloc(p, l) };
        // LIFO: the same slot comes back, dirty; alloc_zeroed must clear it.
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.alloc_zeroed(l) };
        assert_eq!(q, p);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert!(unsafe { is_zero(q, size) }, "reused, size {size}");
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { A.dealloc(q, l) };
    }
}
