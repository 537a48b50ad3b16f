//! A bounded single-producer single-consumer queue of blocks, allocated
//! with the harness's allocator before the clock starts, so handing a block
//! to another thread costs the same whatever allocator is measured.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread::yield_now;

use super::mem::Blk;

/// Capacity in blocks (a power of two).
const CAP: usize = 256;

/// The queue. Positions only grow; `tail - head` entries are queued.
pub struct Ring {
    ptrs: Vec<AtomicUsize>,
    sizes: Vec<AtomicUsize>,
    head: AtomicUsize,
    tail: AtomicUsize,
}

impl Default for Ring {
    fn default() -> Ring {
        Ring {
            ptrs: (0..CAP).map(|_| AtomicUsize::new(0)).collect(),
            sizes: (0..CAP).map(|_| AtomicUsize::new(0)).collect(),
            head: AtomicUsize::new(0),
            tail: AtomicUsize::new(0),
        }
    }
}

/// Spins a little, then yields (there may be more threads than cores).
fn backoff(spins: &mut u32) {
    *spins += 1;
    if *spins < 64 {
        spin_loop();
    } else {
        yield_now();
    }
}

impl Ring {
    /// Enqueues `b`, waiting while the queue is full. Producer only.
    pub fn push(&self, b: Blk) {
        let tail = self.tail.load(Ordering::Relaxed);
        let mut spins = 0;
        while tail - self.head.load(Ordering::Acquire) == CAP {
            backoff(&mut spins);
        }
        self.ptrs[tail % CAP].store(b.p.expose_provenance(), Ordering::Relaxed);
        self.sizes[tail % CAP].store(b.size, Ordering::Relaxed);
        self.tail.store(tail + 1, Ordering::Release);
    }

    /// Dequeues a block, waiting while the queue is empty. Consumer only.
    pub fn pop(&self) -> Blk {
        let head = self.head.load(Ordering::Relaxed);
        let mut spins = 0;
        while self.tail.load(Ordering::Acquire) == head {
            backoff(&mut spins);
        }
        let p = self.ptrs[head % CAP].load(Ordering::Relaxed);
        let size = self.sizes[head % CAP].load(Ordering::Relaxed);
        self.head.store(head + 1, Ordering::Release);
        Blk {
            p: std::ptr::with_exposed_provenance_mut(p),
            size,
        }
    }
}
