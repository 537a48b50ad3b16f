//! A Rust program with smalloc as its global allocator runs a realistic
//! workload (hash and tree maps of strings, vectors, threads handing data
//! to each other) under an address-space limit of 1 GiB and of 4 GiB
//! (`ulimit -v`), which refuses the reservation from the program's first
//! allocation on: every allocation is served from regions mapped on
//! demand. The program is this test binary, run again as a child
//! (`child_workload`) with the limit set before it starts.

use std::collections::{BTreeMap, HashMap};
use std::process::Command;
use std::sync::mpsc;
use std::thread;

use devutils::Rng;
use devutils::process::set_limit;
use smalloc::Smalloc;
use smalloc::stats::{self, Geometry, Why};

#[global_allocator]
static A: Smalloc = Smalloc::new();

/// Set in the child's environment to the limit it runs under.
const CHILD: &str = "SMALLOC_TEST_WORKLOAD_LIMIT";

/// One worker's part: builds maps of strings and vectors, checks them,
/// and sends a summary of what it built to the collector.
fn work(seed: u64, out: mpsc::Sender<(u64, Vec<String>)>) {
    let mut rng = Rng::new(seed);
    for round in 0..3 {
        let mut by_name: HashMap<String, Vec<u32>> = HashMap::new();
        let mut ordered: BTreeMap<u64, String> = BTreeMap::new();
        for i in 0..60_000u64 {
            let key = format!("worker {seed} round {round} item {i} {}", rng.below(1000));
            let len = rng.range(1, 64) as usize;
            let values: Vec<u32> = (0..len as u32).map(|v| v ^ i as u32).collect();
            ordered.insert(rng.next_u64(), key.repeat(1 + (i % 3) as usize));
            by_name.insert(key, values);
        }
        let sum: u64 = by_name
            .iter()
            .map(|(k, v)| k.len() as u64 + v.iter().map(|&x| u64::from(x)).sum::<u64>())
            .sum();
        let longest: Vec<String> = ordered.values().take(100).cloned().collect();
        out.send((sum, longest)).unwrap();
    }
}

/// Run only as the child, under the limit its environment names.
#[test]
#[ignore = "the child of the workload_under_* tests"]
fn child_workload() {
    // The figures below count slots handed out since the purge last reset a
    // region: no purge.
    smalloc::set_purge_delay(std::time::Duration::ZERO);
    let Some(limit) = std::env::var(CHILD)
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    else {
        return;
    };
    let (tx, rx) = mpsc::channel();
    let workers: Vec<_> = (0..4)
        .map(|w| {
            let tx = tx.clone();
            thread::spawn(move || work(w, tx))
        })
        .collect();
    drop(tx);
    // Strings made on the workers' threads, freed on this one.
    let mut total = 0u64;
    let mut kept = Vec::new();
    for (sum, longest) in rx {
        total = total.wrapping_add(sum);
        kept.extend(longest);
    }
    workers.into_iter().for_each(|w| w.join().unwrap());
    assert_eq!(kept.len(), 4 * 3 * 100);
    let s = stats::snapshot();
    assert_eq!(
        s.geometry,
        Geometry::OnDemand(Why::AddressSpaceLimit(limit))
    );
    assert!(
        s.handed_out_bytes() > 50 << 20,
        "smalloc served the workload"
    );
    println!("WORKLOAD OK {total} {}", s.handed_out_bytes());
}

/// Runs the child under an address-space limit of `limit` bytes.
fn under(limit: u64) {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_workload", "--ignored", "--nocapture"])
        .env(CHILD, limit.to_string());
    // SAFETY: the closure makes async-signal-safe system calls only.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut cmd, move || {
            set_limit(libc::RLIMIT_AS, limit);
            Ok(())
        })
    };
    let out = devutils::run_ok(&mut cmd);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find(|l| l.starts_with("WORKLOAD OK"));
    eprintln!("{line:?}");
    assert!(line.is_some(), "the child did not finish: {stdout}");
}

#[test]
fn workload_under_1_gib() {
    under(1 << 30);
}

#[test]
fn workload_under_4_gib() {
    under(4 << 30);
}
