//! Growth through realloc.
//!
//! * `vec-grow`: a byte vector pushed to a random length (log-uniform up to
//!   1 MiB) with `Vec`'s doubling (capacity 8, 16, 32, ...), writing the
//!   first and last byte of each new capacity, then freed. One op = one
//!   alloc or realloc call.
//! * `realloc-chain`: a window of 256 blocks; each op reallocates a random
//!   one to a new random size (1 B - 64 KiB, log-uniform, so it grows and
//!   shrinks) and writes its first and last byte; 1 in 16 ops frees the
//!   block and allocates a fresh one instead.

use devutils::Rng;

use super::mem::{Blk, alloc_touched, free, realloc_touched};
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;

/// Largest vector `vec-grow` builds.
const VEC_MAX: usize = 1 << 20;
/// Largest block of `realloc-chain`.
const CHAIN_MAX: usize = 64 << 10;
/// Live blocks per thread in `realloc-chain`.
const CHAIN_WINDOW: usize = 256;

/// `vec-grow`, one thread.
pub fn vec_grow<A: BenchAlloc>(a: &'static A, p: &Params, t: usize, g: &Gate) -> Done {
    let mut rng = Rng::new(p.seed ^ t as u64);
    let n = p.per_thread();
    g.start();
    let mut ops = 0;
    while ops < n {
        let target = rng.log_size(8, VEC_MAX);
        let mut cap = 8;
        let mut v = alloc_touched(a, cap, 0);
        ops += 1;
        while cap < target && ops < n {
            // SAFETY: `v` is live with `cap` bytes.
            v = unsafe { realloc_touched(a, v, cap, cap * 2, ops as u8) };
            cap *= 2;
            ops += 1;
        }
        // SAFETY: as above.
        unsafe { free(a, v, cap) };
    }
    g.stop(ops)
}

/// `realloc-chain`, one thread.
pub fn realloc_chain<A: BenchAlloc>(a: &'static A, p: &Params, t: usize, g: &Gate) -> Done {
    let mut rng = Rng::new(p.seed ^ t as u64);
    let mut live = vec![Blk::NONE; CHAIN_WINDOW];
    for b in live.iter_mut() {
        let size = rng.log_size(1, CHAIN_MAX);
        *b = Blk {
            p: alloc_touched(a, size, 1),
            size,
        };
    }
    let n = p.per_thread();
    g.start();
    for i in 0..n {
        let b = &mut live[rng.below(CHAIN_WINDOW as u64) as usize];
        let size = rng.log_size(1, CHAIN_MAX);
        if rng.chance(1, 16) {
            // SAFETY: every window entry is a live block of `a`.
            unsafe { free(a, b.p, b.size) };
            b.p = alloc_touched(a, size, i as u8);
        } else {
            // SAFETY: as above.
            b.p = unsafe { realloc_touched(a, b.p, b.size, size, i as u8) };
        }
        b.size = size;
    }
    let done = g.stop(n);
    for b in live {
        // SAFETY: as above.
        unsafe { free(a, b.p, b.size) };
    }
    done
}
