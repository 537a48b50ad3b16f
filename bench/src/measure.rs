//! The rows to run and the interleaved measurement of each.

use std::io::Write;

use crate::allocators::{self, BenchAlloc, WithAlloc};
use crate::cli::Config;
use crate::harness::{self, Batch};
use crate::workloads::{self, Params, Workload};

/// One row: a workload at a thread count.
#[derive(Clone, Copy, Debug)]
pub struct RowSpec {
    /// The workload.
    pub workload: &'static Workload,
    /// Worker threads.
    pub threads: usize,
}

impl RowSpec {
    /// `name@threads`.
    pub fn label(&self) -> String {
        format!("{}@{}", self.workload.name, self.threads)
    }
}

/// One allocator's batches in one row.
#[derive(Clone, Debug)]
pub struct Cell {
    /// Allocator name.
    pub alloc: String,
    /// ns/op of each measured batch.
    pub samples: Vec<f64>,
}

/// A measured row.
#[derive(Clone, Debug)]
pub struct Row {
    /// What ran.
    pub spec: RowSpec,
    /// One cell per allocator, in the configured order.
    pub cells: Vec<Cell>,
}

/// The rows `c` selects: every workload at 1 thread and at each configured
/// count (producer-consumer at even counts), skipping counts below a
/// workload's minimum, filtered by `--filter`.
pub fn rows(c: &Config) -> Vec<RowSpec> {
    let mut counts = vec![1];
    for &t in &c.threads {
        if !counts.contains(&t) {
            counts.push(t);
        }
    }
    let mut out = Vec::new();
    for w in workloads::ALL {
        let mut seen = Vec::new();
        for &t in &counts {
            let t = if w.name == "producer-consumer" {
                t & !1
            } else {
                t
            };
            if t < w.min_threads || seen.contains(&t) {
                continue;
            }
            seen.push(t);
            let spec = RowSpec {
                workload: w,
                threads: t,
            };
            if c.filter
                .as_ref()
                .is_none_or(|re| re.is_match(&spec.label()))
            {
                out.push(spec);
            }
        }
    }
    out
}

/// Operations per batch of `w` under `c`.
pub fn ops(c: &Config, w: &Workload) -> u64 {
    c.iters
        .unwrap_or(w.default_ops * if c.thorough { 3 } else { 1 })
        .max(1)
}

struct OneBatch<'a> {
    w: &'a Workload,
    p: Params,
}

impl WithAlloc for OneBatch<'_> {
    type Out = Batch;
    fn run<A: BenchAlloc>(self, a: &'static A) -> Batch {
        workloads::run_batch(a, self.w, &self.p)
    }
}

/// Runs one batch of `spec` with the allocator called `alloc`.
pub fn batch(c: &Config, spec: &RowSpec, alloc: &str, index: usize) -> Batch {
    let p = Params {
        threads: spec.threads,
        ops: ops(c, spec.workload),
        seed: c
            .seed
            .wrapping_add((index as u64).wrapping_mul(0x1000_0000)),
    };
    allocators::with_alloc(
        alloc,
        OneBatch {
            w: spec.workload,
            p,
        },
    )
    .expect("allocator names are checked when parsing")
}

/// Measures one row: warm-up batches for each allocator, then `batches`
/// rounds, each running every allocator once, in [`harness::rotation`]'s
/// order.
pub fn measure_row(c: &Config, spec: &RowSpec) -> Row {
    let n = c.allocs.len();
    for a in &c.allocs {
        for i in 0..c.warmup {
            batch(c, spec, a, usize::MAX - i);
        }
    }
    let mut cells: Vec<Cell> = c
        .allocs
        .iter()
        .map(|a| Cell {
            alloc: a.clone(),
            samples: Vec::with_capacity(c.batches),
        })
        .collect();
    let mut events = [0u64; smalloc::counters::NUM_EVENTS];
    let mut smalloc_ops = 0;
    for round in 0..c.batches {
        for i in harness::rotation(round, n) {
            let before = smalloc::counters::events();
            let b = batch(c, spec, &c.allocs[i], round);
            if let (Some(x), Some(y), true) = (
                before,
                smalloc::counters::events(),
                c.allocs[i] == "smalloc",
            ) {
                smalloc_ops += b.ops;
                for (e, (x, y)) in events.iter_mut().zip(x.iter().zip(y)) {
                    *e += y - x;
                }
            }
            cells[i].samples.push(b.ns_per_op());
        }
    }
    if smalloc_ops > 0 {
        report_events(spec, &events, smalloc_ops);
    }
    Row { spec: *spec, cells }
}

/// Prints smalloc's cold-path events of one row (the `smalloc-counters`
/// feature), per million operations, on stderr.
fn report_events(spec: &RowSpec, events: &[u64], ops: u64) {
    let mut line = format!("events {:<24}", spec.label());
    for (name, &n) in smalloc::counters::NAMES.iter().zip(events) {
        if n > 0 {
            line += &format!(" {name}={:.1}", n as f64 * 1e6 / ops as f64);
        }
    }
    eprintln!("\r{line}  (per 1M ops)");
}

/// Measures every row, with progress on stderr.
pub fn measure_all(c: &Config, progress: bool) -> Vec<Row> {
    let specs = rows(c);
    let mut out = Vec::with_capacity(specs.len());
    for (i, s) in specs.iter().enumerate() {
        if progress {
            eprint!("\r[{}/{}] {:<32}", i + 1, specs.len(), s.label());
            let _ = std::io::stderr().flush();
        }
        out.push(measure_row(c, s));
    }
    if progress {
        eprint!("\r{:<44}\r", "");
    }
    out
}
