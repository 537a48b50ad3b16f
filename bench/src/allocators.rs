//! The allocators under test: one static instance each, driven through its
//! `GlobalAlloc` impl, and the dispatch from a runtime name to a
//! monomorphized workload.

use std::alloc::{GlobalAlloc, System};

/// An allocator the harness can drive. The hooks run on every worker
/// thread the harness starts, outside the timed region.
pub trait BenchAlloc: GlobalAlloc + Sync + 'static {
    /// Whether this is smalloc (some workloads arrange threads onto one
    /// slab, which only means something for smalloc).
    const IS_SMALLOC: bool = false;
    /// Called on a worker thread before it makes its first allocation.
    fn thread_start(&self) {}
    /// Called on a worker thread after its last allocator call.
    fn thread_end(&self) {}
}

/// smalloc.
pub static SMALLOC: smalloc::Smalloc = smalloc::Smalloc::new();
/// glibc's malloc through `std::alloc::System`.
pub static SYSTEM: System = System;
#[cfg(feature = "mimalloc")]
/// mimalloc.
pub static MIMALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
#[cfg(feature = "jemalloc")]
/// jemalloc (tikv-jemallocator; prefixed symbols, so it does not replace malloc).
pub static JEMALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;
#[cfg(feature = "snmalloc")]
/// snmalloc.
pub static SNMALLOC: snmalloc_rs::SnMalloc = snmalloc_rs::SnMalloc;
#[cfg(feature = "rpmalloc")]
/// rpmalloc.
pub static RPMALLOC: crate::rpmalloc_alloc::RpMalloc<false> = crate::rpmalloc_alloc::RpMalloc;

impl BenchAlloc for smalloc::Smalloc {
    const IS_SMALLOC: bool = true;
}
impl BenchAlloc for System {}
#[cfg(feature = "mimalloc")]
impl BenchAlloc for mimalloc::MiMalloc {}
#[cfg(feature = "jemalloc")]
impl BenchAlloc for tikv_jemallocator::Jemalloc {}
#[cfg(feature = "snmalloc")]
impl BenchAlloc for snmalloc_rs::SnMalloc {}
#[cfg(feature = "rpmalloc")]
impl BenchAlloc for crate::rpmalloc_alloc::RpMalloc<false> {
    fn thread_start(&self) {
        crate::rpmalloc_alloc::thread_start();
    }
    fn thread_end(&self) {
        crate::rpmalloc_alloc::thread_end();
    }
}

/// Names of every allocator compiled in, smalloc first (the order of the
/// columns and of the interleaved batches).
pub fn all_names() -> Vec<&'static str> {
    let mut v = vec!["smalloc", "system"];
    if cfg!(feature = "mimalloc") {
        v.push("mimalloc");
    }
    if cfg!(feature = "jemalloc") {
        v.push("jemalloc");
    }
    if cfg!(feature = "snmalloc") {
        v.push("snmalloc");
    }
    if cfg!(feature = "rpmalloc") {
        v.push("rpmalloc");
    }
    v
}

/// Something to run with a concrete allocator type.
pub trait WithAlloc {
    /// What the run returns.
    type Out;
    /// Runs with allocator `a`.
    fn run<A: BenchAlloc>(self, a: &'static A) -> Self::Out;
}

/// Runs `job` with the allocator called `name`; `None` if there is no such
/// allocator in this build.
pub fn with_alloc<J: WithAlloc>(name: &str, job: J) -> Option<J::Out> {
    Some(match name {
        "smalloc" => job.run(&SMALLOC),
        "system" => job.run(&SYSTEM),
        #[cfg(feature = "mimalloc")]
        "mimalloc" => job.run(&MIMALLOC),
        #[cfg(feature = "jemalloc")]
        "jemalloc" => job.run(&JEMALLOC),
        #[cfg(feature = "snmalloc")]
        "snmalloc" => job.run(&SNMALLOC),
        #[cfg(feature = "rpmalloc")]
        "rpmalloc" => job.run(&RPMALLOC),
        _ => return None,
    })
}
