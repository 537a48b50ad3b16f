//! Turning measured rows into tables, CSV, JSON and a chart.

pub mod csv;
pub mod json;
pub mod svg;
pub mod text;

use crate::measure::Row;
use devutils::stats::{Summary, geomean, summarize};

/// smalloc's median over a peer's median in `row` (below 1: smalloc is
/// faster), if both ran.
pub fn ratio(row: &Row, peer: &str) -> Option<f64> {
    let med = |name: &str| {
        row.cells
            .iter()
            .find(|c| c.alloc == name)
            .map(|c| summarize(&c.samples).median)
    };
    Some(med("smalloc")? / med(peer)?)
}

/// The summary over all rows against one peer.
#[derive(Clone, Debug)]
pub struct PeerSummary {
    /// Peer name.
    pub peer: String,
    /// Geometric mean of the per-row ratios.
    pub geomean: f64,
    /// Rows where smalloc was faster.
    pub wins: usize,
    /// Rows compared.
    pub rows: usize,
}

/// A row where smalloc was slower than a peer.
#[derive(Clone, Debug)]
pub struct Loss {
    /// Row label.
    pub label: String,
    /// The faster peer.
    pub peer: String,
    /// smalloc / peer.
    pub ratio: f64,
    /// smalloc's median ns/op.
    pub smalloc_ns: f64,
    /// The peer's median ns/op.
    pub peer_ns: f64,
}

/// Everything the summary says.
#[derive(Clone, Debug, Default)]
pub struct Analysis {
    /// One entry per peer that ran with smalloc.
    pub peers: Vec<PeerSummary>,
    /// Rows where smalloc lost, worst first.
    pub losses: Vec<Loss>,
}

/// The peers that ran (every allocator but smalloc).
pub fn peers(rows: &[Row]) -> Vec<String> {
    rows.first()
        .map(|r| {
            r.cells
                .iter()
                .map(|c| c.alloc.clone())
                .filter(|a| a != "smalloc")
                .collect()
        })
        .unwrap_or_default()
}

/// Summary of a cell by allocator name.
pub fn cell_summary(row: &Row, alloc: &str) -> Option<Summary> {
    row.cells
        .iter()
        .find(|c| c.alloc == alloc)
        .map(|c| summarize(&c.samples))
}

/// Computes the summary.
pub fn analyze(rows: &[Row]) -> Analysis {
    let mut a = Analysis::default();
    for peer in peers(rows) {
        let ratios: Vec<f64> = rows.iter().filter_map(|r| ratio(r, &peer)).collect();
        for r in rows {
            if let Some(x) = ratio(r, &peer).filter(|&x| x > 1.0) {
                a.losses.push(Loss {
                    label: r.spec.label(),
                    peer: peer.clone(),
                    ratio: x,
                    smalloc_ns: cell_summary(r, "smalloc").map_or(f64::NAN, |s| s.median),
                    peer_ns: cell_summary(r, &peer).map_or(f64::NAN, |s| s.median),
                });
            }
        }
        a.peers.push(PeerSummary {
            peer,
            geomean: geomean(&ratios),
            wins: ratios.iter().filter(|&&x| x < 1.0).count(),
            rows: ratios.len(),
        });
    }
    a.losses.sort_by(|x, y| y.ratio.total_cmp(&x.ratio));
    a
}

/// The CPU model and the number of cores of this machine.
pub fn machine() -> (String, usize) {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|m| m.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cpu, cores)
}
