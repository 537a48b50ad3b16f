//! Command-line options.

use std::path::PathBuf;

use crate::measure::Parser;

/// Parsed options.
#[derive(Clone, Debug)]
pub struct Options {
    pub data: Option<PathBuf>,
    pub scale: f64,
    pub files: Vec<String>,
    pub parsers: Vec<Parser>,
    pub ms: u64,
    pub iters: Option<u64>,
    pub warmup: u64,
    pub threads: usize,
    pub csv: bool,
    pub which: bool,
    /// `--compare`: (name, binary) of each build.
    pub compare: Vec<(String, PathBuf)>,
    pub rounds: usize,
}

impl Options {
    /// The options of a child run in `--compare` mode (CSV output).
    pub fn child_args(&self) -> Vec<String> {
        let mut a = Vec::new();
        if let Some(d) = &self.data {
            a.extend(["--data".into(), d.display().to_string()]);
        }
        a.extend(["--scale".into(), self.scale.to_string()]);
        if !self.files.is_empty() {
            a.extend(["--files".into(), self.files.join(",")]);
        }
        let parsers: Vec<&str> = self.parsers.iter().map(|p| p.name()).collect();
        a.extend(["--parsers".into(), parsers.join(",")]);
        a.extend(["--ms".into(), self.ms.to_string()]);
        if let Some(n) = self.iters {
            a.extend(["--iters".into(), n.to_string()]);
        }
        a.extend(["--warmup".into(), self.warmup.to_string()]);
        a.extend(["--threads".into(), self.threads.to_string()]);
        a.extend(["--format".into(), "csv".into()]);
        a
    }
}

/// The command line as clap sees it; [`parse`] turns it into [`Options`].
#[derive(clap::Parser, Debug)]
#[command(
    name = "simd-json-bench",
    about = "Parse the JSON corpus with simd-json and serde_json; the global allocator is \
             chosen at build time by cargo feature. Without --compare or --which: measure with \
             this build's allocator."
)]
struct Args {
    /// Read DIR/NAME.json for the seven corpus documents (default: generated documents of
    /// the same shapes)
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Size of the generated documents, 1.0 = the real ones'
    #[arg(long, value_name = "F", default_value_t = 1.0)]
    scale: f64,
    /// Only these documents (apache_builds, canada, citm_catalog, event_stacktrace_10kb,
    /// github_events, log, twitter)
    #[arg(long, value_name = "A,B", value_delimiter = ',')]
    files: Vec<String>,
    /// Only these parsers (simd-borrowed, simd-owned, serde_json)
    #[arg(long, value_name = "A,B", value_delimiter = ',', value_parser = parser)]
    parsers: Vec<Parser>,
    /// Parse time per (document, parser) cell
    #[arg(long, value_name = "N", default_value_t = 200)]
    ms: u64,
    /// Exactly N timed parses per cell instead of --ms
    #[arg(long, value_name = "N")]
    iters: Option<u64>,
    /// Untimed parses first
    #[arg(long, value_name = "N", default_value_t = 2)]
    warmup: u64,
    /// N threads parse at once, throughput summed
    #[arg(long, value_name = "N", default_value_t = 1)]
    threads: usize,
    /// Output format
    #[arg(long, value_parser = ["text", "csv"], default_value = "text")]
    format: String,
    /// Print this build's allocator
    #[arg(long)]
    which: bool,
    /// Run several builds interleaved and print a ratio table
    #[arg(long, value_name = "NAME=BIN,...", value_delimiter = ',', value_parser = build)]
    compare: Vec<(String, PathBuf)>,
    /// With --compare: runs of each build
    #[arg(long, value_name = "N", default_value_t = 5)]
    rounds: usize,
}

fn parser(name: &str) -> Result<Parser, String> {
    Parser::from_name(name).ok_or(format!("unknown parser {name:?}"))
}

fn build(item: &str) -> Result<(String, PathBuf), String> {
    let (name, bin) = item
        .split_once('=')
        .ok_or(format!("{item:?} is not NAME=BIN"))?;
    Ok((name.to_string(), bin.into()))
}

/// Parses the process's command line; exits with clap's message on an
/// error or for `--help`.
pub fn parse() -> Options {
    use clap::{CommandFactory, Parser as _};
    let a = Args::parse();
    if a.threads == 0 || a.rounds == 0 || a.scale <= 0.0 {
        Args::command()
            .error(
                clap::error::ErrorKind::ValueValidation,
                "--threads, --rounds and --scale must be positive",
            )
            .exit();
    }
    Options {
        data: a.data,
        scale: a.scale,
        files: a.files,
        parsers: if a.parsers.is_empty() {
            Parser::ALL.to_vec()
        } else {
            a.parsers
        },
        ms: a.ms,
        iters: a.iters,
        warmup: a.warmup,
        threads: a.threads,
        csv: a.format == "csv",
        which: a.which,
        compare: a.compare,
        rounds: a.rounds,
    }
}
