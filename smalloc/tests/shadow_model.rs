//! Random operation sequences against a shadow model: every live block's
//! contents, alignment and non-overlap are checked on every operation.

use std::alloc::{GlobalAlloc, Layout};

use devutils::{Block, Rng, Shadow, check, check_sparse, fill, fill_sparse, is_zero};
use smalloc::Smalloc;

static A: Smalloc = Smalloc::new();

/// Full fill/check for small blocks, sampled for large ones.
const FULL_CHECK_LIMIT: usize = 64 * 1024;

fn fill_block(b: &Block) {
    let p = b.addr as *mut u8;
    if b.size <= FULL_CHECK_LIMIT {
        unsafe { fill(p, b.size, b.tag) }
    } else {
        unsafe { fill_sparse(p, b.size, b.tag) }
    }
}

fn check_block(b: &Block, len: usize) {
    let p = b.addr as *const u8;
    let r = if len <= FULL_CHECK_LIMIT {
        unsafe { check(p, len, b.tag) }
    } else {
        unsafe { check_sparse(p, len, b.tag) }
    };
    assert_eq!(r, Ok(()), "block {b:x?} corrupted (checked {len} bytes)");
}

fn random_layout(rng: &mut Rng) -> Layout {
    let size = match rng.below(100) {
        0..=59 => rng.log_size(1, 1024),
        60..=89 => rng.log_size(1024, 256 * 1024),
        90..=98 => rng.log_size(256 * 1024, 64 << 20),
        // Rare, and bounded: a realloc copies (and so makes resident) the
        // whole block. Sizes past the largest slot are covered in big.rs.
        _ => rng.log_size(64 << 20, 256 << 20),
    };
    let max_align_bits = if rng.chance(1, 10) { 21 } else { 5 };
    let align = 1usize << rng.below(max_align_bits);
    Layout::from_size_align(size, align).unwrap()
}

fn run(seed: u64, ops: usize) {
    let mut rng = Rng::new(seed);
    let mut shadow = Shadow::new();
    for i in 0..ops {
        let tag = (seed << 32) + i as u64;
        match rng.below(10) {
            0..=3 => {
                let l = random_layout(&mut rng);
                let zeroed = rng.chance(1, 3);
                let p = unsafe {
                    if zeroed {
                        A.alloc_zeroed(l)
                    } else {
                        A.alloc(l)
                    }
                };
                assert!(!p.is_null(), "{l:?}");
                if zeroed {
                    let n = l.size().min(FULL_CHECK_LIMIT);
                    assert!(unsafe { is_zero(p, n) }, "alloc_zeroed not zero: {l:?}");
                    assert_eq!(unsafe { p.add(l.size() - 1).read() }, 0);
                }
                let b = Block {
                    addr: p.addr(),
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
                    unsafe { A.dealloc(b.addr as *mut u8, l) };
                }
            }
            _ => {
                if let Some(b) = shadow.take_random(&mut rng) {
                    check_block(&b, b.size);
                    let l = Layout::from_size_align(b.size, b.align).unwrap();
                    let new_size = random_layout(&mut rng).size();
                    let q = unsafe { A.realloc(b.addr as *mut u8, l, new_size) };
                    assert!(!q.is_null());
                    // What survives: all of a fully filled block up to the
                    // new size; the head of a sparsely filled one.
                    let kept = if b.size <= FULL_CHECK_LIMIT {
                        b.size
                    } else {
                        64
                    }
                    .min(new_size);
                    let r = unsafe { check(q, kept, b.tag) };
                    assert_eq!(r, Ok(()), "realloc {b:x?} to {new_size} lost contents");
                    let nb = Block {
                        addr: q.addr(),
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
        unsafe {
            A.dealloc(
                b.addr as *mut u8,
                Layout::from_size_align(b.size, b.align).unwrap(),
            )
        };
    }
}

#[test]
fn random_sequence_seed_1() {
    run(1, 20_000);
}

#[test]
fn random_sequence_seed_2() {
    run(2, 20_000);
}

#[test]
fn random_sequences_on_four_threads() {
    let hs: Vec<_> = (10..14)
        .map(|s| std::thread::spawn(move || run(s, 10_000)))
        .collect();
    for h in hs {
        h.join().unwrap();
    }
}
