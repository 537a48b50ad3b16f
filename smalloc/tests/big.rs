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
fn three_gib_alloc_realloc_and_free() {
    let l = Layout::from_size_align(3 * GIB, 8).unwrap();
    let p = unsafe { A.alloc(l) };
    assert!(!p.is_null());
    assert!(!A.owns_slot(p));
    unsafe { fill_sparse(p, l.size(), 1) };
    // Grow to 5 GiB: contents kept.
    let q = unsafe { A.realloc(p, l, 5 * GIB) };
    assert!(!q.is_null());
    assert_eq!(unsafe { check_sparse(q, 64, 1) }, Ok(()));
    assert_eq!(
        unsafe { q.add(3 * GIB - 1).read() },
        devutils::pattern(1, 3 * GIB - 1)
    );
    unsafe { q.add(5 * GIB - 1).write(7) };
    // Shrink to 2.5 GiB: still a mapping.
    let l5 = Layout::from_size_align(5 * GIB, 8).unwrap();
    let r = unsafe { A.realloc(q, l5, 5 * GIB / 2) };
    assert!(!r.is_null());
    assert_eq!(unsafe { check_sparse(r, 64, 1) }, Ok(()));
    // Shrink to 1 KiB: moves into a slot.
    let l25 = Layout::from_size_align(5 * GIB / 2, 8).unwrap();
    let s = unsafe { A.realloc(r, l25, 1024) };
    assert!(A.owns_slot(s));
    assert_eq!(unsafe { check_sparse(s, 64, 1) }, Ok(()));
    // And from a slot up past the largest slot again.
    let l1k = Layout::from_size_align(1024, 8).unwrap();
    let t = unsafe { A.realloc(s, l1k, MAX_SLOT_SIZE + 1) };
    assert!(!A.owns_slot(t));
    assert_eq!(unsafe { check_sparse(t, 64, 1) }, Ok(()));
    unsafe { A.dealloc(t, Layout::from_size_align(MAX_SLOT_SIZE + 1, 8).unwrap()) };
}

#[test]
fn alignment_beyond_the_largest_slot() {
    for align in [1usize << 32, 1 << 33] {
        let l = Layout::from_size_align(100, align).unwrap();
        let p = unsafe { A.alloc(l) };
        assert!(!p.is_null());
        assert_eq!(p.addr() % align, 0);
        unsafe { fill_sparse(p, 100, 5) };
        // Grow keeping the alignment.
        let q = unsafe { A.realloc(p, l, 1 << 20) };
        assert_eq!(q.addr() % align, 0);
        assert_eq!(unsafe { check_sparse(q, 100, 5) }, Ok(()));
        unsafe { A.dealloc(q, Layout::from_size_align(1 << 20, align).unwrap()) };
    }
}

#[test]
fn big_zeroed_is_zero_and_not_resident() {
    let before = rss_bytes();
    let l = Layout::from_size_align(4 * GIB, 4096).unwrap();
    let p = unsafe { A.alloc_zeroed(l) };
    assert!(!p.is_null());
    assert!(rss_bytes() < before + 64 * 1024 * 1024);
    unsafe {
        assert_eq!(p.read(), 0);
        assert_eq!(p.add(l.size() - 1).read(), 0);
        A.dealloc(p, l);
    }
}

#[test]
fn impossible_requests_return_null() {
    // More than the address space: the OS refuses, we return null.
    let l = Layout::from_size_align(isize::MAX as usize - 4095, 4096).unwrap();
    assert!(unsafe { A.alloc(l) }.is_null());
    assert!(unsafe { A.alloc_zeroed(l) }.is_null());
    let l = Layout::from_size_align(1 << 60, 1 << 40).unwrap();
    assert!(unsafe { A.alloc(l) }.is_null());
}
