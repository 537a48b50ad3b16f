//! Command-line options.

use clap::error::ErrorKind;
use clap::{CommandFactory, Parser, ValueEnum};
use regex::Regex;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Tables for people.
    Text,
    /// One line per (row, allocator).
    Csv,
    /// One document.
    Json,
    /// Internal: what an `--isolate` child prints to its parent.
    #[value(hide = true)]
    Raw,
}

/// Everything the command line says.
#[derive(Clone, Debug)]
pub struct Config {
    /// `--compare` was given (otherwise: print help).
    pub compare: bool,
    /// Allocators to run, smalloc first.
    pub allocs: Vec<String>,
    /// Multi-threaded counts (1 is always run too).
    pub threads: Vec<usize>,
    /// `--iters`: operations per batch for every workload.
    pub iters: Option<u64>,
    /// Measured batches per (row, allocator).
    pub batches: usize,
    /// Warm-up batches per (row, allocator).
    pub warmup: usize,
    /// Base seed.
    pub seed: u64,
    /// `--filter`: rows whose `name@threads` label matches.
    pub filter: Option<Regex>,
    /// `--thorough`: more batches and longer ones.
    pub thorough: bool,
    /// Output format.
    pub format: Format,
    /// `--isolate`: each allocator in its own child process.
    pub isolate: bool,
    /// `--svg FILE`.
    pub svg: Option<String>,
    /// `--list`: list workloads and allocators.
    pub list: bool,
}

/// The command line as clap sees it; [`parse`] turns it into a [`Config`].
#[derive(Parser, Debug)]
#[command(
    name = "bench",
    about = "smalloc against glibc, mimalloc, jemalloc, snmalloc and rpmalloc, side by side"
)]
struct Args {
    /// Run every workload with every allocator and compare
    #[arg(long)]
    compare: bool,
    /// Run smalloc alone (no peers)
    #[arg(long, conflicts_with = "only")]
    smalloc_only: bool,
    /// Run only these allocators (smalloc, system, mimalloc, jemalloc, snmalloc, rpmalloc)
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    only: Vec<String>,
    /// Multi-threaded thread counts (default: cores and 32); single-threaded rows always run
    #[arg(long, value_name = "N,M", value_delimiter = ',')]
    threads: Vec<usize>,
    /// Operations per batch for every workload (default: per workload, see --list)
    #[arg(long, value_name = "N")]
    iters: Option<u64>,
    /// Measured batches per allocator and row (default 7, with --thorough 21)
    #[arg(long, value_name = "N")]
    batches: Option<usize>,
    /// Warm-up batches per allocator and row
    #[arg(long, value_name = "N", default_value_t = 1)]
    warmup: usize,
    /// Seed of the random choices
    #[arg(long, value_name = "N", default_value_t = 1)]
    seed: u64,
    /// Only rows whose label (e.g. tiny@1, larson@32) matches
    #[arg(long, value_name = "REGEX")]
    filter: Option<Regex>,
    /// 3x the operations per batch and 21 batches
    #[arg(long)]
    thorough: bool,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Text)]
    format: Format,
    /// Run each allocator in its own child process and report its peak RSS, page faults and CPU time
    #[arg(long)]
    isolate: bool,
    /// Also write the summary as an SVG bar chart
    #[arg(long, value_name = "FILE")]
    svg: Option<String>,
    /// List the workloads and allocators
    #[arg(long)]
    list: bool,
}

/// Parses the process's command line; exits with clap's message on an
/// error or for `--help`.
pub fn parse() -> Config {
    let a = Args::parse();
    if a.threads.contains(&0) {
        Args::command()
            .error(
                ErrorKind::ValueValidation,
                "--threads: counts must be at least 1",
            )
            .exit();
    }
    let known = crate::allocators::all_names();
    let allocs: Vec<String> = if a.smalloc_only {
        vec!["smalloc".into()]
    } else if a.only.is_empty() {
        known.iter().map(|s| s.to_string()).collect()
    } else {
        a.only
    };
    if let Some(bad) = allocs.iter().find(|x| !known.contains(&x.as_str())) {
        Args::command()
            .error(
                ErrorKind::InvalidValue,
                format!(
                    "allocator {bad:?} is not in this build (have: {})",
                    known.join(", ")
                ),
            )
            .exit();
    }
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    Config {
        compare: a.compare,
        allocs,
        threads: if a.threads.is_empty() {
            vec![cores, 32]
        } else {
            a.threads
        },
        iters: a.iters,
        batches: a
            .batches
            .map_or(if a.thorough { 21 } else { 7 }, |b| b.max(1)),
        warmup: a.warmup,
        seed: a.seed,
        filter: a.filter,
        thorough: a.thorough,
        format: a.format,
        isolate: a.isolate,
        svg: a.svg,
        list: a.list,
    }
}

/// Prints the help (for a run without `--compare` or `--list`).
pub fn print_help() {
    let _ = Args::command().print_help();
}
