//! The allocators, harness and workloads of `bench --compare`, shared by
//! the `bench` binary and the paired A/B benchmarks (`benches/tango`); the
//! interleaving, the measured child processes and the rpmalloc wrapper are
//! simd-json-bench's too.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod allocators;
pub mod harness;
pub mod process;
#[cfg(feature = "rpmalloc")]
pub mod rpmalloc_alloc;
pub mod workloads;
