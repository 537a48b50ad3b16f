//! The workload: parse one document with one parser, again and again, and
//! time the parse plus the drop of the parsed value (both allocate or free
//! on every node).

use std::hint::black_box;
use std::time::{Duration, Instant};

/// The three ways of parsing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parser {
    /// `simd_json::to_borrowed_value`: strings borrow from the input.
    SimdBorrowed,
    /// `simd_json::to_owned_value`: every string is its own allocation.
    SimdOwned,
    /// `serde_json::from_slice::<serde_json::Value>`.
    Serde,
}

impl Parser {
    /// Every parser, in the order reported.
    pub const ALL: [Parser; 3] = [Parser::SimdBorrowed, Parser::SimdOwned, Parser::Serde];

    /// The name in output and in `--parsers`.
    pub fn name(self) -> &'static str {
        match self {
            Parser::SimdBorrowed => "simd-borrowed",
            Parser::SimdOwned => "simd-owned",
            Parser::Serde => "serde_json",
        }
    }

    /// The parser called `name`.
    pub fn from_name(name: &str) -> Option<Parser> {
        Parser::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// When to stop timing a (document, parser) cell.
#[derive(Clone, Copy, Debug)]
pub struct Budget {
    /// Exactly this many timed parses, if set.
    pub iters: Option<u64>,
    /// Otherwise, parse until this much parse time has accumulated.
    pub time: Duration,
    /// Untimed parses first.
    pub warmup: u64,
}

/// What one thread measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sample {
    /// Timed parses.
    pub iters: u64,
    /// Their total time (parse + drop).
    pub secs: f64,
}

/// Parses `doc` with `parser` once; the value is dropped before returning.
/// `scratch` holds the mutable copy simd-json parses in place.
pub fn parse_once(parser: Parser, doc: &[u8], scratch: &mut Vec<u8>) -> Duration {
    scratch.clear();
    scratch.extend_from_slice(doc);
    let start = Instant::now();
    match parser {
        Parser::SimdBorrowed => {
            let v = simd_json::to_borrowed_value(scratch).expect("simd-json parses the document");
            black_box(&v);
        }
        Parser::SimdOwned => {
            let v = simd_json::to_owned_value(scratch).expect("simd-json parses the document");
            black_box(&v);
        }
        Parser::Serde => {
            let v: serde_json::Value =
                serde_json::from_slice(doc).expect("serde_json parses the document");
            black_box(&v);
        }
    }
    start.elapsed()
}

/// One thread's timed loop.
pub fn run(parser: Parser, doc: &[u8], budget: Budget) -> Sample {
    let mut scratch = Vec::with_capacity(doc.len());
    for _ in 0..budget.warmup {
        parse_once(parser, doc, &mut scratch);
    }
    let mut total = Duration::ZERO;
    let mut iters = 0;
    loop {
        let done = match budget.iters {
            Some(n) => iters >= n,
            None => iters > 0 && total >= budget.time,
        };
        if done {
            break;
        }
        total += parse_once(parser, doc, &mut scratch);
        iters += 1;
    }
    Sample {
        iters,
        secs: total.as_secs_f64(),
    }
}

/// Runs the loop on `threads` threads at once (each on its own copy of the
/// document) and returns the throughput in MB/s (10^6 bytes), summed over
/// the threads, and the total parses.
pub fn throughput(parser: Parser, doc: &[u8], budget: Budget, threads: usize) -> (f64, u64) {
    let samples: Vec<Sample> = if threads <= 1 {
        vec![run(parser, doc, budget)]
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| s.spawn(|| run(parser, doc, budget)))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("worker thread"))
                .collect()
        })
    };
    let mbps = samples
        .iter()
        .map(|s| doc.len() as f64 * s.iters as f64 / s.secs.max(1e-9) / 1e6)
        .sum();
    (mbps, samples.iter().map(|s| s.iters).sum())
}
