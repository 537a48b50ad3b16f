//! `--isolate`: each allocator's pass in a child process (this program
//! again, with `--only NAME --format raw`), so that peak RSS, page faults
//! and CPU time, read with `wait4` ([`bench::process`]), belong to one
//! allocator.

use crate::cli::Config;
use crate::measure::{Cell, Row, RowSpec};
use crate::process::{self, Usage};
use crate::workloads;

/// The arguments that make a child repeat `c`'s run for `alloc` alone.
fn child_args(c: &Config, alloc: &str) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--compare".into(),
        "--only".into(),
        alloc.into(),
        "--format".into(),
        "raw".into(),
        "--batches".into(),
        c.batches.to_string(),
        "--warmup".into(),
        c.warmup.to_string(),
        "--seed".into(),
        c.seed.to_string(),
        "--threads".into(),
        c.threads
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(","),
    ];
    if let Some(n) = c.iters {
        v.extend(["--iters".into(), n.to_string()]);
    }
    if let Some(re) = &c.filter {
        v.extend(["--filter".into(), re.as_str().to_string()]);
    }
    if c.thorough {
        v.push("--thorough".into());
    }
    v
}

/// The raw line for one cell (what a child prints).
pub fn raw_line(spec: &RowSpec, cell: &Cell) -> String {
    let samples: Vec<String> = cell.samples.iter().map(|x| format!("{x}")).collect();
    format!(
        "row\t{}\t{}\t{}\t{}",
        spec.workload.name,
        spec.threads,
        cell.alloc,
        samples.join(",")
    )
}

fn parse_raw(line: &str) -> Option<(RowSpec, Cell)> {
    let f: Vec<&str> = line.split('\t').collect();
    if f.len() != 5 || f[0] != "row" {
        return None;
    }
    let spec = RowSpec {
        workload: workloads::by_name(f[1])?,
        threads: f[2].parse().ok()?,
    };
    let samples = f[4]
        .split(',')
        .map(|x| x.parse().ok())
        .collect::<Option<Vec<f64>>>()?;
    Some((
        spec,
        Cell {
            alloc: f[3].to_string(),
            samples,
        },
    ))
}

/// Runs one child for `alloc`; returns its rows and its resource use.
fn run_child(c: &Config, alloc: &str) -> Result<(Vec<(RowSpec, Cell)>, Usage), String> {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let (out, usage) = process::run(alloc, &exe, &child_args(c, alloc))?;
    Ok((out.lines().filter_map(parse_raw).collect(), usage))
}

/// Runs every allocator of `c` in its own child, one after another, and
/// merges their rows.
pub fn run(c: &Config) -> Result<(Vec<Row>, Vec<Usage>), String> {
    let specs = crate::measure::rows(c);
    let mut rows: Vec<Row> = specs
        .iter()
        .map(|s| Row {
            spec: *s,
            cells: Vec::new(),
        })
        .collect();
    let mut usages = Vec::new();
    for (i, alloc) in c.allocs.iter().enumerate() {
        eprintln!("[{}/{}] {alloc} in its own process", i + 1, c.allocs.len());
        let (cells, usage) = run_child(c, alloc)?;
        for (spec, cell) in cells {
            if let Some(r) = rows.iter_mut().find(|r| {
                r.spec.workload.name == spec.workload.name && r.spec.threads == spec.threads
            }) {
                r.cells.push(cell);
            }
        }
        usages.push(usage);
    }
    for r in &rows {
        if r.cells.len() != c.allocs.len() {
            return Err(format!("row {} is missing results", r.spec.label()));
        }
    }
    Ok((rows, usages))
}
