//! realloc: in place while the slot fits, growers when it does not, and out
//! of a slot of 1 MiB or more when the block shrinks to an eighth of it.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check, fill};
use smalloc::Smalloc;
use smalloc::layout::{MAX_SLOT_SIZE, sc_of, slot_size};

static A: Smalloc = Smalloc::new();

fn l(size: usize) -> Layout {
    Layout::from_size_align(size, 1).unwrap()
}

/// Checks that `q` kept the `size` bytes filled before a realloc to `new`
/// bytes, then fills all `new` with the pattern of `new`.
///
/// # Safety
/// `q` is a live block of at least `new` bytes, `size <= new`.
unsafe fn check_then_refill(q: *mut u8, size: usize, new: usize) {
    // SAFETY: per the contract.
    unsafe {
        assert_eq!(check(q, size, size as u64), Ok(()), "{size} -> {new}");
        fill(q, new, new as u64);
    }
}

#[test]
fn growth_jumps_to_the_grower_size_classes() {
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(l(10)) };
    assert_eq!(slot_size(sc_of(p.addr())), 16);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill(p, 10, 10) };
    // (new size, size of the slot it must land in)
    let steps: &[(usize, usize)] = &[
        (16, 16),             // still fits: in place
        (40, 64),             // needs 48 B: grower 64 B
        (100, 128),           // grower 128 B
        (200, 4096),          // needs 224 B: grower 4 KiB
        (3000, 4096),         // fits: in place
        (5000, 16 << 10),     // grower 16 KiB
        (20_000, 64 << 10),   // grower 64 KiB
        (100_000, 256 << 10), // grower 256 KiB
        (300_000, 2 << 20),   // grower 2 MiB
        (2_000_000, 2 << 20), // fits: in place
        (3 << 20, 4 << 20),   // past the growers: its own size class
        (9 << 20, 16 << 20),  // (powers of two above 1 MiB)
    ];
    let mut p = p;
    let mut size = 10;
    // Under Miri's small geometry, the steps that still land in a slot.
    for &(new, slot) in steps.iter().take_while(|&&(_, slot)| slot <= MAX_SLOT_SIZE) {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.realloc(p, l(size), new) };
        assert!(!q.is_null());
        assert_eq!(slot_size(sc_of(q.addr())), slot, "realloc {size} -> {new}");
        if slot_size(sc_of(p.addr())) == slot {
            assert_eq!(q, p, "{size} -> {new} fits the slot and must stay");
        }
        // SAFETY: `q` is the live block realloc returned for `new` bytes.
        unsafe { check_then_refill(q, size, new) };
        p = q;
        size = new;
    }
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(p, l(size)) };
}

#[test]
fn growth_keeps_contents() {
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let mut p = unsafe { A.alloc(l(1)) };
    let mut size = 1;
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill(p, 1, 1) };
    // Under Miri: past the largest slot (32 KiB) into big mappings, but not
    // to 5 MiB, which Miri would fill and check byte by byte for minutes.
    let top = if cfg!(miri) { 256 << 10 } else { 5 << 20 };
    while size < top {
        let new = size * 3 / 2 + 1;
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.realloc(p, l(size), new) };
        assert!(!q.is_null());
        // SAFETY: `q` is the live block realloc returned for `new` bytes.
        unsafe { check_then_refill(q, size, new) };
        p = q;
        size = new;
    }
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(p, l(size)) };
}

#[test]
#[cfg_attr(miri, ignore = "slots of 1 MiB do not exist under Miri's geometry")]
fn shrink_stays_in_place_until_an_eighth_of_a_large_slot() {
    let top = 1 << 20;
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(l(top)) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill(p, top, 9) };
    // To half, and to just over an eighth: the block keeps its slot.
    let mut size = top;
    for new in [top / 2, top / 8 + 1] {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.realloc(p, l(size), new) };
        assert_eq!(q, p);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { check(q, new, 9) }, Ok(()));
        size = new;
    }
    // Growing back within the slot stays too.
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { A.realloc(p, l(size), top) }, p);
    size = top;
    // To 1000 bytes: a 1 KiB slot (the class of 1000 bytes), with the first
    // 1000 bytes.
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let q = unsafe { A.realloc(p, l(size), 1000) };
    assert_ne!(q, p);
    assert_eq!(slot_size(sc_of(q.addr())), 1024);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { check(q, 1000, 9) }, Ok(()));
    // The slot given up serves the next request of its size class.
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let again = unsafe { A.alloc(l(top)) };
    assert_eq!(again, p);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        A.dealloc(again, l(top));
        A.dealloc(q, l(1000));
    }
}

#[test]
fn shrink_in_a_slot_below_1_mib_stays_in_place() {
    let size = MAX_SLOT_SIZE.min(512 << 10);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(l(size)) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill(p, 100, 4) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let q = unsafe { A.realloc(p, l(size), 1) };
    assert_eq!(q, p);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { check(q, 1, 4) }, Ok(()));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(q, l(1)) };
}
