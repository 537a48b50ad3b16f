//! Paired A/B benchmarks on tango-bench: this binary's global allocator is
//! smalloc, or a peer picked by a `global-*` feature; tango compares two such
//! binaries (another allocator, or smalloc at another commit), running both
//! side by side in child processes. Commands: bench/README.md, "Paired A/B
//! benchmarks". `tango --which` prints the global allocator.

mod global;
// rpmalloc as a global allocator (lazy per-thread initialization); shared
// with simd-json-bench.
#[cfg(feature = "global-rpmalloc")]
#[path = "../../simd-json-bench/src/rpmalloc_global.rs"]
mod rpmalloc_global;
mod workloads;

use tango_bench::IntoBenchmarks;

fn main() -> tango_bench::cli::Result<std::process::ExitCode> {
    if std::env::args().nth(1).as_deref() == Some("--which") {
        println!("{}", global::NAME);
        return Ok(std::process::ExitCode::SUCCESS);
    }
    tango_bench::cli::run(workloads::all().into_benchmarks())
}
