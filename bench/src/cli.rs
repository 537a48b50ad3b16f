//! Command-line options.

use regex::Regex;

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Tables for people.
    Text,
    /// One line per (row, allocator).
    Csv,
    /// One document.
    Json,
    /// Internal: what an `--isolate` child prints to its parent.
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

/// Help text.
pub const USAGE: &str = "\
usage: bench --compare [options]

  --compare          run every workload with every allocator and compare
  --smalloc-only     run smalloc alone (no peers)
  --only A,B         run only these allocators (smalloc, system, mimalloc,
                     jemalloc, snmalloc, rpmalloc)
  --threads N[,M..]  multi-threaded thread counts (default: cores and 32);
                     single-threaded rows always run
  --iters N          operations per batch for every workload
                     (default: per workload, see --list)
  --batches N        measured batches per allocator and row (default 7)
  --warmup N         warm-up batches per allocator and row (default 1)
  --seed N           seed of the random choices (default 1)
  --filter REGEX     only rows whose label (e.g. tiny@1, larson@32) matches
  --thorough         3x the operations per batch and 21 batches
  --format F         text (default), csv or json
  --isolate          run each allocator in its own child process and report
                     its peak RSS, page faults and CPU time
  --svg FILE         also write the summary as an SVG bar chart
  --list             list the workloads and allocators
";

fn num<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse().map_err(|_| format!("{flag}: cannot parse {v:?}"))
}

/// Parses the arguments (without the program name).
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Config, String> {
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let mut c = Config {
        compare: false,
        allocs: crate::allocators::all_names()
            .into_iter()
            .map(String::from)
            .collect(),
        threads: vec![cores, 32],
        iters: None,
        batches: 7,
        warmup: 1,
        seed: 1,
        filter: None,
        thorough: false,
        format: Format::Text,
        isolate: false,
        svg: None,
        list: false,
    };
    let mut batches = None;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--compare" => c.compare = true,
            "--smalloc-only" => c.allocs = vec!["smalloc".into()],
            "--only" => {
                let v: String = num("--only", it.next())?;
                c.allocs = v.split(',').map(String::from).collect();
            }
            "--threads" => {
                let v: String = num("--threads", it.next())?;
                c.threads = v
                    .split(',')
                    .map(|x| num("--threads", Some(x.to_string())))
                    .collect::<Result<_, _>>()?;
                if c.threads.contains(&0) {
                    return Err("--threads: counts must be at least 1".into());
                }
            }
            "--iters" => c.iters = Some(num("--iters", it.next())?),
            "--batches" => batches = Some(num::<usize>("--batches", it.next())?.max(1)),
            "--warmup" => c.warmup = num("--warmup", it.next())?,
            "--seed" => c.seed = num("--seed", it.next())?,
            "--filter" => {
                let v: String = num("--filter", it.next())?;
                c.filter = Some(Regex::new(&v).map_err(|e| format!("--filter: {e}"))?);
            }
            "--thorough" => c.thorough = true,
            "--format" => {
                c.format = match num::<String>("--format", it.next())?.as_str() {
                    "text" => Format::Text,
                    "csv" => Format::Csv,
                    "json" => Format::Json,
                    "raw" => Format::Raw,
                    f => return Err(format!("--format: unknown format {f:?}")),
                }
            }
            "--isolate" => c.isolate = true,
            "--svg" => c.svg = Some(num("--svg", it.next())?),
            "--list" => c.list = true,
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    c.batches = batches.unwrap_or(if c.thorough { 21 } else { 7 });
    let known = crate::allocators::all_names();
    if let Some(bad) = c.allocs.iter().find(|a| !known.contains(&a.as_str())) {
        return Err(format!(
            "allocator {bad:?} is not in this build (have: {})",
            known.join(", ")
        ));
    }
    Ok(c)
}
