//! Driver of the thread-local-state probe (see `run.sh`, `docs/tls.md`).
//!
//! Holds the executable-side schemes itself (`probe.rs` compiled in, the C
//! probe linked in), dlopens the libraries named in `TP_DL_LIBS`
//! (colon-separated), and finds the preloaded ones' loops with
//! `dlsym(RTLD_DEFAULT)`. Every loop is `extern "C" fn(u64) -> u64`.
//!
//! * `driver time ROUNDS N`: per round, every loop runs N accesses, in an
//!   order rotated each round; prints ns/access median, quartiles, min, max.
//! * `driver count SYMBOL N`: runs one loop for N then 2N accesses (for
//!   callgrind with `--dump-after=SYMBOL`: the two dumps differ by N).
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
    "rs_base_read", "rs_base_rw", "rs_ie_read", "rs_ie_rw", "rs_std_read", "rs_std_rw",
    "rs_pth_read", "rs_pth_rw", "rs_tp_read", "c_base_read", "c_base_rw", "c_gd_read",
    "c_gd_rw", "c_desc_read", "c_desc_rw", "c_ie_read", "c_ie_rw", "c_pth_read", "c_pth_rw",
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
    rs.into_iter().chain(c).map(|(s, f)| (format!("tp_exe_{s}"), f)).collect()
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
    for path in std::env::var("TP_DL_LIBS").unwrap_or_default().split(':').filter(|p| !p.is_empty()) {
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

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let loops = all_loops();
    match args.get(1).map(String::as_str) {
        Some("list") => {
            for (name, _) in &loops {
                println!("{name}");
            }
        }
        Some("count") => {
            let (sym, n): (&str, u64) = (&args[2], args[3].parse().unwrap());
            let f = loops.iter().find(|(name, _)| name == sym).unwrap_or_else(|| panic!("no loop {sym}")).1;
            let a = f(n);
            let b = f(2 * n);
            println!("{sym} {a} {b}");
        }
        Some("time") => {
            let rounds: usize = args[2].parse().unwrap();
            let n: u64 = args[3].parse().unwrap();
            let mut ns: Vec<Vec<f64>> = vec![Vec::with_capacity(rounds); loops.len()];
            let mut sink = 0u64;
            for (_, f) in &loops {
                sink = sink.wrapping_add(f(n));
            }
            for r in 0..rounds {
                for k in 0..loops.len() {
                    let i = (k + r) % loops.len();
                    let t = Instant::now();
                    sink = sink.wrapping_add(std::hint::black_box(loops[i].1)(n));
                    ns[i].push(t.elapsed().as_nanos() as f64 / n as f64);
                }
            }
            println!("# rounds={rounds} n={n} sink={sink}");
            println!("loop\tmedian\tp25\tp75\tmin\tmax");
            for ((name, _), v) in loops.iter().zip(ns.iter_mut()) {
                v.sort_by(f64::total_cmp);
                println!(
                    "{name}\t{:.3}\t{:.3}\t{:.3}\t{:.3}\t{:.3}",
                    quantile(v, 0.5),
                    quantile(v, 0.25),
                    quantile(v, 0.75),
                    v[0],
                    v[v.len() - 1]
                );
            }
        }
        _ => eprintln!("usage: driver list | count SYMBOL N | time ROUNDS N"),
    }
}
