//! Driver of the thread-local-state probe (see `run.sh`, `docs/tls.md`).
//!
//! Holds the executable-side schemes itself (`probe.rs` compiled in, the C
//! probe linked in), dlopens the libraries named in `TP_DL_LIBS`
//! (colon-separated), and finds the preloaded ones' loops with
//! `dlsym(RTLD_DEFAULT)`. Every loop is `extern "C" fn(u64) -> u64`.
//!
//! * `driver time ROUNDS N`: per round, every loop runs N accesses, in an
//!   order rotated each round; prints one raw row per loop and round:
//!   `loop round ns_per_access`.
//! * `driver summarize CG_TSV RAW_TSV...`: pools the raw rows of several
//!   `time` runs (one per process) and prints the markdown table.
//! * `driver count SYMBOL N`: runs one loop for 100 accesses (warm-up: lazy
//!   binding, first TLS touch), then N, then 2N (for callgrind with
//!   `--dump-after=SYMBOL`: the second and third dumps differ by exactly N).
//! * `driver list`: the loops found.

#[path = "probe.rs"]
mod probe;

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::time::Instant;

type Loop = extern "C" fn(u64) -> u64;

unsafe extern "C" {
    fn dlopen(path: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, name: *const c_char) -> *mut c_void;
    fn dlerror() -> *const c_char;
}

const RTLD_NOW: c_int = 2;

/// Loops looked up in the dlopened and preloaded libraries.
const SHARED: &[&str] = &[
    "rs_base_read",
    "rs_base_rw",
    "rs_ie_read",
    "rs_ie_rw",
    "rs_std_read",
    "rs_std_rw",
    "rs_pth_read",
    "rs_pth_rw",
    "rs_tp_read",
    "c_base_read",
    "c_base_rw",
    "c_gd_read",
    "c_gd_rw",
    "c_desc_read",
    "c_desc_rw",
    "c_ie_read",
    "c_ie_rw",
    "c_pth_read",
    "c_pth_rw",
];

/// Declares the C probe's executable-side loops and wraps each in a safe
/// `extern "C" fn` so the table holds one type.
macro_rules! c_exe_loops {
    ($($sym:ident => $short:literal),* $(,)?) => {{
        unsafe extern "C" {
            $(fn $sym(n: u64) -> u64;)*
        }
        [$({
            extern "C" fn wrap(n: u64) -> u64 {
                // SAFETY: defined in probe.c with this signature; it only
                // touches its own globals, TLS and pthread key.
                unsafe { $sym(n) }
            }
            ($short, wrap as Loop)
        }),*]
    }};
}

fn exe_loops() -> Vec<(String, Loop)> {
    let rs: [(&str, Loop); 9] = [
        ("rs_base_read", probe::loop_base_read),
        ("rs_base_rw", probe::loop_base_rw),
        ("rs_ie_read", probe::loop_ie_read),
        ("rs_ie_rw", probe::loop_ie_rw),
        ("rs_std_read", probe::loop_std_read),
        ("rs_std_rw", probe::loop_std_rw),
        ("rs_pth_read", probe::loop_pth_read),
        ("rs_pth_rw", probe::loop_pth_rw),
        ("rs_tp_read", probe::loop_tp_read),
    ];
    let c = c_exe_loops![
        tp_exe_c_base_read => "c_base_read",
        tp_exe_c_base_rw => "c_base_rw",
        tp_exe_c_le_read => "c_le_read",
        tp_exe_c_le_rw => "c_le_rw",
        tp_exe_c_pth_read => "c_pth_read",
        tp_exe_c_pth_rw => "c_pth_rw",
    ];
    rs.into_iter()
        .chain(c)
        .map(|(s, f)| (format!("tp_exe_{s}"), f))
        .collect()
}

fn lookup(handle: *mut c_void, name: &str) -> Option<Loop> {
    let c = CString::new(name).unwrap();
    // SAFETY: `handle` is a dlopen handle or RTLD_DEFAULT (null); `c` is a
    // valid C string.
    let p = unsafe { dlsym(handle, c.as_ptr()) };
    if p.is_null() {
        None
    } else {
        // SAFETY: every `tp_*` symbol the probes export is an
        // `extern "C" fn(u64) -> u64`.
        Some(unsafe { core::mem::transmute::<*mut c_void, Loop>(p) })
    }
}

fn all_loops() -> Vec<(String, Loop)> {
    let mut out = exe_loops();
    let mut handles = Vec::new();
    for path in std::env::var("TP_DL_LIBS")
        .unwrap_or_default()
        .split(':')
        .filter(|p| !p.is_empty())
    {
        let c = CString::new(path).unwrap();
        // SAFETY: a valid C string; the probe libraries' constructors only
        // create a pthread key.
        let h = unsafe { dlopen(c.as_ptr(), RTLD_NOW) };
        if h.is_null() {
            // SAFETY: dlerror returns a valid C string after a failure.
            let e = unsafe { CStr::from_ptr(dlerror()) };
            panic!("dlopen {path}: {}", e.to_string_lossy());
        }
        handles.push(h);
    }
    for s in SHARED {
        let name = format!("tp_dl_{s}");
        if let Some(f) = handles.iter().find_map(|&h| lookup(h, &name)) {
            out.push((name, f));
        }
    }
    for s in SHARED {
        let name = format!("tp_pre_{s}");
        if let Some(f) = lookup(core::ptr::null_mut(), &name) {
            out.push((name, f));
        }
    }
    out
}

