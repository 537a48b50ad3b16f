//! CSV: one line per (row, allocator).

use std::fmt::Write;

use super::{cell_summary, ratio};
use crate::measure::Row;
use crate::process::Usage;

/// The header line.
pub const HEADER: &str = "workload,threads,allocator,median_ns,min_ns,max_ns,mad_pct,batches,\
smalloc_ratio,peak_rss_kib,minor_faults,major_faults";

/// Renders the CSV (the isolate columns are empty without `--isolate`).
pub fn render(rows: &[Row], usage: &[Usage]) -> String {
    let mut s = String::from(HEADER);
    s.push('\n');
    for r in rows {
        for c in &r.cells {
            let x = cell_summary(r, &c.alloc).expect("cell exists");
            let ratio = if c.alloc == "smalloc" {
                "1".to_string()
            } else {
                ratio(r, &c.alloc).map_or(String::new(), |v| format!("{v:.4}"))
            };
            let u = usage.iter().find(|u| u.alloc == c.alloc);
            let _ = writeln!(
                s,
                "{},{},{},{:.3},{:.3},{:.3},{:.2},{},{},{},{},{}",
                r.spec.workload.name,
                r.spec.threads,
                c.alloc,
                x.median,
                x.min,
                x.max,
                x.mad_pct,
                c.samples.len(),
                ratio,
                u.map_or(String::new(), |u| u.max_rss_kib.to_string()),
                u.map_or(String::new(), |u| u.minflt.to_string()),
                u.map_or(String::new(), |u| u.majflt.to_string()),
            );
        }
    }
    s
}
