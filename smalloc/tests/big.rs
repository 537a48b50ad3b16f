//! Requests above the largest slot (or more aligned than it), and requests
//! whose slots are used up, are served by their own mappings: alloc,
//! contents, realloc (grow, shrink, into a slot and out of one, also in
//! random sequences with the largest class scarce), alloc_zeroed, dealloc.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{Rng, check, check_sparse, fill, fill_sparse, rss_bytes};
use smalloc::Smalloc;
use smalloc::layout::{MAX_SLOT_SIZE, THREAD_SLABS, num_slots, sc_of, slot_size};

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

/// Makes the first allocation on demand, where the largest slot is 32 MiB
/// (8 MiB in the valgrind build), and takes every slot of that class
/// (commits, not memory): its layout and the slots.
fn largest_class_used_up() -> (Layout, Vec<*mut u8>) {
    // SAFETY: the test's only thread sets it before the first allocation.
    unsafe { std::env::set_var("SMALLOC_RESERVE", "0") };
    let one = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: a non-zero layout; the block is freed with it.
    unsafe { A.dealloc(A.alloc(one), one) };
    let top = smalloc::raw::largest_sc();
    let full = Layout::from_size_align(slot_size(top), 8).unwrap();
    let slots: Vec<_> = (0..num_slots(top) as usize * THREAD_SLABS)
        // SAFETY: a non-zero layout.
        .map(|_| unsafe { A.alloc(full) })
        .collect();
    assert!(
        slots
            .iter()
            .all(|&p| A.owns_slot(p) && sc_of(p.addr()) == top)
    );
    (full, slots)
}

#[test]
#[cfg_attr(miri, ignore = "thousands of commits and a guard mapping")]
fn a_mapping_grown_into_a_slot_copies_only_its_own_bytes() {
    let (full, slots) = largest_class_used_up();
    let size = full.size();

    // The class is used up: a block of it gets a mapping, smaller than
    // the slot it will grow into.
    let small = Layout::from_size_align(size / 2 + 1, 8).unwrap();
    // SAFETY: a non-zero layout.
    let m = unsafe { A.alloc(small) };
    assert!(!m.is_null() && !A.owns_slot(m));
    // SAFETY: a live block of `small.size()` bytes.
    unsafe { fill(m, small.size(), 9) };
    // A guard right after the mapping, where the address is free, turns a
    // read past it into a fault (memcheck reports it anyway).
    let page = smalloc::raw::page_size();
    let end = (m.addr() + small.size()).next_multiple_of(page);
    // SAFETY: a new inaccessible page at a free address, or nothing.
    let guard = unsafe {
        libc::mmap(
            end as *mut libc::c_void,
            page,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE,
            -1,
            0,
        )
    };

    // A slot comes free; the mapping grows into it.
    // SAFETY: a live slot of `full`.
    unsafe { A.dealloc(slots[7], full) };
    past_the_quarantine();
    // SAFETY: `m` is live with `small`; the new size is non-zero.
    let q = unsafe { A.realloc(m, small, size) };
    assert_eq!(q, slots[7], "into the freed slot");
    // SAFETY: a live block of `size` bytes, of which the first
    // `small.size()` came from `m`.
    assert_eq!(unsafe { check(q, small.size(), 9) }, Ok(()));
    if guard != libc::MAP_FAILED {
        // SAFETY: the guard page mapped above.
        unsafe { libc::munmap(guard, page) };
    }
    // SAFETY: live blocks of these layouts.
    unsafe {
        A.dealloc(q, full);
        for (i, &p) in slots.iter().enumerate() {
            if i != 7 {
                A.dealloc(p, full);
            }
        }
    }
}

/// Under valgrind a freed slot waits behind 1,024 later frees (the
/// quarantine) before it is reused: as many frees of small blocks.
fn past_the_quarantine() {
    let l = Layout::from_size_align(16, 8).unwrap();
    // SAFETY: a non-zero layout.
    let blocks: Vec<_> = (0..1100).map(|_| unsafe { A.alloc(l) }).collect();
    // SAFETY: live blocks of `l`.
    blocks.into_iter().for_each(|p| unsafe { A.dealloc(p, l) });
}

/// Writes the pattern of `tag` at every 4096th byte of `len` bytes at `p`
/// and over its last 64: checkable at any shorter length.
///
/// # Safety
/// `p..p+len` is writable.
unsafe fn mark(p: *mut u8, len: usize, tag: u64) {
    for i in (0..len).step_by(4096).chain(len.saturating_sub(64)..len) {
        // SAFETY: `i < len`.
        unsafe { p.add(i).write(devutils::pattern(tag, i)) };
    }
}

