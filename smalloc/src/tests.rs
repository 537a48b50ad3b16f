//! Unit tests of the layout arithmetic and the free list. The harness uses
//! the system allocator; these tests call smalloc directly. Under nextest
//! each test runs in its own process, so smalloc's state starts fresh.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::vec::Vec;

use crate::free_list::{self, LinkStore, Pop, USED};
use crate::layout::*;
use crate::{Smalloc, region};

/// A base address with the required alignment, for pure arithmetic.
const FAKE_BASE: usize = 5 << TOTAL_BITS;

#[test]
fn layout_round_trips_for_every_size_class_and_slab() {
    for sc in MIN_SC..=MAX_SC {
        let n = num_slots(sc);
        for slab in 0..NUM_SLABS {
            for slot in [0, 1, n / 2, n - 2, n - 1] {
                let a = slot_addr(FAKE_BASE, slab, sc, slot);
                assert_eq!(base_of(a), FAKE_BASE);
                assert_eq!(sc_of(a), sc, "sc {sc} slab {slab} slot {slot}");
                assert_eq!(slab_of(a), slab);
                assert_eq!(slot_of(a, sc), slot);
                assert_eq!(a % (1 << sc), 0, "slot not naturally aligned");
                assert_eq!(flh_addr_of(a), flh_addr(FAKE_BASE, slab, sc));
                // The last byte of the slot maps to the same slot.
                let last = a + (1 << sc) - 1;
                assert_eq!(
                    (sc_of(last), slab_of(last), slot_of(last, sc)),
                    (sc, slab, slot)
                );
                assert_eq!(flh_addr_of(last), flh_addr(FAKE_BASE, slab, sc));
            }
            // The whole region stays inside its (slab, sc) field.
            let end = slot_addr(FAKE_BASE, slab, sc, n - 1) + (1 << sc);
            assert!(end <= FAKE_BASE + region_offset(slab, sc) + (1 << REGION_BITS));
        }
    }
}

#[test]
fn flhs_live_where_no_slot_is() {
    let lowest_slot = region_offset(0, MIN_SC);
    for slab in 0..NUM_SLABS {
        for sc in MIN_SC..=MAX_SC {
            let f = flh_addr(FAKE_BASE, slab, sc) - FAKE_BASE;
            // Inside the size-class-0 region of its slab, one cache line each.
            assert_eq!(f >> SLAB_SHIFT, slab);
            assert!(f & ((1 << SLAB_SHIFT) - 1) < lowest_slot);
            assert_eq!(f % 64, 0);
        }
    }
}

#[test]
fn size_class_of_sizes_and_alignments() {
    let cases: &[(usize, usize, u32)] = &[
        (1, 1, 2),
        (4, 4, 2),
        (5, 1, 3),
        (8, 8, 3),
        (9, 1, 4),
        (16, 16, 4),
        (17, 1, 5),
        (1, 16, 4),
        (1, 4096, 12),
        (4097, 4096, 13),
        (100, 1 << 20, 20),
        (1 << 31, 1, 31),
        ((1 << 31) + 1, 1, 32),
        (1, 1 << 31, 31),
        (1, 1 << 32, 32),
        (usize::MAX / 2, 1, 63),
    ];
    for &(size, align, sc) in cases {
        assert_eq!(size_class(size, align), sc, "size {size} align {align}");
    }
}

#[test]
#[cfg(not(any(miri, smalloc_tsan)))]
fn slot_counts() {
    assert_eq!(num_slots(2), 1 << 30);
    assert_eq!(num_slots(4), 1 << 30);
    assert_eq!(num_slots(5), 1 << 29);
    assert_eq!(num_slots(31), 8);
    assert_eq!(TOTAL_SIZE, 1 << 43);
}

#[test]
#[cfg(miri)]
fn slot_counts() {
    // The small geometry Miri runs with (see layout.rs).
    assert_eq!(num_slots(2), 1 << 16);
    assert_eq!(num_slots(15), 8);
    assert_eq!(TOTAL_SIZE, 1 << 27);
}

#[test]
fn growers() {
    let want: &[(u32, u32)] = &[
        (2, 6),
        (6, 6),
        (7, 7),
        (8, 12),
        (12, 12),
        (13, 14),
        (15, 16),
        (17, 18),
        (19, 21),
        (21, 21),
        (22, 22),
        (31, 31),
    ];
    // Under Miri's small geometry the growers above MAX_SC do not exist.
    for &(sc, g) in want.iter().filter(|&&(_, g)| g <= MAX_SC) {
        assert_eq!(grower_sc(sc), g, "sc {sc}");
    }
}

