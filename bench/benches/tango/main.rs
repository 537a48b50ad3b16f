//! Paired A/B benchmarks on tango-bench: this binary's global allocator is
//! smalloc, or a peer picked by a `global-*` feature; tango runs two such
//! binaries (smalloc at another commit, or another allocator) side by side
//! in child processes. `bash bench/ab.sh REV` is the way to run it; the
//! benchmarks and commands are in bench/README.md, "A/B runs".
//! `tango --which` prints the global allocator.

// simd-json-bench's documents and parse loop, for the json benchmarks.
#[allow(dead_code)]
#[path = "../../simd-json-bench/src/corpus.rs"]
mod corpus;
mod everyday;
#[allow(dead_code, unused_imports)] // (its unit test is not compiled here)
#[path = "../../simd-json-bench/src/generate.rs"]
mod generate;
mod global;
mod json;
#[allow(dead_code)]
#[path = "../../simd-json-bench/src/measure.rs"]
mod measure;
mod preload;
mod rows;
mod timed;

use tango_bench::IntoBenchmarks;

fn main() -> tango_bench::cli::Result<std::process::ExitCode> {
    if std::env::args().nth(1).as_deref() == Some("--which") {
        println!("{}", global::NAME);
        return Ok(std::process::ExitCode::SUCCESS);
    }
    let mut all = everyday::all();
    all.extend(rows::all());
    all.extend(json::all());
    all.extend(preload::all());
    tango_bench::cli::run(all.into_benchmarks())
}
