//! Unit tests of the layout arithmetic and the free lists. The harness uses
//! the system allocator; these tests call smalloc directly. Under nextest
//! each test runs in its own process, so smalloc's state starts fresh.

use core::alloc::{GlobalAlloc, Layout};
use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::vec::Vec;

use crate::free_list::{self, LinkStore, Pop};
use crate::grow::{SHRINK_MOVE_MIN_SC, grower_sc, moves_on_shrink, shrink_leaves_slot};
use crate::layout::*;
use crate::{Smalloc, private_list};

/// A base address with the required alignment, for pure arithmetic.
const FAKE_BASE: usize = 5 << TOTAL_BITS;

#[test]
fn layout_round_trips_for_every_size_class_and_slab() {
    for sc in MIN_SC..=MAX_SC {
        let n = num_slots(sc);
        for slab in 0..NUM_SLABS {
            let region = region_addr(slab_addr(FAKE_BASE, slab), sc);
            assert_eq!(region, FAKE_BASE + region_offset(slab, sc));
            for slot in [0, 1, n / 2, n - 2, n - 1] {
                let a = slot_addr(FAKE_BASE, slab, sc, slot);
                assert_eq!(base_of(a), FAKE_BASE);
                assert_eq!(sc_of(a), sc, "sc {sc} slab {slab} slot {slot}");
                assert_eq!(slab_of(a), slab);
                assert_eq!(slot_of(a, sc), slot);
                assert_eq!(a % (1 << sc), 0, "slot not naturally aligned");
                assert_eq!(slab_addr_of(a), slab_addr(FAKE_BASE, slab));
                // The link names the slot, and is never the end marker.
                let link = link_of(a);
                assert_ne!(link, 0);
                assert_eq!(link, link_of_slot(sc, slot));
                assert_eq!(slot_of_link(region, link), a, "sc {sc} slot {slot}");
                // The last byte of the slot maps to the same slot.
                let last = a + (1 << sc) - 1;
                assert_eq!(
                    (sc_of(last), slab_of(last), slot_of(last, sc)),
                    (sc, slab, slot)
                );
            }
            // The whole region stays inside its (slab, sc) field.
            let end = slot_addr(FAKE_BASE, slab, sc, n - 1) + (1 << sc);
            assert!(end <= FAKE_BASE + region_offset(slab, sc) + (1 << REGION_BITS));
        }
    }
    // With the full geometry, any link at all decodes to an address inside
    // its region.
    let region = region_addr(slab_addr(FAKE_BASE, 3), 9);
    let links: &[u32] = if REGION_BITS == 34 {
        &[1, 2, 0x1234_5677, u32::MAX]
    } else {
        &[1, 2]
    };
    for &link in links {
        let a = slot_of_link(region, link);
        assert!(a >= region && a < region + (1 << REGION_BITS), "{link:#x}");
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
        // (The secure mode's slots start at 16 bytes.)
        assert_eq!(
            size_class(size, align),
            sc.max(MIN_SC),
            "size {size} align {align}"
        );
    }
}

#[test]
#[cfg(not(any(miri, smalloc_tsan)))]
fn slot_counts() {
    assert_eq!(num_slots(MIN_SC), 1 << 30);
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

/// Link cells in an array (link `k` is element `k - 1`), for free-list
/// tests without the reservation.
struct ArrayLinks(Vec<AtomicU32>);

impl ArrayLinks {
    fn new(n: usize) -> Self {
        ArrayLinks((0..n).map(|_| AtomicU32::new(0)).collect())
    }

    fn cell(&self, link: u32) -> &AtomicU32 {
        &self.0[link as usize - 1]
    }

    /// Pushes links `links` (in order) onto the shared list.
    fn push_all(&self, flh: &AtomicU64, links: &[u32]) {
        for &l in links {
            // SAFETY: the test owns every slot it pushes.
            unsafe { free_list::push(flh, self.cell(l), l) };
        }
    }
}

impl LinkStore for ArrayLinks {
    unsafe fn load_link(&self, link: u32) -> u32 {
        self.cell(link).load(Ordering::Relaxed)
    }
}

#[test]
fn zero_word_is_an_empty_list() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(4);
    assert_eq!(free_list::pop(&flh, &links), Pop::Empty);
    assert_eq!(free_list::take_all(&flh), 0);
    let head = AtomicU32::new(0);
    // SAFETY: the test owns the list.
    assert_eq!(unsafe { private_list::pop(&head, &links) }, None);
}

