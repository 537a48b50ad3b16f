//! Command-line options.

use std::path::PathBuf;

use crate::measure::Parser;

pub const HELP: &str = "\
simd-json-bench: parse the JSON corpus with simd-json and serde_json; the
global allocator is chosen at build time by cargo feature.

usage: simd-json-bench [options]                 measure with this build's allocator
       simd-json-bench --compare NAME=BIN,...    run several builds interleaved, ratio table
       simd-json-bench --which                   print this build's allocator

options:
  --data DIR          read DIR/NAME.json for the seven corpus documents
                      (default: generated documents of the same shapes)
  --scale F           size of the generated documents, 1.0 = the real ones' (default 1)
  --files A,B         only these documents (apache_builds, canada, citm_catalog,
                      event_stacktrace_10kb, github_events, log, twitter)
  --parsers A,B       only these parsers (simd-borrowed, simd-owned, serde_json)
  --ms N              parse time per (document, parser) cell (default 200)
  --iters N           exactly N timed parses per cell instead of --ms
  --warmup N          untimed parses first (default 2)
  --threads N         N threads parse at once, throughput summed (default 1)
  --format text|csv   output (default text)
  --rounds N          with --compare: runs of each build (default 5)
";

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
    pub help: bool,
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

fn number<T: std::str::FromStr>(flag: &str, v: Option<String>) -> Result<T, String> {
    let v = v.ok_or_else(|| format!("{flag} needs a value"))?;
    v.parse()
        .map_err(|_| format!("{flag}: cannot parse {v:?} as a number"))
}

fn list(v: &str) -> Vec<String> {
    v.split(',')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// Parses the arguments after the program name.
pub fn parse(args: impl IntoIterator<Item = String>) -> Result<Options, String> {
    let mut o = Options {
        data: None,
        scale: 1.0,
        files: Vec::new(),
        parsers: Parser::ALL.to_vec(),
        ms: 200,
        iters: None,
        warmup: 2,
        threads: 1,
        csv: false,
        which: false,
        help: false,
        compare: Vec::new(),
        rounds: 5,
    };
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        match a.as_str() {
            "--data" => o.data = Some(args.next().ok_or("--data needs a directory")?.into()),
            "--scale" => o.scale = number("--scale", args.next())?,
            "--files" => o.files = list(&args.next().ok_or("--files needs a list")?),
            "--parsers" => {
                let names = list(&args.next().ok_or("--parsers needs a list")?);
                o.parsers = names
                    .iter()
                    .map(|n| Parser::from_name(n).ok_or(format!("unknown parser {n:?}")))
                    .collect::<Result<_, _>>()?;
            }
            "--ms" => o.ms = number("--ms", args.next())?,
            "--iters" => o.iters = Some(number("--iters", args.next())?),
            "--warmup" => o.warmup = number("--warmup", args.next())?,
            "--threads" => o.threads = number("--threads", args.next())?,
            "--rounds" => o.rounds = number("--rounds", args.next())?,
            "--format" => match args.next().as_deref() {
                Some("csv") => o.csv = true,
                Some("text") => o.csv = false,
                other => return Err(format!("--format: text or csv, not {other:?}")),
            },
            "--which" => o.which = true,
            "--compare" => {
                for item in list(&args.next().ok_or("--compare needs NAME=BIN,...")?) {
                    let (name, bin) = item
                        .split_once('=')
                        .ok_or(format!("--compare: {item:?} is not NAME=BIN"))?;
                    o.compare.push((name.to_string(), bin.into()));
                }
            }
            "-h" | "--help" => o.help = true,
            other => return Err(format!("unknown option {other:?} (see --help)")),
        }
    }
    if o.threads == 0 || o.rounds == 0 || o.scale <= 0.0 {
        return Err("--threads, --rounds and --scale must be positive".into());
    }
    Ok(o)
}
