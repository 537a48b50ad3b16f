//! `alloc-write-free`: allocate a block (8 B - 1 KiB, log-uniform), write
//! every byte of it, read the last one back, free it. The short-lived
//! temporary buffer pattern; one op = one pair.

use std::ptr;

use devutils::Rng;

use super::mem::{alloc_touched, free};
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;

/// One thread's share of a batch.
pub fn thread<A: BenchAlloc>(a: &'static A, p: &Params, t: usize, g: &Gate) -> Done {
    let mut rng = Rng::new(p.seed ^ t as u64);
    let n = p.per_thread();
    g.start();
    for i in 0..n {
        let size = rng.log_size(8, 1024);
        let b = alloc_touched(a, size, 0);
        // SAFETY: `b` is a live block of `size` bytes; freed once.
        unsafe {
            ptr::write_bytes(b, i as u8, size);
            assert_eq!(ptr::read_volatile(b.add(size - 1)), i as u8);
            free(a, b, size);
        }
    }
    g.stop(n)
}
