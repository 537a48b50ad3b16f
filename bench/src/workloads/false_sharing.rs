//! False-sharing probes with 8-byte objects, each written 100 times per
//! op (volatile read-modify-write), so an allocator that puts two threads'
//! objects on one cache line makes the line bounce between cores.
//!
//! * `false-share-active` (after cache-thrash): each thread allocates its
//!   own object, writes it, frees it, repeatedly. Only the allocator's
//!   placement of concurrently allocated objects can cause sharing.
//! * `false-share-passive` (after cache-scratch): one thread allocates
//!   one object per worker (so they are adjacent) and hands them out; each
//!   worker writes its object, frees it, then repeatedly allocates, writes
//!   and frees its own. An allocator that reuses a freed neighbour's slot
//!   in the freeing thread keeps the workers on shared lines.
//!
//! One op = one object's life (alloc, 100 writes, free).

use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::mem::{alloc_touched, free};
use super::{Done, Gate, Params};
use crate::allocators::BenchAlloc;
use crate::harness;

/// Object size.
const OBJ: usize = 8;
/// Writes per object.
const WRITES: u64 = 100;

/// Writes the object at `p` `WRITES` times.
///
/// # Safety
/// `p` is a live 8-aligned block of at least 8 bytes owned by the caller.
#[inline]
unsafe fn hammer(p: *mut u8) {
    let q = p as *mut u64;
    for _ in 0..WRITES {
        // SAFETY: per the contract.
        unsafe { ptr::write_volatile(q, ptr::read_volatile(q).wrapping_add(1)) };
    }
}

/// One object's life: alloc, write, free.
fn life<A: BenchAlloc>(a: &A) {
    let p = alloc_touched(a, OBJ, 0);
    // SAFETY: `p` is a fresh 8-byte block; freed once.
    unsafe {
        hammer(p);
        free(a, p, OBJ);
    }
}

/// `false-share-active`, thread `t`.
pub fn active<A: BenchAlloc>(a: &'static A, p: &Params, _t: usize, g: &Gate) -> Done {
    let n = p.per_thread();
    g.start();
    for _ in 0..n {
        life(a);
    }
    g.stop(n)
}

/// The objects `false-share-passive` hands out, allocated by one thread.
pub fn handouts<A: BenchAlloc>(a: &'static A, threads: usize) -> Vec<AtomicUsize> {
    harness::on_worker(a, || {
        (0..threads)
            .map(|_| AtomicUsize::new(alloc_touched(a, OBJ, 0).expose_provenance()))
            .collect()
    })
}

/// `false-share-passive`, thread `t`: starts with `objs[t]`.
pub fn passive<A: BenchAlloc>(
    a: &'static A,
    p: &Params,
    t: usize,
    g: &Gate,
    objs: &[AtomicUsize],
) -> Done {
    let n = p.per_thread().max(1);
    g.start();
    let first: *mut u8 = ptr::with_exposed_provenance_mut(objs[t].swap(0, Ordering::Acquire));
    // SAFETY: object `t` was allocated for this thread alone.
    unsafe {
        hammer(first);
        free(a, first, OBJ);
    }
    for _ in 1..n {
        life(a);
    }
    g.stop(n)
}
