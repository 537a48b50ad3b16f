//! simd-json-bench runs to the end with tiny budgets: on generated
//! documents, on the real corpus when `../shared/json-corpus` is there, and
//! in `--compare` mode (the same build twice, under two labels). No timing
//! is asserted. Only this package's default build (the system allocator)
//! is used; run.sh builds the others.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bench(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_simd-json-bench"))
        .args(args)
        .output()
        .expect("simd-json-bench runs")
}

fn ok(args: &[&str]) -> String {
    let out = bench(args);
    assert!(
        out.status.success(),
        "simd-json-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Checks the CSV of one run: `cells` rows with positive throughput.
fn check_csv(out: &str, cells: usize) {
    let mut lines = out.lines();
    assert_eq!(
        lines.next(),
        Some("allocator,file,parser,bytes,iters,mb_per_s")
    );
    let rows: Vec<Vec<&str>> = lines
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(',').collect())
        .collect();
    assert_eq!(rows.len(), cells, "{out}");
    for r in rows {
        assert_eq!(r[0], "system");
        let mbps: f64 = r[5].parse().unwrap();
        assert!(mbps.is_finite() && mbps > 0.0, "{r:?}");
        assert_eq!(r[4], "1", "{r:?}");
    }
    let rss = out.lines().find(|l| l.starts_with("# peak_rss_kib,"));
    assert!(rss.is_some(), "{out}");
}

#[test]
fn parses_every_generated_document_with_every_parser() {
    let out = ok(&[
        "--scale", "0.05", "--iters", "1", "--warmup", "0", "--format", "csv",
    ]);
    check_csv(&out, 7 * 3);
}

#[test]
fn parses_the_real_corpus_when_present() {
    let corpus = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/json-corpus");
    if !corpus.join("twitter.json").is_file() {
        eprintln!("skipped: no corpus at {}", corpus.display());
        return;
    }
    let dir = corpus.to_str().unwrap();
    let out = ok(&[
        "--data", dir, "--iters", "1", "--warmup", "0", "--format", "csv",
    ]);
    check_csv(&out, 7 * 3);
}

#[test]
fn compare_prints_a_ratio_table() {
    let bin = env!("CARGO_BIN_EXE_simd-json-bench");
    let builds = format!("smalloc={bin},system={bin}");
    let out = ok(&[
        "--compare",
        &builds,
        "--rounds",
        "2",
        "--scale",
        "0.02",
        "--iters",
        "1",
        "--warmup",
        "0",
        "--files",
        "log,twitter",
        "--parsers",
        "simd-borrowed,serde_json",
    ]);
    assert!(out.contains("/system"), "{out}");
    let rows = out
        .lines()
        .filter(|l| l.starts_with("log ") || l.starts_with("twitter "))
        .count();
    assert_eq!(rows, 4, "{out}");
    assert!(out.contains("geometric mean"), "{out}");
    assert!(out.contains("peak RSS MiB"), "{out}");
}

#[test]
fn reports_its_allocator_and_rejects_bad_options() {
    assert_eq!(ok(&["--which"]).trim(), "system");
    assert_eq!(bench(&["--bogus"]).status.code(), Some(2));
    assert_eq!(bench(&["--files", "nope"]).status.code(), Some(1));
}
