//! Freed slots of 64 KiB and more: kept resident within the resident
//! budget, their pages (but the first) given back to the kernel beyond it;
//! a large request reuses a freed slot of a slightly larger size class
//! before it touches new memory; contents and zeroing stay right throughout.

#![cfg(not(miri))] // madvise and /proc

use std::alloc::{GlobalAlloc, Layout};

use devutils::{check, fill, is_zero, rss_bytes};
use smalloc::{Smalloc, raw};

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
fn freed_slots_beyond_the_budget_give_their_pages_back() {
    const N: usize = 400; // 400 MiB of 1 MiB slots, far beyond the budget
    const { assert!(N * MIB > 3 * raw::RESIDENT_BUDGET) };
    let start = rss_bytes();
    let blocks = alloc_filled(N, MIB, 1000);
    let full = rss_bytes();
    assert!(full >= start + (N - 8) * MIB, "filled: {start} -> {full}");
    free_all(&blocks, MIB);
    let after = rss_bytes();
    // As the frees went on, the bytes in use fell, and so did the budget:
    // the kept slots shrank back to its floor.
    let kept = raw::kept_bytes();
    assert!(kept <= raw::RESIDENT_BUDGET + 4 * MIB, "kept {kept}");
    // What stays: the kept slots, the first page of each released one, and
    // some slack for the test's own allocations.
    let bound = start + raw::RESIDENT_BUDGET + N * PAGE + 8 * MIB;
    assert!(
        after <= bound,
        "after free: {after} > {bound} (full {full})"
    );
    eprintln!(
        "RSS: start {} MiB, filled {} MiB, freed {} MiB (kept {} MiB)",
        start / MIB,
        full / MIB,
        after / MIB,
        kept / MIB
    );

    // Everything comes back (LIFO: the same slots), usable and zeroable.
    let again: Vec<*mut u8> = (0..N)
        // SAFETY: a non-zero layout.
        .map(|_| unsafe { A.alloc_zeroed(layout(MIB)) })
        .collect();
    assert_eq!(raw::kept_bytes(), 0, "every kept slot was taken back");
    for (i, &p) in again.iter().enumerate() {
        assert!(blocks.contains(&p), "block {i} is new memory");
        // SAFETY: a live block of MIB bytes.
        assert!(unsafe { is_zero(p, MIB) }, "block {i} not zeroed");
        // SAFETY: as above.
        unsafe { fill(p, MIB, 5000 + i as u64) };
    }
    for (i, &p) in again.iter().enumerate() {
        // SAFETY: as above.
        assert_eq!(unsafe { check(p, MIB, 5000 + i as u64) }, Ok(()));
    }
    free_all(&again, MIB);
}

#[test]
fn a_slot_freed_within_the_budget_keeps_its_pages() {
    let size = 256 * 1024;
    let p = alloc_filled(1, size, 7)[0];
    free_all(&[p], size);
    assert_eq!(raw::kept_bytes(), size);
    // SAFETY: a non-zero layout.
    let q = unsafe { A.alloc(layout(size)) };
    assert_eq!(q, p, "LIFO reuse");
    assert_eq!(raw::kept_bytes(), 0);
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
fn slots_of_the_always_release_size_give_their_pages_back_at_once() {
    let size = raw::ALWAYS_RELEASE_SIZE;
    let start = rss_bytes();
    let p = alloc_filled(1, size, 9)[0];
    assert!(rss_bytes() >= start + size - MIB);
    free_all(&[p], size);
    assert_eq!(raw::kept_bytes(), 0);
    assert!(rss_bytes() < start + 4 * MIB, "the pages went back");
    // SAFETY: a non-zero layout.
    let q = unsafe { A.alloc(layout(size)) };
    assert_eq!(q, p, "LIFO reuse");
    // Released pages read as zero.
    // SAFETY: a live block of `size` bytes.
    assert!(unsafe { is_zero(q.add(PAGE), size - PAGE) });
    free_all(&[q], size);
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
    assert_eq!(raw::kept_bytes(), 0);
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
fn realloc_across_large_classes_keeps_contents_and_budget() {
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
    assert!(raw::kept_bytes() <= raw::RESIDENT_BUDGET);
}
