//! `--compare NAME=BIN,...`: runs each build (one binary per allocator
//! feature) as a child process, interleaved over rounds as `bench
//! --compare` interleaves its allocators (`bench::harness::rotation`), and
//! prints the median throughput of every (document, parser) cell per build
//! with smalloc's ratio to each other build, and each build's peak RSS as
//! `bench --isolate` reads it (`bench::process`: `wait4`, the whole process).

use bench::harness::rotation;
use bench::process;
use devutils::stats::{geomean, summarize};
use std::collections::BTreeMap;

use crate::cli::Options;

/// Key of a cell: (document, parser), in first-seen order via `order`.
type Cell = (String, String);

/// Everything the runs reported.
#[derive(Default)]
struct Results {
    /// Cells in the order the children print them.
    order: Vec<Cell>,
    /// MB/s of every run, per cell and build index.
    mbps: BTreeMap<Cell, Vec<Vec<f64>>>,
    /// Peak RSS in KiB of every run, per build index.
    rss: Vec<Vec<u64>>,
}

impl Results {
    /// Adds one run of build `b`: its CSV output and its peak RSS.
    fn add(&mut self, b: usize, builds: usize, csv: &str, rss_kib: u64) -> Result<(), String> {
        if self.rss.is_empty() {
            self.rss = vec![Vec::new(); builds];
        }
        self.rss[b].push(rss_kib);
        for line in csv.lines().skip(1).filter(|l| !l.starts_with('#')) {
            let f: Vec<&str> = line.split(',').collect();
            if f.len() != 6 {
                return Err(format!("bad line {line:?}"));
            }
            let cell = (f[1].to_string(), f[2].to_string());
            let v: f64 = f[5].parse().map_err(|_| format!("bad line {line:?}"))?;
            if !self.mbps.contains_key(&cell) {
                self.order.push(cell.clone());
            }
            self.mbps
                .entry(cell)
                .or_insert_with(|| vec![Vec::new(); builds])[b]
                .push(v);
        }
        Ok(())
    }
}

/// The median of `v` (not empty).
fn median(v: &[f64]) -> f64 {
    summarize(v).median
}

/// Median absolute deviation in percent of the median.
fn mad_pct(v: &[f64]) -> f64 {
    summarize(v).mad_pct
}

/// Checks that each binary was built with the allocator it is named after.
fn check_builds(builds: &[(String, std::path::PathBuf)]) -> Result<(), String> {
    for (name, bin) in builds {
        let (which, _) = process::run(name, bin, &["--which".to_string()])?;
        if which.trim() != name && !name.starts_with(which.trim()) {
            eprintln!(
                "note: {} reports allocator {:?}, labelled {name:?}",
                bin.display(),
                which.trim()
            );
        }
    }
    Ok(())
}

/// The `--compare` mode.
pub fn run(opts: &Options) -> Result<(), String> {
    let builds = &opts.compare;
    check_builds(builds)?;
    let args = opts.child_args();
    let n = builds.len();
    let mut res = Results::default();
    for round in 0..opts.rounds {
        for b in rotation(round, n) {
            let (name, bin) = &builds[b];
            eprintln!("round {}/{}: {name}", round + 1, opts.rounds);
            let (csv, usage) = process::run(name, bin, &args)?;
            res.add(b, n, &csv, usage.max_rss_kib)?;
        }
    }
    print_table(opts, &res);
    Ok(())
}

fn print_table(opts: &Options, res: &Results) {
    let names: Vec<&str> = opts.compare.iter().map(|(n, _)| n.as_str()).collect();
    let reference = names.iter().position(|&n| n == "smalloc").unwrap_or(0);
    let others: Vec<usize> = (0..names.len()).filter(|&i| i != reference).collect();
    let source = match &opts.data {
        Some(d) => d.display().to_string(),
        None => format!("generated (scale {})", opts.scale),
    };
    println!(
        "simd-json-bench --compare: {} rounds, documents: {source}, threads: {}",
        opts.rounds, opts.threads
    );
    println!(
        "MB/s: median of {rounds} runs (±: median absolute deviation); ratio = {r} time / peer time \
         (= peer MB/s / {r} MB/s), below 1.00 = {r} faster",
        rounds = opts.rounds,
        r = names[reference]
    );
    print!("{:<22}{:<14}", "file", "parser");
    for n in &names {
        print!("{n:>16}");
    }
    for &o in &others {
        print!("{:>11}", format!("/{}", names[o]));
    }
    println!();
    let mut ratios = vec![Vec::new(); names.len()];
    let mut wins = vec![0usize; names.len()];
    for cell in &res.order {
        let runs = &res.mbps[cell];
        let med: Vec<f64> = runs.iter().map(|r| median(r)).collect();
        print!("{:<22}{:<14}", cell.0, cell.1);
        for r in runs {
            let s = format!("{:.1} ±{:.0}%", median(r), mad_pct(r));
            print!("{s:>16}");
        }
        for &o in &others {
            let ratio = med[o] / med[reference];
            ratios[o].push(ratio);
            if ratio < 1.0 {
                wins[o] += 1;
            }
            let mark = if ratio > 1.0 { "!" } else { " " };
            print!("{:>11}", format!("{ratio:.2}x{mark}"));
        }
        println!();
    }
    print!("{:<36}{:>w$}", "geometric mean", "", w = 16 * names.len());
    for &o in &others {
        print!("{:>11}", format!("{:.2}x", geomean(&ratios[o])));
    }
    println!();
    print!(
        "{:<36}{:>w$}",
        format!("{} faster in", names[reference]),
        "",
        w = 16 * names.len()
    );
    for &o in &others {
        print!("{:>11}", format!("{}/{}", wins[o], res.order.len()));
    }
    println!();
    print!("{:<36}", "peak RSS MiB (median)");
    for r in &res.rss {
        let mib: Vec<f64> = r.iter().map(|&k| k as f64 / 1024.0).collect();
        let s = if mib.is_empty() {
            "-".to_string()
        } else {
            format!("{:.1}", median(&mib))
        };
        print!("{s:>16}");
    }
    println!();
}
