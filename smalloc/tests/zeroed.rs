//! alloc_zeroed never writes memory that was never used: a fresh 1 GiB
//! zeroed allocation does not raise RSS; reused slots are cleared.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{fill, is_zero, rss_bytes};
use smalloc::Smalloc;

static A: Smalloc = Smalloc::new();

const MIB: usize = 1 << 20;

#[test]
#[cfg_attr(miri, ignore = "reads /proc; 1 GiB")]
fn fresh_gib_alloc_zeroed_does_not_raise_rss() {
    // Warm up: make the reservation and touch the flh page.
    let small = Layout::from_size_align(16, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(A.alloc(small), small) };
    let before = rss_bytes();
    let l = Layout::from_size_align(1 << 30, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc_zeroed(l) };
    assert!(!p.is_null());
    let after = rss_bytes();
    assert!(
        after < before + 4 * MIB,
        "RSS grew from {before} to {after}"
    );
    // It reads as zero (reading maps the shared zero page, not new memory).
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        assert_eq!(p.read(), 0);
        assert_eq!(p.add((1 << 30) - 1).read(), 0);
    }
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(p, l) };
}

#[test]
fn reused_slots_are_cleared_for_every_size_up_to_a_mib() {
    let mut size = 4;
    // Under Miri, sizes past the largest slot would be big mappings, which
    // need not come back at the same address.
    let top = if cfg!(miri) {
        smalloc::layout::MAX_SLOT_SIZE
    } else {
        8 * MIB
    };
    while size <= top {
        let l = Layout::from_size_align(size, 4).unwrap();
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let p = unsafe { A.alloc(l) };
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { fill(p, size, 77) };
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { A.dealloc(p, l) };
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.alloc_zeroed(l) };
        assert_eq!(q, p, "LIFO reuse");
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert!(unsafe { is_zero(q, size) }, "size {size}");
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { A.dealloc(q, l) };
        size = size * 3 - 1;
    }
}

#[test]
#[cfg_attr(miri, ignore = "reads /proc")]
fn control_writing_does_raise_rss() {
    // Proves the RSS probe can fail: touching the pages is visible.
    let l = Layout::from_size_align(64 * MIB, 8).unwrap();
    let before = rss_bytes();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(l) };
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { p.write_bytes(1, l.size()) };
    assert!(rss_bytes() >= before + 60 * MIB);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(p, l) };
}
