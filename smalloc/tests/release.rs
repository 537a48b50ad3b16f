//! Freed slots of the release size (64 MiB) and more give their pages (but
//! the first) back to the kernel at once; smaller ones keep theirs for
//! reuse, the lower freed slot first; a large request reuses a freed slot
//! of a slightly larger size class before it touches new memory; contents
//! and zeroing stay right throughout.

#![cfg(not(miri))] // madvise and /proc

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check, fill, is_zero, rss_bytes};
use smalloc::{Smalloc, hooks};

static A: Smalloc = Smalloc::new();

const MIB: usize = 1 << 20;
const PAGE: usize = 4096;

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// Allocates `n` blocks of `size` bytes, each filled with its own pattern.
fn alloc_filled(n: usize, size: usize, tag: u64) -> Vec<*mut u8> {
    (0..n)
        .map(|i| {
            // SAFETY: a non-zero layout; the block has `size` bytes.
            unsafe {
                let p = A.alloc(layout(size));
                assert!(!p.is_null());
                fill(p, size, tag + i as u64);
                p
            }
        })
        .collect()
}

fn free_all(blocks: &[*mut u8], size: usize) {
    for &p in blocks {
        // SAFETY: live blocks of this layout.
        unsafe { A.dealloc(p, layout(size)) };
    }
}

#[test]
fn slots_below_the_release_size_keep_their_pages() {
    let size = hooks::RELEASE_SIZE / 2;
    let start = rss_bytes();
    let p = alloc_filled(1, size, 7)[0];
    free_all(&[p], size);
    assert!(rss_bytes() >= start + size - MIB, "the pages stayed");
    // SAFETY: a non-zero layout.
    let q = unsafe { A.alloc(layout(size)) };
    assert_eq!(q, p, "LIFO reuse");
    // Not released: the old contents past the first page (which holds the
    // free-list link and marker) are still there.
    // SAFETY: a live block of `size` bytes.
    let tail = unsafe { core::slice::from_raw_parts(q.add(PAGE), size - PAGE) };
    let mut expect = vec![0u8; size];
    // SAFETY: `expect` has `size` bytes.
    unsafe { fill(expect.as_mut_ptr(), size, 7) };
    assert_eq!(tail, &expect[PAGE..]);
    free_all(&[q], size);
}

#[test]
fn slots_of_the_release_size_give_their_pages_back_at_once() {
    // Just over half the slot (the smallest request of its size class).
    let size = hooks::RELEASE_SIZE / 2 + 1;
    let start = rss_bytes();
    let blocks = alloc_filled(3, size, 9);
    assert!(rss_bytes() >= start + 3 * size - MIB);
    free_all(&blocks, size);
    assert!(rss_bytes() < start + 4 * MIB, "the pages went back");
    // SAFETY: a non-zero layout.
    let q = unsafe { A.alloc(layout(size)) };
    assert_eq!(q, blocks[2], "LIFO reuse");
    // Released pages read as zero and are not resident until touched.
    // SAFETY: a live block of `size` bytes.
    assert!(unsafe { is_zero(q.add(PAGE), size - PAGE) });
    assert!(rss_bytes() < start + 4 * MIB);
    // A zeroed request on a released slot: zero, and still not resident.
    // SAFETY: a non-zero layout.
    let z = unsafe { A.alloc_zeroed(layout(size)) };
    assert_eq!(z, blocks[1]);
    // SAFETY: a live block of `size` bytes.
    assert!(unsafe { is_zero(z, size) });
    assert!(rss_bytes() < start + 4 * MIB);
    // SAFETY: a live block; then the contents are checked.
    unsafe { fill(q, size, 10) };
    // SAFETY: as above.
    assert_eq!(unsafe { check(q, size, 10) }, Ok(()));
    free_all(&[q, z], size);
}

#[test]
fn a_large_request_reuses_a_freed_larger_slot_before_new_memory() {
    // A 3 MiB block lives in a 4 MiB slot; once freed, a 1.5 MiB request
    // (2 MiB class, whose list holds no freed slot) takes it instead of a
    // never-used 2 MiB slot.
    let big = alloc_filled(1, 3 * MIB, 11)[0];
    free_all(&[big], 3 * MIB);
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(layout(3 * MIB / 2)) };
    assert_eq!(p, big, "the freed larger slot is reused");
    // SAFETY: a live block (in a 4 MiB slot).
    unsafe { fill(p, 3 * MIB / 2, 12) };
    // SAFETY: as above.
    assert_eq!(unsafe { check(p, 3 * MIB / 2, 12) }, Ok(()));
    // Its list holds nothing freed now; the next request takes new memory
    // of its own class.
    // SAFETY: a non-zero layout.
    let q = unsafe { A.alloc(layout(3 * MIB / 2)) };
    assert_ne!(q, p);
    assert_eq!(smalloc::raw::slot_size(q), 2 * MIB);
    // SAFETY: live blocks with these layouts.
    unsafe {
        A.dealloc(q, layout(3 * MIB / 2));
        A.dealloc(p, layout(3 * MIB / 2));
    }
}

#[test]
fn buffers_that_live_together_take_the_same_slots_each_round() {
    // Two buffers of the 8 MiB class live together each round: the first
    // writes all its bytes, the second only its first page, and the higher
    // one is freed first. Each round they must take the slots they took
    // before (the lower freed one first), so the second slot never gets
    // the first buffer's pages resident as well.
    let size = 6 * MIB;
    let start = rss_bytes();
    let mut first: Option<(*mut u8, *mut u8)> = None;
    for round in 0..4u64 {
        let a = alloc_filled(1, size, 20 + round)[0];
        // SAFETY: a non-zero layout.
        let b = unsafe { A.alloc(layout(size)) };
        assert!(!b.is_null());
        // SAFETY: `b` has at least a page.
        unsafe { fill(b, PAGE, 30 + round) };
        let (a0, b0) = *first.get_or_insert((a, b));
        assert!(a0 < b0, "never-used slots are taken upwards");
        assert_eq!(
            (a, b),
            (a0, b0),
            "round {round}: each buffer took its own slot again"
        );
        // SAFETY: live blocks, filled above.
        unsafe {
            assert_eq!(check(a, size, 20 + round), Ok(()));
            assert_eq!(check(b, PAGE, 30 + round), Ok(()));
        }
        free_all(&[b, a], size);
    }
    let grew = rss_bytes().saturating_sub(start);
    assert!(
        grew < size + 2 * MIB,
        "{grew} bytes resident: the second slot got the first buffer's pages"
    );
}

#[test]
fn realloc_across_large_classes_keeps_contents() {
    let mut size = 64 * 1024;
    // SAFETY: a non-zero layout.
    let mut p = unsafe { A.alloc(layout(size)) };
    // SAFETY: the block has `size` bytes.
    unsafe { fill(p, size, 3) };
    while size < 32 * MIB {
        let new = size * 2 + 1000;
        // SAFETY: a live block with this layout.
        p = unsafe { A.realloc(p, layout(size), new) };
        assert!(!p.is_null());
        // SAFETY: the first `size` bytes moved along.
        assert_eq!(unsafe { check(p, size, 3) }, Ok(()));
        // SAFETY: the block has `new` bytes.
        unsafe { fill(p, new, 3) };
        size = new;
    }
    // SAFETY: a live block with this layout.
    unsafe { A.dealloc(p, layout(size)) };
}
