//! Tables for people.

use std::fmt::Write;

use super::{Analysis, cell_summary, machine, peers, ratio};
use crate::measure::Row;
use crate::process::Usage;

/// Formats ns/op with about three significant digits.
fn ns(x: f64) -> String {
    if x >= 1000.0 {
        format!("{x:.0}")
    } else if x >= 100.0 {
        format!("{x:.1}")
    } else {
        format!("{x:.2}")
    }
}

/// Renders the per-workload tables, the summary and (if given) the
/// per-allocator resource use.
pub fn render(rows: &[Row], an: &Analysis, usage: &[Usage], batches: usize) -> String {
    let mut s = String::new();
    let (cpu, cores) = machine();
    let _ = writeln!(s, "bench --compare on {cpu}, {cores} cores");
    let _ = writeln!(
        s,
        "ns per op: median of {batches} batches (±: median absolute deviation); \
         ratio = smalloc / peer, below 1.00 = smalloc faster"
    );
    let allocs: Vec<String> = rows
        .first()
        .map(|r| r.cells.iter().map(|c| c.alloc.clone()).collect())
        .unwrap_or_default();
    let peers = peers(rows);
    let mut i = 0;
    while i < rows.len() {
        let w = rows[i].spec.workload;
        let _ = writeln!(s, "\n== {}: {}", w.name, w.about);
        let _ = write!(s, "{:>7}", "threads");
        for a in &allocs {
            let _ = write!(s, " {a:>15}");
        }
        for p in &peers {
            let _ = write!(s, " {:>10}", format!("/{p}"));
        }
        s.push('\n');
        while i < rows.len() && rows[i].spec.workload.name == w.name {
            let r = &rows[i];
            let _ = write!(s, "{:>7}", r.spec.threads);
            for a in &allocs {
                let cell = cell_summary(r, a).map_or("-".into(), |x| {
                    format!("{} ±{:.0}%", ns(x.median), x.mad_pct)
                });
                let _ = write!(s, " {cell:>15}");
            }
            for p in &peers {
                let cell = ratio(r, p).map_or("-".into(), |x| {
                    format!("{x:.2}x{}", if x > 1.0 { "!" } else { " " })
                });
                let _ = write!(s, " {cell:>10}");
            }
            s.push('\n');
            i += 1;
        }
    }
    if !an.peers.is_empty() {
        let _ = writeln!(
            s,
            "\n== summary: smalloc time / peer time, geometric mean over all rows \
             (below 1.00 = smalloc faster)"
        );
        for p in &an.peers {
            let _ = writeln!(
                s,
                "  vs {:<10} {:>6.2}x   smalloc faster in {}/{} rows",
                p.peer, p.geomean, p.wins, p.rows
            );
        }
        let _ = writeln!(
            s,
            "\n== rows where smalloc is slower (ratio > 1.00), worst first"
        );
        if an.losses.is_empty() {
            let _ = writeln!(s, "  none");
        }
        for l in &an.losses {
            let _ = writeln!(
                s,
                "  {:<26} vs {:<9} {:>6.2}x  (smalloc {} ns/op, {} {} ns/op)",
                l.label,
                l.peer,
                l.ratio,
                ns(l.smalloc_ns),
                l.peer,
                ns(l.peer_ns)
            );
        }
    }
    if !usage.is_empty() {
        let _ = writeln!(
            s,
            "\n== per-allocator process (--isolate): the whole pass of each allocator"
        );
        let _ = writeln!(
            s,
            "{:<10} {:>14} {:>14} {:>10} {:>9} {:>9} {:>9}",
            "allocator", "peak RSS MiB", "minor faults", "major", "user s", "sys s", "wall s"
        );
        for u in usage {
            let _ = writeln!(
                s,
                "{:<10} {:>14.1} {:>14} {:>10} {:>9.2} {:>9.2} {:>9.2}",
                u.alloc,
                u.max_rss_kib as f64 / 1024.0,
                u.minflt,
                u.majflt,
                u.user_s,
                u.sys_s,
                u.wall_s
            );
        }
    }
    s
}
