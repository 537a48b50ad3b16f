//! `bench --compare` runs every workload with every allocator to the end
//! with tiny operation counts, and its machine formats parse. No timing
//! is asserted.

use std::process::Command;

const ALLOCS: usize = 6;

fn bench(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_bench"))
        .args(args)
        .output()
        .expect("bench runs");
    assert!(
        out.status.success(),
        "bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// The workload names `--list` prints.
fn workloads() -> Vec<String> {
    let out = bench(&["--list"]);
    out.lines()
        .skip_while(|l| !l.starts_with("workloads"))
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .collect()
}

#[test]
fn every_workload_runs_with_every_allocator_csv() {
    let out = bench(&[
        "--compare",
        "--iters",
        "64",
        "--batches",
        "1",
        "--warmup",
        "0",
        "--threads",
        "2,32",
        "--format",
        "csv",
    ]);
    let mut lines = out.lines();
    let header: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(
        header[..4],
        ["workload", "threads", "allocator", "median_ns"]
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    for r in &rows {
        assert_eq!(r.len(), header.len(), "{r:?}");
        let ns: f64 = r[3].parse().unwrap();
        assert!(ns.is_finite() && ns > 0.0, "{r:?}");
    }
    for w in workloads() {
        for t in ["1", "2", "32"] {
            let n = rows.iter().filter(|r| r[0] == w && r[1] == t).count();
            let single_ok = t != "1"
                || ![
                    "producer-consumer",
                    "false-share-active",
                    "false-share-passive",
                    "one-slab",
                    "one-slab-free",
                ]
                .contains(&w.as_str());
            assert_eq!(n, if single_ok { ALLOCS } else { 0 }, "{w}@{t}");
        }
    }
}

#[test]
fn json_parses_and_has_a_summary() {
    let out = bench(&[
        "--compare",
        "--iters",
        "200",
        "--batches",
        "2",
        "--warmup",
        "0",
        "--threads",
        "2",
        "--filter",
        "^(tiny|larson)@",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        let res = r["results"].as_array().unwrap();
        assert_eq!(res.len(), ALLOCS);
        assert_eq!(res[0]["allocator"], "smalloc");
        assert_eq!(res[1]["samples"].as_array().unwrap().len(), 2);
        assert!(res[1]["smalloc_ratio"].as_f64().unwrap() > 0.0);
    }
    let geo = v["summary"]["geomean_ratio"].as_object().unwrap();
    assert_eq!(geo.len(), ALLOCS - 1);
    assert!(v["summary"]["losses"].is_array());
}

#[test]
fn text_tables_summary_and_svg() {
    let svg = std::env::temp_dir().join(format!("bench-test-{}.svg", std::process::id()));
    let out = bench(&[
        "--compare",
        "--iters",
        "200",
        "--batches",
        "1",
        "--warmup",
        "0",
        "--threads",
        "2",
        "--filter",
        "tiny|one-slab@",
        "--svg",
        svg.to_str().unwrap(),
    ]);
    assert!(out.contains("== tiny:"), "{out}");
    assert!(out.contains("== one-slab:"), "{out}");
    assert!(out.contains("== summary"), "{out}");
    assert!(out.contains("vs rpmalloc"), "{out}");
    let s = std::fs::read_to_string(&svg).unwrap();
    std::fs::remove_file(&svg).unwrap();
    assert!(s.starts_with("<svg") && s.trim_end().ends_with("</svg>"));
    assert_eq!(s.matches("<svg").count(), 1);
    assert!(s.matches("<rect").count() > ALLOCS);
}

#[test]
fn isolate_reports_resource_use_per_allocator() {
    let out = bench(&[
        "--compare",
        "--isolate",
        "--iters",
        "200",
        "--batches",
        "1",
        "--warmup",
        "0",
        "--filter",
        "^small@1$",
        "--format",
        "json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).expect("valid JSON");
    let iso = v["isolate"].as_array().unwrap();
    assert_eq!(iso.len(), ALLOCS);
    for u in iso {
        assert!(u["peak_rss_kib"].as_u64().unwrap() > 0, "{u}");
        assert!(u["minor_faults"].as_u64().unwrap() > 0, "{u}");
    }
    assert_eq!(v["rows"].as_array().unwrap().len(), 1);
}

#[test]
fn smalloc_only_runs_without_peers() {
    let out = bench(&[
        "--compare",
        "--smalloc-only",
        "--iters",
        "100",
        "--batches",
        "1",
        "--warmup",
        "0",
        "--threads",
        "2",
        "--format",
        "csv",
    ]);
    assert!(out.lines().skip(1).all(|l| l.contains(",smalloc,")));
}

#[test]
fn bad_arguments_are_refused() {
    for args in [
        &["--compare", "--format", "xml"][..],
        &["--frobnicate"],
        &["--only", "tcmalloc"],
    ] {
        let st = Command::new(env!("CARGO_BIN_EXE_bench"))
            .args(args)
            .output()
            .unwrap();
        assert!(!st.status.success(), "{args:?}");
    }
}
