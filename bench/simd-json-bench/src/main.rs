//! simd-json-bench: a real workload for the allocators. simd-json and
//! serde_json parse the standard JSON corpus (or generated documents of the
//! same shapes); the global allocator is chosen by cargo feature, and
//! `--compare` runs several such builds interleaved and prints smalloc's
//! ratio to each. See bench/README.md.

mod alloc;
mod cli;
mod compare;
mod corpus;
mod generate;
mod measure;

use std::time::Duration;

use measure::Budget;

fn main() {
    let opts = cli::parse();
    if opts.which {
        println!("{}", alloc::NAME);
        return;
    }
    let result = if opts.compare.is_empty() {
        measure_here(&opts)
    } else {
        compare::run(&opts)
    };
    if let Err(e) = result {
        eprintln!("simd-json-bench: {e}");
        std::process::exit(1);
    }
}

/// Measures every (document, parser) cell with this build's allocator.
fn measure_here(opts: &cli::Options) -> Result<(), String> {
    let docs = corpus::load(opts.data.as_deref(), opts.scale, &opts.files)?;
    let budget = Budget {
        iters: opts.iters,
        time: Duration::from_millis(opts.ms),
        warmup: opts.warmup,
    };
    let source = match &opts.data {
        Some(d) => d.display().to_string(),
        None => format!("generated (scale {})", opts.scale),
    };
    if opts.csv {
        println!("allocator,file,parser,bytes,iters,mb_per_s");
    } else {
        println!(
            "allocator: {}   documents: {source}   threads: {}",
            alloc::NAME,
            opts.threads
        );
        println!(
            "{:<24}{:>10}  {:<14}{:>10}{:>10}",
            "file", "bytes", "parser", "MB/s", "parses"
        );
    }
    for doc in &docs {
        for &parser in &opts.parsers {
            let (mbps, iters) = measure::throughput(parser, &doc.bytes, budget, opts.threads);
            if opts.csv {
                println!(
                    "{},{},{},{},{iters},{mbps:.3}",
                    alloc::NAME,
                    doc.name,
                    parser.name(),
                    doc.bytes.len()
                );
            } else {
                println!(
                    "{:<24}{:>10}  {:<14}{mbps:>10.1}{iters:>10}",
                    doc.name,
                    doc.bytes.len(),
                    parser.name()
                );
            }
        }
    }
    let rss = bench::process::own_peak_rss_kib();
    if opts.csv {
        println!("# peak_rss_kib,{rss}");
    } else {
        println!("peak RSS: {:.1} MiB", rss as f64 / 1024.0);
    }
    Ok(())
}