#[test]
fn shared_push_then_pop_is_lifo_and_counts_pushes() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(4);
    links.push_all(&flh, &[1, 2, 3]);
    assert_eq!(flh.load(Ordering::Relaxed) >> 32, 3, "three pushes");
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(3));
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(2));
    links.push_all(&flh, &[4]);
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(4));
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(1));
    assert_eq!(free_list::pop(&flh, &links), Pop::Empty);
    assert_eq!(
        flh.load(Ordering::Relaxed) >> 32,
        4,
        "pops keep the counter"
    );
}

#[test]
fn take_all_hands_over_the_chain_and_keeps_the_counter() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(4);
    links.push_all(&flh, &[1, 2, 3]);
    let stale = flh.load(Ordering::Relaxed);
    let first = free_list::take_all(&flh);
    assert_eq!(first, 3);
    assert_eq!(flh.load(Ordering::Relaxed), 3 << 32, "empty, counter kept");
    // The chain becomes a private list as it is.
    let head = AtomicU32::new(first);
    // SAFETY: the test owns the list.
    let order: Vec<u32> =
        std::iter::from_fn(|| unsafe { private_list::pop(&head, &links) }).collect();
    assert_eq!(order, [3, 2, 1]);
    // A pop that read the list before it was taken cannot succeed, even
    // with its head pushed back.
    links.push_all(&flh, &[3]);
    assert_eq!(flh.load(Ordering::Relaxed) as u32, stale as u32);
    assert!(
        flh.compare_exchange(
            stale,
            stale & !0xffff_ffff | 2,
            Ordering::Acquire,
            Ordering::Relaxed
        )
        .is_err()
    );
}

#[test]
fn private_push_then_pop_is_lifo() {
    let head = AtomicU32::new(0);
    let links = ArrayLinks::new(4);
    for l in [2, 4, 1] {
        // SAFETY: the test owns the list and the slots.
        unsafe { private_list::push(&head, links.cell(l), l) };
    }
    // SAFETY: the test owns the list.
    let order: Vec<u32> =
        std::iter::from_fn(|| unsafe { private_list::pop(&head, &links) }).collect();
    assert_eq!(order, [1, 4, 2]);
    assert_eq!(head.load(Ordering::Relaxed), 0);
}

#[test]
fn stale_head_after_aba_fails_its_cas() {
    // Replay the ABA sequence by hand: a popper reads head A (next B), then
    // others pop A, pop B and push A back. The stale popper's CAS must fail.
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(8);
    links.push_all(&flh, &[3, 2, 1]);
    let stale = flh.load(Ordering::Acquire);
    assert_eq!(stale as u32, 1);
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(1));
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(2));
    links.push_all(&flh, &[1]);
    let now = flh.load(Ordering::Relaxed);
    assert_eq!(now as u32, 1, "slot 1 is the head again");
    assert_eq!(now >> 32, 4, "but the push counter moved");
    let stale_new = stale & !0xffff_ffff | 2;
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
    let base = crate::geometry::base_raw();
    assert!(crate::geometry::is_ready(base));
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
#[cfg(not(feature = "secure"))]
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
#[cfg(feature = "secure")]
fn the_secure_modes_smallest_slots_hold_a_link_and_its_check() {
    let a = Smalloc::new();
    let l1 = Layout::from_size_align(1, 1).unwrap();
    // SAFETY: a non-zero layout; the blocks stay live.
    let (p, q) = unsafe { (a.alloc(l1).addr(), a.alloc(l1).addr()) };
    assert_eq!(sc_of(p), 4);
    assert_eq!(q.abs_diff(p), 16);
}

#[test]
fn collisions_are_told_apart_by_the_push_counter() {
    let flh = AtomicU64::new(0);
    let links = ArrayLinks::new(8);
    links.push_all(&flh, &[1, 2]);
    // A pop collided with another thread's pop: the counter did not move.
    let before = flh.load(Ordering::Relaxed);
    assert_eq!(free_list::pop(&flh, &links), Pop::Slot(2));
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
    links.push_all(&flh, &[2]);
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
fn counters_count_cold_path_events_only_with_their_feature() {
    use crate::counters::{Event, events};
    let l = Layout::from_size_align(48, 8).unwrap();
    let before = events();
    // A new thread's first allocation is a cold-path event.
    std::thread::spawn(move || {
        // SAFETY: a non-zero layout; the block is freed at once.
        unsafe { Smalloc.dealloc(Smalloc.alloc(l), l) }
    })
    .join()
    .unwrap();
    let after = events();
    if cfg!(feature = "counters") {
        let (before, after) = (before.unwrap(), after.unwrap());
        let first = Event::FirstAlloc as usize;
        assert!(after[first] > before[first], "{before:?} -> {after:?}");
        assert_eq!(crate::stats::snapshot().events, after);
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
