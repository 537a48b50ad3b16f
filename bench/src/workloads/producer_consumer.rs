//! `producer-consumer` (after xmalloc-test): threads work in pairs; the
//! producer allocates blocks (16 B - 1 KiB), writes a fill pattern into
//! their first and last 64 bytes and queues them; the consumer checks the
//! pattern and frees them, so every free is a cross-thread free. One op =
//! one block through the pipe.

use devutils::{Rng, check_sparse, fill_sparse};

use super::mem::{Blk, alloc_touched, free};
use super::ring::Ring;
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;

/// One queue per pair of threads.
pub fn rings(threads: usize) -> Vec<Ring> {
    (0..threads.div_ceil(2)).map(|_| Ring::default()).collect()
}

/// Thread `t`: even threads produce, odd ones consume (the pair's ring is
/// `rings[t / 2]`). An unpaired last thread does nothing.
pub fn thread<A: BenchAlloc>(
    a: &'static A,
    p: &Params,
    t: usize,
    g: &Gate,
    rings: &[Ring],
) -> Done {
    let ring = &rings[t / 2];
    let n = p.per_thread() * 2;
    let paired = t / 2 * 2 + 1 < p.threads;
    g.start();
    if !paired {
        return g.stop(0);
    }
    if t & 1 == 0 {
        let mut rng = Rng::new(p.seed ^ t as u64);
        for i in 0..n {
            let size = rng.log_size(16, 1024);
            let b = alloc_touched(a, size, 0);
            // SAFETY: `b` is a fresh block of `size` bytes.
            unsafe { fill_sparse(b, size, i) };
            ring.push(Blk { p: b, size });
        }
        g.stop(n)
    } else {
        for i in 0..n {
            let b = ring.pop();
            // SAFETY: the producer handed over a live block of `b.size`
            // bytes (the ring's Release/Acquire orders its writes first).
            unsafe {
                assert_eq!(check_sparse(b.p, b.size, i), Ok(()), "block corrupted");
                free(a, b.p, b.size);
            }
        }
        g.stop(0)
    }
}