fn quantile(sorted: &[f64], q: f64) -> f64 {
    let i = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (i.floor() as usize, i.ceil() as usize);
    sorted[lo] + (sorted[hi] - sorted[lo]) * (i - lo as f64)
}

/// `median [p25–p75]` of `v`, printed with `fmt`.
fn spread(mut v: Vec<f64>, fmt: fn(f64) -> String) -> String {
    v.sort_by(f64::total_cmp);
    let q = |x| fmt(quantile(&v, x));
    format!("{} [{}–{}]", q(0.5), q(0.25), q(0.75))
}

/// The loop a scheme is compared with: `base` (plain global) or `rs_ie`
/// (smalloc's scheme), same place and operation.
fn partner(name: &str, scheme: &str) -> String {
    let p: Vec<&str> = name.split('_').collect();
    match scheme {
        "base" => format!("tp_{}_{}_base_{}", p[1], p[2], p[4]),
        _ => format!("tp_{}_rs_ie_{}", p[1], p[4]),
    }
}

fn time(loops: &[(String, Loop)], rounds: usize, n: u64) {
    let mut sink = 0u64;
    for (_, f) in loops {
        sink = sink.wrapping_add(f(n));
    }
    let mut ns = vec![vec![0.0; rounds]; loops.len()];
    for r in 0..rounds {
        for k in 0..loops.len() {
            let i = (k + r) % loops.len();
            let t = Instant::now();
            sink = sink.wrapping_add(std::hint::black_box(loops[i].1)(n));
            ns[i][r] = t.elapsed().as_nanos() as f64 / n as f64;
        }
    }
    println!("# rounds={rounds} n={n} sink={sink}");
    for r in 0..rounds {
        for (i, (name, _)) in loops.iter().enumerate() {
            println!("{name}\t{r}\t{:.4}", ns[i][r]);
        }
    }
}

fn summarize(cg: &str, raws: &[String]) {
    use std::collections::BTreeMap;
    let ir: BTreeMap<String, f64> = std::fs::read_to_string(cg)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect();
    // (process, loop) -> ns per round; loops in first-seen order.
    let mut runs: Vec<BTreeMap<String, Vec<f64>>> = Vec::new();
    let mut order: Vec<String> = Vec::new();
    for path in raws {
        let mut m: BTreeMap<String, Vec<f64>> = BTreeMap::new();
        for l in std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
        {
            let f: Vec<&str> = l.split('\t').collect();
            if !order.iter().any(|o| o == f[0]) {
                order.push(f[0].to_string());
            }
            m.entry(f[0].to_string())
                .or_default()
                .push(f[2].parse().unwrap());
        }
        runs.push(m);
    }
    // Per-round values pooled over processes: the loop itself, its
    // difference from `base`, its ratio to `rs_ie` (same round, same process).
    let pooled = |name: &str, g: &dyn Fn(f64, &str, usize, usize) -> Option<f64>| -> Vec<f64> {
        let mut out = Vec::new();
        for (p, m) in runs.iter().enumerate() {
            for (r, &v) in m[name].iter().enumerate() {
                out.extend(g(v, name, p, r));
            }
        }
        out
    };
    let other = |p: usize, name: &str, r: usize| runs[p].get(name).map(|v| v[r]);
    let f2 = |x: f64| format!("{x:.2}");
    let s2 = |x: f64| format!("{x:+.2}");
    println!(
        "| loop | Ir/iter | ΔIr vs base | ns/iter median [p25–p75] | Δns vs base | × rs_ie | per-process medians |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for name in &order {
        let b = partner(name, "base");
        let e = partner(name, "ie");
        let irs = ir.get(name).map_or("-".into(), |x| format!("{x:.0}"));
        let dir = match (ir.get(name), ir.get(&b)) {
            (Some(x), Some(y)) => format!("{:+.0}", x - y),
            _ => "-".into(),
        };
        let all = pooled(name, &|v, _, _, _| Some(v));
        let d = pooled(name, &|v, _, p, r| other(p, &b, r).map(|x| v - x));
        let q = pooled(name, &|v, _, p, r| other(p, &e, r).map(|x| v / x));
        let per: Vec<String> = runs
            .iter()
            .map(|m| {
                let mut v = m[name].clone();
                v.sort_by(f64::total_cmp);
                f2(quantile(&v, 0.5))
            })
            .collect();
        let qs = if q.is_empty() {
            "-".into()
        } else {
            spread(q, f2)
        };
        println!(
            "| {} | {irs} | {dir} | {} | {} | {qs} | {} |",
            &name[3..],
            spread(all, f2),
            spread(d, s2),
            per.join(" / ")
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("summarize") {
        summarize(&args[2], &args[3..]);
        return;
    }
    let loops = all_loops();
    match args.get(1).map(String::as_str) {
        Some("list") => {
            for (name, _) in &loops {
                println!("{name}");
            }
        }
        Some("count") => {
            let (sym, n): (&str, u64) = (&args[2], args[3].parse().unwrap());
            let f = loops
                .iter()
                .find(|(name, _)| name == sym)
                .unwrap_or_else(|| panic!("no loop {sym}"))
                .1;
            let w = f(100);
            let a = f(n);
            let b = f(2 * n);
            println!("{sym} {w} {a} {b}");
        }
        Some("time") => time(&loops, args[2].parse().unwrap(), args[3].parse().unwrap()),
        _ => eprintln!("usage: driver list | count SYMBOL N | time ROUNDS N | summarize CG RAW..."),
    }
}
