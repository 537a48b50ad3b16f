//! The workloads: each a named row per thread count. A workload's batch
//! is `ops` operations split evenly over the threads, every operation
//! writing to the memory it was given.

mod false_sharing;
mod growth;
mod larson;
pub mod mem;
mod pairs;
mod producer_consumer;
mod random_sizes;
mod ring;
mod slab_worst;

use crate::allocators::BenchAlloc;
use crate::harness::{self, Batch, Done, Gate};

/// Parameters of one batch.
#[derive(Clone, Copy, Debug)]
pub struct Params {
    /// Worker threads.
    pub threads: usize,
    /// Operations in the batch, over all threads.
    pub ops: u64,
    /// Seed of the random choices (each thread mixes in its index).
    pub seed: u64,
}

impl Params {
    /// Operations each thread does (at least 1).
    pub fn per_thread(&self) -> u64 {
        (self.ops / self.threads as u64).max(1)
    }
}

/// What a workload does, with its parameters.
#[derive(Clone, Copy, Debug)]
enum Kind {
    /// Random sizes in `lo..=hi` with a window of live blocks per thread.
    Random(usize, usize, usize),
    VecGrow,
    ReallocChain,
    AllocWriteFree,
    ProducerConsumer,
    Larson,
    FalseShareActive,
    FalseSharePassive,
    OneSlab,
    OneSlabFree,
}

/// A named workload.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Row name.
    pub name: &'static str,
    /// One-line description.
    pub about: &'static str,
    /// Fewest threads it makes sense with.
    pub min_threads: usize,
    /// Operations per batch unless `--iters` says otherwise.
    pub default_ops: u64,
    kind: Kind,
}

const KIB: usize = 1024;
const MIB: usize = 1024 * KIB;

/// Every workload, in report order.
pub const ALL: &[Workload] = &[
    Workload {
        name: "tiny",
        about: "random alloc+free, 1-64 B, 1024 live per thread",
        min_threads: 1,
        default_ops: 400_000,
        kind: Kind::Random(1, 64, 1024),
    },
    Workload {
        name: "small",
        about: "random alloc+free, 64 B-4 KiB, 1024 live per thread",
        min_threads: 1,
        default_ops: 200_000,
        kind: Kind::Random(64, 4 * KIB, 1024),
    },
    Workload {
        name: "medium",
        about: "random alloc+free, 4-256 KiB, 64 live per thread",
        min_threads: 1,
        default_ops: 40_000,
        kind: Kind::Random(4 * KIB, 256 * KIB, 64),
    },
    Workload {
        name: "large",
        about: "random alloc+free, 256 KiB-64 MiB, 4 live per thread",
        min_threads: 1,
        default_ops: 4_000,
        kind: Kind::Random(256 * KIB, 64 * MIB, 4),
    },
    Workload {
        name: "vec-grow",
        about: "Vec-style doubling realloc up to 1 MiB, then free",
        min_threads: 1,
        default_ops: 100_000,
        kind: Kind::VecGrow,
    },
    Workload {
        name: "realloc-chain",
        about: "random realloc (grow/shrink, 1 B-64 KiB) of 256 live blocks",
        min_threads: 1,
        default_ops: 100_000,
        kind: Kind::ReallocChain,
    },
    Workload {
        name: "alloc-write-free",
        about: "alloc 8 B-1 KiB, write every byte, free",
        min_threads: 1,
        default_ops: 300_000,
        kind: Kind::AllocWriteFree,
    },
    Workload {
        name: "producer-consumer",
        about: "pairs: one thread allocates, the other frees (xmalloc-style)",
        min_threads: 2,
        default_ops: 100_000,
        kind: Kind::ProducerConsumer,
    },
    Workload {
        name: "larson",
        about: "threads replace random entries of a shared array of blocks",
        min_threads: 1,
        default_ops: 200_000,
        kind: Kind::Larson,
    },
    Workload {
        name: "false-share-active",
        about: "each thread allocs an 8 B object, writes it 100x, frees",
        min_threads: 2,
        default_ops: 40_000,
        kind: Kind::FalseShareActive,
    },
    Workload {
        name: "false-share-passive",
        about: "objects allocated by one thread, written/freed/reallocated by others",
        min_threads: 2,
        default_ops: 40_000,
        kind: Kind::FalseSharePassive,
    },
    Workload {
        name: "one-slab",
        about: "all threads alloc+free 64 B on one smalloc slab",
        min_threads: 2,
        default_ops: 200_000,
        kind: Kind::OneSlab,
    },
    Workload {
        name: "one-slab-free",
        about: "thread 0 allocates 4096 x 64 B, all threads free them at once",
        min_threads: 2,
        default_ops: 8 * slab_worst::ROUND as u64,
        kind: Kind::OneSlabFree,
    },
];

/// The workload called `name`.
pub fn by_name(name: &str) -> Option<&'static Workload> {
    ALL.iter().find(|w| w.name == name)
}

/// Runs one batch of `w` with allocator `a`.
pub fn run_batch<A: BenchAlloc>(a: &'static A, w: &Workload, p: &Params) -> Batch {
    match w.kind {
        Kind::Random(lo, hi, win) => harness::run(a, p.threads, |t, g| {
            random_sizes::thread(a, p, t, g, (lo, hi, win))
        }),
        Kind::VecGrow => harness::run(a, p.threads, |t, g| growth::vec_grow(a, p, t, g)),
        Kind::ReallocChain => harness::run(a, p.threads, |t, g| growth::realloc_chain(a, p, t, g)),
        Kind::AllocWriteFree => harness::run(a, p.threads, |t, g| pairs::thread(a, p, t, g)),
        Kind::ProducerConsumer => {
            let rings = producer_consumer::rings(p.threads);
            harness::run(a, p.threads, |t, g| {
                producer_consumer::thread(a, p, t, g, &rings)
            })
        }
        Kind::Larson => {
            let table = larson::table(p.threads);
            let b = harness::run(a, p.threads, |t, g| larson::thread(a, p, t, g, &table));
            larson::cleanup(a, &table);
            b
        }
        Kind::FalseShareActive => {
            harness::run(a, p.threads, |t, g| false_sharing::active(a, p, t, g))
        }
        Kind::FalseSharePassive => {
            let objs = false_sharing::handouts(a, p.threads);
            harness::run(a, p.threads, |t, g| {
                false_sharing::passive(a, p, t, g, &objs)
            })
        }
        Kind::OneSlab => {
            harness::run_on_one_slab(a, p.threads, |t, g| slab_worst::one_slab(a, p, t, g))
        }
        Kind::OneSlabFree => {
            let st = slab_worst::Rounds::new(p.threads);
            harness::run(a, p.threads, |t, g| {
                slab_worst::one_slab_free(a, p, t, g, &st)
            })
        }
    }
}