/// Links in an array, for free-list tests without the reservation.
struct ArrayLinks(Vec<AtomicU32>);

impl ArrayLinks {
    fn new(n: usize) -> Self {
        ArrayLinks((0..n).map(|_| AtomicU32::new(0)).collect())
    }
}

impl LinkStore for ArrayLinks {
    unsafe fn load_link(&self, slot: u32) -> u32 {
        self.0[slot as usize].load(Ordering::Relaxed)
    }
}

#[test]
fn zero_word_is_a_full_list_in_order() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(5);
    for i in 0..5 {
        assert_eq!(
            free_list::pop(&flh, &links, 5),
            Pop::Slot {
                slot: i,
                fresh: true
            }
        );
    }
    assert_eq!(free_list::pop(&flh, &links, 5), Pop::Empty);
    // Nothing was written into the never-used slots.
    assert!(links.0.iter().all(|l| l.load(Ordering::Relaxed) == 0));
}

#[test]
fn push_then_pop_is_lifo_and_mixes_with_the_fresh_tail() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(4);
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 0,
            fresh: true
        }
    );
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 1,
            fresh: true
        }
    );
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        free_list::push(&flh, &links.0[0], 0);
        free_list::push(&flh, &links.0[1], 1);
    }
    assert_eq!(
        flh.load(Ordering::Relaxed) >> 32,
        2,
        "two pushes, counter 2"
    );
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 1,
            fresh: false
        }
    );
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 0,
            fresh: false
        }
    );
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 2,
            fresh: true
        }
    );
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 3,
            fresh: true
        }
    );
    assert_eq!(free_list::pop(&flh, &links, 4), Pop::Empty);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { free_list::push(&flh, &links.0[2], 2) };
    assert_eq!(
        free_list::pop(&flh, &links, 4),
        Pop::Slot {
            slot: 2,
            fresh: false
        }
    );
    assert_eq!(free_list::pop(&flh, &links, 4), Pop::Empty);
}

#[test]
fn stale_head_after_aba_fails_its_cas() {
    // Replay the ABA sequence by hand: a popper reads head A, then others
    // pop A, pop B and push A back. The stale popper's CAS must fail.
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(8);
    let stale = flh.load(Ordering::Acquire);
    assert_eq!(stale as u32 & USED, 0);
    assert!(matches!(
        free_list::pop(&flh, &links, 8),
        Pop::Slot { slot: 0, .. }
    ));
    assert!(matches!(
        free_list::pop(&flh, &links, 8),
        Pop::Slot { slot: 1, .. }
    ));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { free_list::push(&flh, &links.0[0], 0) };
    let now = flh.load(Ordering::Relaxed);
    assert_eq!(now as u32 & 0x7fff_ffff, 0, "slot 0 is the head again");
    assert_eq!(now >> 32, 1, "but the push counter moved");
    let stale_new = stale & !0xffff_ffff | 1;
    assert!(
        flh.compare_exchange(stale, stale_new, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
    );
}

#[test]
fn fresh_slab_yields_slots_in_order() {
    let a = Smalloc::new();
    let l = Layout::from_size_align(48, 8).unwrap(); // size class 6
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let ps: Vec<usize> = (0..100).map(|_| unsafe { a.alloc(l) }.addr()).collect();
    let base = region::base_raw();
    assert!(region::is_ready(base));
    let slab = slab_of(ps[0]);
    for (i, &p) in ps.iter().enumerate() {
        assert_eq!(p, slot_addr(base, slab, 6, i as u32), "allocation {i}");
    }
    // Freed slots come back last-in first-out.
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        a.dealloc(ps[10] as *mut u8, l);
        a.dealloc(ps[20] as *mut u8, l);
    }
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { a.alloc(l) }.addr(), ps[20]);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { a.alloc(l) }.addr(), ps[10]);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { a.alloc(l) }.addr(), slot_addr(base, slab, 6, 100));
}

