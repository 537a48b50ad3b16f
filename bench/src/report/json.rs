//! JSON: one document with the machine, every row's cells, the summary
//! and (with `--isolate`) each allocator's resource use. Numbers that are
//! not finite become `null`.

use serde_json::{Map, Value, json};

use super::{Analysis, cell_summary, machine, ratio};
use crate::measure::Row;
use crate::process::Usage;

/// Renders the document.
pub fn render(rows: &[Row], an: &Analysis, usage: &[Usage]) -> String {
    let (cpu, cores) = machine();
    let rows: Vec<Value> = rows
        .iter()
        .map(|r| {
            let results: Vec<Value> = r
                .cells
                .iter()
                .map(|c| {
                    let x = cell_summary(r, &c.alloc).expect("cell exists");
                    let ratio = if c.alloc == "smalloc" {
                        None
                    } else {
                        ratio(r, &c.alloc)
                    };
                    json!({
                        "allocator": c.alloc,
                        "median_ns": x.median,
                        "min_ns": x.min,
                        "max_ns": x.max,
                        "mad_pct": x.mad_pct,
                        "smalloc_ratio": ratio,
                        "samples": c.samples,
                    })
                })
                .collect();
            json!({
                "workload": r.spec.workload.name,
                "threads": r.spec.threads,
                "label": r.spec.label(),
                "results": results,
            })
        })
        .collect();
    let geomean: Map<String, Value> = an
        .peers
        .iter()
        .map(|p| {
            let v = json!({"ratio": p.geomean, "wins": p.wins, "rows": p.rows});
            (p.peer.clone(), v)
        })
        .collect();
    let losses: Vec<Value> = an
        .losses
        .iter()
        .map(|l| {
            json!({
                "label": l.label,
                "peer": l.peer,
                "ratio": l.ratio,
                "smalloc_ns": l.smalloc_ns,
                "peer_ns": l.peer_ns,
            })
        })
        .collect();
    let isolate: Vec<Value> = usage
        .iter()
        .map(|u| {
            json!({
                "allocator": u.alloc,
                "peak_rss_kib": u.max_rss_kib,
                "minor_faults": u.minflt,
                "major_faults": u.majflt,
                "user_s": u.user_s,
                "sys_s": u.sys_s,
                "wall_s": u.wall_s,
            })
        })
        .collect();
    let doc = json!({
        "machine": {"cpu": cpu, "cores": cores},
        "unit": "ns_per_op",
        "rows": rows,
        "summary": {"geomean_ratio": geomean, "losses": losses},
        "isolate": isolate,
    });
    format!("{doc}\n")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn numbers_that_are_not_finite_are_null() {
        assert_eq!(
            json!({"x": f64::NAN, "y": 1.5}).to_string(),
            r#"{"x":null,"y":1.5}"#
        );
    }
}
