//! Random-size alloc+free: each thread keeps a window of live blocks and
//! replaces a random one per operation (free the old block, allocate a
//! new one of a log-uniform random size, write its first and last byte).

use devutils::Rng;

use super::mem::{Blk, alloc_touched, free};
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;

/// One thread's share of a batch.
pub fn thread<A: BenchAlloc>(
    a: &'static A,
    p: &Params,
    t: usize,
    g: &Gate,
    (lo, hi, window): (usize, usize, usize),
) -> Done {
    let mut rng = Rng::new(p.seed ^ t as u64);
    let mut live = vec![Blk::NONE; window];
    for b in live.iter_mut() {
        let size = rng.log_size(lo, hi);
        *b = Blk {
            p: alloc_touched(a, size, 1),
            size,
        };
    }
    let n = p.per_thread();
    g.start();
    for i in 0..n {
        let slot = &mut live[rng.below(window as u64) as usize];
        // SAFETY: every window entry is a live block of `a`.
        unsafe { free(a, slot.p, slot.size) };
        let size = rng.log_size(lo, hi);
        *slot = Blk {
            p: alloc_touched(a, size, i as u8),
            size,
        };
    }
    let done = g.stop(n);
    for b in live {
        // SAFETY: as above.
        unsafe { free(a, b.p, b.size) };
    }
    done
}
