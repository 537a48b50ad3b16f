//! Every `bench --compare` workload as `rows/NAME@THREADS` (1, 2 and 32
//! threads, from the workload's minimum), driven by the same harness but
//! through this binary's global allocator. An iteration is one batch of a
//! tenth of the workload's default operations; the sample counts the
//! batch's timed region only.

use std::alloc::{GlobalAlloc, Layout};

use bench::allocators::BenchAlloc;
use bench::workloads::{self, Params};
use tango_bench::{Benchmark, benchmark_fn};

use crate::timed::{self, Timed};

/// The global allocator (`std::alloc`), as the harness's allocator type.
struct Global;

// SAFETY: forwards every call, with its contract, to the global allocator.
unsafe impl GlobalAlloc for Global {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `GlobalAlloc::alloc`'s.
        unsafe { std::alloc::alloc(layout) }
    }
    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is `GlobalAlloc::dealloc`'s.
        unsafe { std::alloc::dealloc(p, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is `GlobalAlloc::alloc_zeroed`'s.
        unsafe { std::alloc::alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is `GlobalAlloc::realloc`'s.
        unsafe { std::alloc::realloc(p, layout, new_size) }
    }
}

impl BenchAlloc for Global {
    const IS_SMALLOC: bool = crate::global::IS_SMALLOC;
}

static GLOBAL: Global = Global;

/// The benchmarks, one per (workload, thread count).
pub fn all() -> Vec<Benchmark> {
    let mut v = Vec::new();
    for w in workloads::ALL {
        for threads in [1, 2, 32].into_iter().filter(|&t| t >= w.min_threads) {
            let ops = (w.default_ops / 10).max(threads as u64);
            v.push(benchmark_fn(
                format!("rows/{}@{threads}", w.name),
                move |b| {
                    let p = Params {
                        threads,
                        ops,
                        seed: b.seed,
                    };
                    b.metric::<Timed>().iter(move || {
                        let batch = workloads::run_batch(&GLOBAL, w, &p);
                        timed::add(batch.elapsed);
                        batch.ops
                    })
                },
            ));
        }
    }
    v
}
