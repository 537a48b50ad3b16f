//! Requests above the largest slot (or more aligned than it) are served by
//! their own mappings: alloc, contents, realloc (grow, shrink, back into a
//! slot), alloc_zeroed, dealloc.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check_sparse, fill_sparse, rss_bytes};
use smalloc::Smalloc;
use smalloc::layout::MAX_SLOT_SIZE;

static A: Smalloc = Smalloc::new();

const GIB: usize = 1 << 30;

#[test]
#[cfg_attr(miri, ignore = "multi-GiB mappings")]
fn three_gib_alloc_realloc_and_free() {
    let l = Layout::from_size_align(3 * GIB, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc(l) };
    assert!(!p.is_null());
    assert!(!A.owns_slot(p));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { fill_sparse(p, l.size(), 1) };
    // Grow to 5 GiB: contents kept.
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let q = unsafe { A.realloc(p, l, 5 * GIB) };
    assert!(!q.is_null());
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { check_sparse(q, 64, 1) }, Ok(()));
    assert_eq!(
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { q.add(3 * GIB - 1).read() },
        devutils::pattern(1, 3 * GIB - 1)
    );
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { q.add(5 * GIB - 1).write(7) };
    // Shrink to 2.5 GiB: still a mapping.
    let l5 = Layout::from_size_align(5 * GIB, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let r = unsafe { A.realloc(q, l5, 5 * GIB / 2) };
    assert!(!r.is_null());
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { check_sparse(r, 64, 1) }, Ok(()));
    // Shrink to 1 KiB: moves into a slot.
    let l25 = Layout::from_size_align(5 * GIB / 2, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let s = unsafe { A.realloc(r, l25, 1024) };
    assert!(A.owns_slot(s));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { check_sparse(s, 64, 1) }, Ok(()));
    // And from a slot up past the largest slot again.
    let l1k = Layout::from_size_align(1024, 8).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let t = unsafe { A.realloc(s, l1k, MAX_SLOT_SIZE + 1) };
    assert!(!A.owns_slot(t));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert_eq!(unsafe { check_sparse(t, 64, 1) }, Ok(()));
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe { A.dealloc(t, Layout::from_size_align(MAX_SLOT_SIZE + 1, 8).unwrap()) };
}

#[test]
#[cfg_attr(miri, ignore = "4 and 8 GiB alignment: Miri allocates what it maps")]
fn alignment_beyond_the_largest_slot() {
    for align in [1usize << 32, 1 << 33] {
        let l = Layout::from_size_align(100, align).unwrap();
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let p = unsafe { A.alloc(l) };
        assert!(!p.is_null());
        assert_eq!(p.addr() % align, 0);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { fill_sparse(p, 100, 5) };
        // Grow keeping the alignment.
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        let q = unsafe { A.realloc(p, l, 1 << 20) };
        assert_eq!(q.addr() % align, 0);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        assert_eq!(unsafe { check_sparse(q, 100, 5) }, Ok(()));
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { A.dealloc(q, Layout::from_size_align(1 << 20, align).unwrap()) };
    }
}

#[test]
#[cfg_attr(miri, ignore = "4 GiB mapping and /proc")]
fn big_zeroed_is_zero_and_not_resident() {
    let before = rss_bytes();
    let l = Layout::from_size_align(4 * GIB, 4096).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    let p = unsafe { A.alloc_zeroed(l) };
    assert!(!p.is_null());
    assert!(rss_bytes() < before + 64 * 1024 * 1024);
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    unsafe {
        assert_eq!(p.read(), 0);
        assert_eq!(p.add(l.size() - 1).read(), 0);
        A.dealloc(p, l);
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "Miri allocates host memory for a mapping instead of refusing it"
)]
fn impossible_requests_return_null() {
    // More than the address space: the OS refuses, we return null.
    let l = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert!(unsafe { A.alloc(l) }.is_null());
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert!(unsafe { A.alloc_zeroed(l) }.is_null());
    let l = Layout::from_size_align(1 << 60, 1 << 40).unwrap();
    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
    assert!(unsafe { A.alloc(l) }.is_null());
}
