//! Everyday allocation patterns through std collections,
//! so every allocation goes to the global allocator. Each iteration does a
//! fixed amount of work decided by tango's seed (the same on both sides of a
//! comparison) and touches the memory it gets.

use std::collections::{BTreeMap, HashMap};
use std::mem::MaybeUninit;

use devutils::Rng;
use tango_bench::{Benchmark, benchmark_fn};

/// `n` sizes drawn log-uniformly from `lo..=hi`.
fn sizes(seed: u64, n: usize, lo: usize, hi: usize) -> Vec<usize> {
    let mut rng = Rng::new(seed);
    (0..n).map(|_| rng.log_size(lo, hi)).collect()
}

/// A fresh block of `size` bytes (capacity only) whose first and last
/// bytes are written.
fn block(size: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(size);
    let spare: &mut [MaybeUninit<u8>] = v.spare_capacity_mut();
    spare[0].write(1);
    spare[size - 1].write(1);
    v
}

/// Allocates 256 blocks of `lo..=hi` bytes, then frees them all.
fn burst(name: &str, lo: usize, hi: usize) -> Benchmark {
    benchmark_fn(name, move |b| {
        let sizes = sizes(b.seed, 256, lo, hi);
        let mut held: Vec<Vec<u8>> = Vec::with_capacity(sizes.len());
        b.iter(move || {
            for &s in &sizes {
                held.push(block(s));
            }
            let n = held.len();
            held.clear();
            n
        })
    })
}

/// Keeps 512 live blocks of `lo..=hi` bytes and replaces 64 random ones
/// per iteration (steady-state churn, frees in random order).
fn churn(name: &str, lo: usize, hi: usize) -> Benchmark {
    benchmark_fn(name, move |b| {
        let mut rng = Rng::new(b.seed);
        let mut live: Vec<Vec<u8>> = (0..512).map(|_| block(rng.log_size(lo, hi))).collect();
        b.iter(move || {
            for _ in 0..64 {
                let i = rng.below(live.len() as u64) as usize;
                live[i] = block(rng.log_size(lo, hi));
            }
            live.len()
        })
    })
}

/// A `Vec<u64>` pushed to 8192 elements from empty (doubling reallocs).
fn vec_grow() -> Benchmark {
    benchmark_fn("vec-grow/64KiB", |b| {
        b.iter(|| {
            let mut v: Vec<u64> = Vec::new();
            for i in 0..8192 {
                v.push(i);
            }
            v.len()
        })
    })
}

/// 256 small formatted strings collected, then dropped.
fn strings() -> Benchmark {
    benchmark_fn("strings/256", |b| {
        b.iter(|| {
            let v: Vec<String> = (0..256).map(|i| format!("item-{i}-{}", i * 7)).collect();
            v.len()
        })
    })
}

/// A BTreeMap and a HashMap of 1000 random keys built, then dropped.
fn maps() -> [Benchmark; 2] {
    [
        benchmark_fn("btreemap/1000", |b| {
            let keys = sizes(b.seed, 1000, 1, 1 << 40);
            b.iter(move || {
                keys.iter()
                    .map(|&k| (k, k))
                    .collect::<BTreeMap<_, _>>()
                    .len()
            })
        }),
        benchmark_fn("hashmap/1000", |b| {
            let keys = sizes(b.seed, 1000, 1, 1 << 40);
            b.iter(move || {
                let mut m = HashMap::new();
                for &k in &keys {
                    m.insert(k, vec![k as u8; 16]);
                }
                m.len()
            })
        }),
    ]
}

/// serde_json parses a generated document of 200 records to a `Value`.
fn json() -> Benchmark {
    benchmark_fn("json/200-records", |b| {
        let mut rng = Rng::new(b.seed);
        let records: Vec<serde_json::Value> = (0..200)
            .map(|i| {
                let tags: Vec<String> = (0..rng.range(1, 6)).map(|t| format!("tag{t}")).collect();
                serde_json::json!({
                    "id": i,
                    "name": format!("record number {}", rng.below(1 << 20)),
                    "score": rng.below(1000) as f64 / 7.0,
                    "tags": tags,
                    "nested": { "a": [1, 2, 3], "b": null },
                })
            })
            .collect();
        let text = serde_json::to_string(&records).expect("serialize");
        b.iter(move || {
            let v: serde_json::Value = serde_json::from_str(&text).expect("parse");
            v.as_array().map_or(0, Vec::len)
        })
    })
}

/// Every benchmark, with names stable across commits (tango pairs the two
/// binaries' benchmarks by name).
pub fn all() -> Vec<Benchmark> {
    let mut v = vec![
        burst("burst/1-64B", 1, 64),
        burst("burst/64B-4KiB", 64, 4096),
        burst("burst/4-256KiB", 4096, 256 << 10),
        burst("burst/1MiB", 1 << 20, 1 << 20),
        churn("churn/16B-1KiB", 16, 1024),
        churn("churn/1-64KiB", 1024, 64 << 10),
        vec_grow(),
        strings(),
        json(),
    ];
    v.extend(maps());
    v
}