#[test]
fn smallest_slots_pack_tightly() {
    let a = Smalloc::new();
    let l4 = Layout::from_size_align(4, 4).unwrap();
    let l8 = Layout::from_size_align(8, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { a.alloc(l4) }.addr();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let q = unsafe { a.alloc(l4) }.addr();
    assert_eq!(q - p, 4);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let r = unsafe { a.alloc(l8) }.addr();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let s = unsafe { a.alloc(l8) }.addr();
    assert_eq!(s - r, 8);
    assert_eq!(sc_of(p), 2);
    assert_eq!(sc_of(r), 3);
}

#[test]
fn collisions_are_told_apart_by_the_push_counter() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(8);
    // A pop collided with another thread's pop: the counter did not move.
    let before = flh.load(Ordering::Relaxed);
    assert!(matches!(
        free_list::pop(&flh, &links, 8),
        Pop::Slot { slot: 0, .. }
    ));
    let popped = Pop::Collision {
        expected: before,
        observed: flh.load(Ordering::Relaxed),
    };
    assert!(
        !popped.is_push_collision(),
        "a pop is contention: fail over"
    );
    // A pop collided with a free into this list: the counter moved.
    let before = flh.load(Ordering::Relaxed);
    // SAFETY: slot 0 was popped above and is ours; its link cell is links.0[0].
    unsafe { free_list::push(&flh, &links.0[0], 0) };
    let pushed = Pop::Collision {
        expected: before,
        observed: flh.load(Ordering::Relaxed),
    };
    assert!(
        pushed.is_push_collision(),
        "a free is no contention: stay home"
    );
    assert!(!Pop::Empty.is_push_collision());
}

#[test]
fn the_large_slot_tests_agree_with_size_class() {
    // needs_large (the front ends' one-test dispatch) must say exactly
    // "size class >= LARGE_SC": an off-by-one sends 2^(LARGE_SC) - byte
    // requests down the hot path, which never handles large slots.
    let mut sizes: Vec<usize> = (1..=600).collect();
    for k in 2..40 {
        let p = 1usize << k;
        sizes.extend([p - 1, p, p + 1]);
    }
    for &size in &sizes {
        for a in 0..20 {
            let align = 1usize << a;
            let sc = size_class(size, align);
            assert_eq!(
                needs_large(size, align),
                sc >= LARGE_SC,
                "size {size} align {align} (class {sc})"
            );
        }
    }
    assert!(needs_large(0, 1), "size 0 takes the slow path");
    // is_large (free's one-bit test) agrees with the size class of every
    // slot address.
    for sc in MIN_SC..=MAX_SC {
        for slab in [0, NUM_SLABS - 1] {
            let last = num_slots(sc) - 1;
            for slot in [0, last] {
                let addr = slot_addr(1 << TOTAL_BITS, slab, sc, slot);
                assert_eq!(is_large(addr), sc >= LARGE_SC, "class {sc}");
            }
        }
    }
}

#[test]
fn diag_counts_cold_path_events_only_with_its_feature() {
    use crate::diag::{Event, snapshot};
    let l = Layout::from_size_align(48, 8).unwrap();
    let before = snapshot();
    // A new thread's first allocation is a cold-path event.
    std::thread::spawn(move || {
        // SAFETY: a non-zero layout; the block is freed at once.
        unsafe { Smalloc.dealloc(Smalloc.alloc(l), l) }
    })
    .join()
    .unwrap();
    let after = snapshot();
    if cfg!(feature = "diag") {
        let (before, after) = (before.unwrap(), after.unwrap());
        let first = Event::FirstAlloc as usize;
        assert!(after[first] > before[first], "{before:?} -> {after:?}");
    } else {
        assert_eq!((before, after), (None, None));
    }
}

#[test]
fn the_shrink_rule_agrees_in_bytes_and_in_size_classes() {
    // The C realloc asks `shrink_leaves_slot` in bytes; core realloc asks
    // `moves_on_shrink` in size classes. They must agree for every slot and
    // every smaller size around the powers of two.
    let mut moving = 0;
    for cur_sc in MIN_SC..=MAX_SC {
        let slot = 1usize << cur_sc;
        for k in 0..=cur_sc {
            for size in [(1usize << k) - 1, 1 << k, (1 << k) + 1] {
                if size == 0 || size > slot {
                    continue;
                }
                let bytes = shrink_leaves_slot(slot, size);
                let classes = moves_on_shrink(cur_sc, size_class(size, 16));
                assert_eq!(bytes, classes, "slot 2^{cur_sc}, size {size}");
                moving += usize::from(bytes);
            }
        }
    }
    // Miri's small geometry has no slot of 1 MiB: nothing moves there.
    assert_eq!(moving > 0, MAX_SC >= SHRINK_MOVE_MIN_SC);
    assert!(!shrink_leaves_slot(1 << 19, 1));
    assert!(shrink_leaves_slot(1 << 20, 1 << 17));
    assert!(!shrink_leaves_slot(1 << 20, (1 << 17) + 1));
}
