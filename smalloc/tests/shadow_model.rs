//! Random operation sequences against a shadow model: every live block's
//! contents, alignment and non-overlap are checked on every operation.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{Block, Rng, Shadow, check, check_sparse, fill, fill_sparse, is_zero};
use smalloc::Smalloc;

static A: Smalloc = Smalloc::new();

/// Full fill/check for small blocks, sampled for large ones.
const FULL_CHECK_LIMIT: usize = 64 * 1024;

/// Size bands and operation counts; Miri runs a smaller version (its slots
/// end at 32 KiB, and it interprets every byte written).
#[cfg(not(any(miri, smalloc_tsan)))]
mod scale {
    pub const MEDIUM: usize = 256 * 1024;
    pub const LARGE: usize = 64 << 20;
    pub const HUGE: usize = 256 << 20;
    pub const MAX_ALIGN_BITS: u64 = 21;
    pub const OPS: usize = 20_000;
}
/// ThreadSanitizer keeps two to three shadow bytes per byte touched: the
/// large blocks stay below a few MiB.
#[cfg(all(smalloc_tsan, not(miri)))]
mod scale {
    pub const MEDIUM: usize = 256 * 1024;
    pub const LARGE: usize = 4 << 20;
    pub const HUGE: usize = 16 << 20;
    pub const MAX_ALIGN_BITS: u64 = 21;
    pub const OPS: usize = 20_000;
}
#[cfg(miri)]
mod scale {
    pub const MEDIUM: usize = 16 * 1024;
    pub const LARGE: usize = 128 * 1024;
    pub const HUGE: usize = 512 * 1024;
    pub const MAX_ALIGN_BITS: u64 = 18;
    pub const OPS: usize = 200;
}
use scale::*;

/// The block's pointer, with the provenance exposed when it was recorded.
fn ptr_of(b: &Block) -> *mut u8 {
    std::ptr::with_exposed_provenance_mut(b.addr)
}

fn fill_block(b: &Block) {
    let p = ptr_of(b);
    if b.size <= FULL_CHECK_LIMIT {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { fill(p, b.size, b.tag) }
    } else {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { fill_sparse(p, b.size, b.tag) }
    }
}

fn check_block(b: &Block, len: usize) {
    let p = ptr_of(b);
    let r = if len <= FULL_CHECK_LIMIT {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { check(p, len, b.tag) }
    } else {
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe { check_sparse(p, len, b.tag) }
    };
    assert_eq!(r, Ok(()), "block {b:x?} corrupted (checked {len} bytes)");
}

fn random_layout(rng: &mut Rng) -> Layout {
    let size = match rng.below(100) {
        0..=59 => rng.log_size(1, 1024),
        60..=89 => rng.log_size(1024, MEDIUM),
        90..=98 => rng.log_size(MEDIUM, LARGE),
        // Rare, and bounded: a realloc copies (and so makes resident) the
        // whole block. Sizes past the largest slot are covered in big.rs.
        _ => rng.log_size(LARGE, HUGE),
    };
    let max_align_bits = if rng.chance(1, 10) { MAX_ALIGN_BITS } else { 5 };
    let align = 1usize << rng.below(max_align_bits);
    Layout::from_size_align(size, align).unwrap()
}

/// Runs `ops` random operations; returns which size classes the blocks
/// handed out were in.
fn run(seed: u64, ops: usize) -> [bool; 128] {
    let mut rng = Rng::new(seed);
    let mut shadow = Shadow::new();
    let mut reached = [false; 128];
    let mut reach = |p: *mut u8| {
        if A.owns_slot(p) {
            reached[smalloc::layout::sc_of(p.addr()) as usize] = true;
        }
    };
    for i in 0..ops {
        let tag = (seed << 32) + i as u64;
        match rng.below(10) {
            0..=3 => {
                let l = random_layout(&mut rng);
                let zeroed = rng.chance(1, 3);
                // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                let p = unsafe {
                    if zeroed {
                        A.alloc_zeroed(l)
                    } else {
                        A.alloc(l)
                    }
                };
                assert!(!p.is_null(), "{l:?}");
                reach(p);
                if zeroed {
                    let n = l.size().min(FULL_CHECK_LIMIT);
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    assert!(unsafe { is_zero(p, n) }, "alloc_zeroed not zero: {l:?}");
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    assert_eq!(unsafe { p.add(l.size() - 1).read() }, 0);
                }
                let b = Block {
                    addr: p.expose_provenance(),
                    size: l.size(),
                    align: l.align(),
                    tag,
                };
                shadow.insert(b);
                fill_block(&b);
            }
            4..=6 => {
                if let Some(b) = shadow.take_random(&mut rng) {
                    check_block(&b, b.size);
                    let l = Layout::from_size_align(b.size, b.align).unwrap();
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    unsafe { A.dealloc(ptr_of(&b), l) };
                }
            }
            _ => {
                if let Some(b) = shadow.take_random(&mut rng) {
                    check_block(&b, b.size);
                    let l = Layout::from_size_align(b.size, b.align).unwrap();
                    let new_size = random_layout(&mut rng).size();
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    let q = unsafe { A.realloc(ptr_of(&b), l, new_size) };
                    assert!(!q.is_null(), "realloc {b:x?} to {new_size}");
                    reach(q);
                    // What survives: all of a fully filled block up to the
                    // new size; the head of a sparsely filled one.
                    let kept = if b.size <= FULL_CHECK_LIMIT {
                        b.size
                    } else {
                        64
                    }
                    .min(new_size);
                    // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
                    let r = unsafe { check(q, kept, b.tag) };
                    assert_eq!(r, Ok(()), "realloc {b:x?} to {new_size} lost contents");
                    let nb = Block {
                        addr: q.expose_provenance(),
                        size: new_size,
                        align: b.align,
                        tag,
                    };
                    shadow.insert(nb);
                    fill_block(&nb);
                }
            }
        }
    }
    for b in shadow.drain() {
        check_block(&b, b.size);
        // SAFETY: pointers passed to the allocator came from it with this layout and are live; layouts are non-zero; accesses stay inside blocks.
        unsafe {
            A.dealloc(
                ptr_of(&b),
                Layout::from_size_align(b.size, b.align).unwrap(),
            )
        };
    }
    reached
}

/// Every size class from the smallest to that of the medium band's top
/// was handed out (a class above it may have been served by a larger one).
fn assert_every_class_reached(reached: &[bool; 128]) {
    use smalloc::layout::{MIN_SC, size_class, slot_size};
    if cfg!(miri) {
        return;
    }
    for sc in MIN_SC..=size_class(MEDIUM, 1) {
        assert!(
            reached[sc as usize],
            "class {sc} ({} B) never handed out",
            slot_size(sc)
        );
    }
}

#[test]
fn random_sequence_seed_1() {
    assert_every_class_reached(&run(1, OPS));
}

#[test]
fn random_sequence_seed_2() {
    assert_every_class_reached(&run(2, OPS));
}

#[test]
fn random_sequences_on_four_threads() {
    let hs: Vec<_> = (10..14)
        .map(|s| std::thread::spawn(move || run(s, OPS / 2)))
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}