/// Checks what [`mark`] wrote over `filled` bytes, in the first `len`.
///
/// # Safety
/// `p..p+len` is readable; `len <= filled`.
unsafe fn marked(p: *const u8, len: usize, filled: usize, tag: u64) -> bool {
    let tail = if len == filled {
        len.saturating_sub(64)
    } else {
        len
    };
    (0..len)
        .step_by(4096)
        .chain(tail..len)
        // SAFETY: `i < len`.
        .all(|i| unsafe { p.add(i).read() } == devutils::pattern(tag, i))
}

#[test]
#[cfg_attr(miri, ignore = "thousands of commits and tens of MiB per block")]
fn random_sequences_across_the_largest_slot_with_its_class_scarce() {
    // The largest class used up but for a few slots that come and go, so
    // blocks move between slots and mappings both ways, growing and
    // shrinking.
    let (full, mut held) = largest_class_used_up();
    let size = full.size();
    let mut rng = Rng::new(7);
    let mut live: Vec<(*mut u8, usize, u64)> = Vec::new();
    let (mut into_slots, mut grown_into_slots, mut into_mappings) = (0, 0, 0);
    for i in 0..600u64 {
        if i % 8 == 0 {
            // Use the class up again, then free up to two of its slots.
            loop {
                // SAFETY: a non-zero layout.
                let p = unsafe { A.alloc(full) };
                assert!(!p.is_null());
                if !A.owns_slot(p) {
                    // SAFETY: just allocated with `full`.
                    unsafe { A.dealloc(p, full) };
                    break;
                }
                held.push(p);
            }
            for p in held.split_off(held.len().saturating_sub(rng.below(3) as usize)) {
                // SAFETY: a live slot of `full`.
                unsafe { A.dealloc(p, full) };
            }
            past_the_quarantine();
        }
        // New blocks below the largest class or above the largest slot;
        // reallocations half into the largest class, where a mapping may
        // grow into a slot.
        let new_size = if rng.chance(1, 2) {
            rng.range(size as u64 / 2 + 1, size as u64) as usize
        } else {
            rng.log_size(size / 4, size * 2)
        };
        let fresh_size = if rng.chance(1, 2) {
            rng.log_size(size / 4, size / 2)
        } else {
            rng.log_size(size + 1, size * 2)
        };
        match rng.below(3) {
            0 if live.len() < 8 => {
                let l = Layout::from_size_align(fresh_size, 8).unwrap();
                // SAFETY: a non-zero layout.
                let p = unsafe { A.alloc(l) };
                assert!(!p.is_null());
                // SAFETY: a live block of `fresh_size` bytes.
                unsafe { mark(p, fresh_size, i) };
                live.push((p, fresh_size, i));
            }
            0 | 1 if !live.is_empty() => {
                let (p, n, tag) = live.swap_remove(rng.below(live.len() as u64) as usize);
                // SAFETY: a live block of `n` bytes, marked with `tag`.
                assert!(unsafe { marked(p, n, n, tag) });
                // SAFETY: as above.
                unsafe { A.dealloc(p, Layout::from_size_align(n, 8).unwrap()) };
            }
            _ if !live.is_empty() => {
                // Half the time, a mapping of the largest class grows
                // within it, where a slot may have come free.
                let in_top = |&(p, n, _): &(*mut u8, usize, u64)| !A.owns_slot(p) && n < size;
                let (k, new_size) = match live.iter().position(in_top) {
                    Some(k) if rng.chance(1, 2) => {
                        (k, rng.range(live[k].1 as u64 + 1, size as u64) as usize)
                    }
                    _ => (rng.below(live.len() as u64) as usize, new_size),
                };
                let (p, n, tag) = live[k];
                let was_slot = A.owns_slot(p);
                // SAFETY: a live block of `n` bytes; a non-zero new size.
                let q = unsafe { A.realloc(p, Layout::from_size_align(n, 8).unwrap(), new_size) };
                assert!(!q.is_null());
                match (was_slot, A.owns_slot(q)) {
                    (false, true) if n < new_size => grown_into_slots += 1,
                    (false, true) => into_slots += 1,
                    (true, false) => into_mappings += 1,
                    _ => {}
                }
                let kept = n.min(new_size);
                // SAFETY: a live block of `new_size` bytes, whose first
                // `kept` came from the old one.
                assert!(unsafe { marked(q, kept, n, tag) }, "{n} -> {new_size}");
                // SAFETY: as above.
                unsafe { mark(q, new_size, i) };
                live[k] = (q, new_size, i);
            }
            _ => {}
        }
    }
    eprintln!(
        "{into_slots} mappings shrank into slots, {grown_into_slots} grew into slots, {into_mappings} slots moved into mappings"
    );
    assert!(into_slots >= 5 && grown_into_slots >= 3 && into_mappings >= 5);
    // SAFETY: live blocks of these layouts.
    unsafe {
        for (p, n, tag) in live {
            assert!(marked(p, n, n, tag));
            A.dealloc(p, Layout::from_size_align(n, 8).unwrap());
        }
        for p in held {
            A.dealloc(p, full);
        }
    }
}
