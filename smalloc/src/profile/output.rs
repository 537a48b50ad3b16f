//! Profiles read back from the table and written out: folded stacks (the
//! input of flame graph tools), a flame graph SVG (inferno) and pprof's
//! gzipped protobuf ([`pprof`](super::pprof)). Runs with the std library,
//! inside the profiler's re-entrancy guard, so its own allocations are
//! never sampled.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io;
use std::string::{String, ToString};
use std::vec::Vec;

use super::{sampler, table};

/// Which blocks a profile counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// The sampled blocks not freed yet: who holds the memory now.
    Live,
    /// Every sampled block since the start: who allocated.
    Allocated,
}

/// One sample, with the estimate it stands for.
#[derive(Clone, Debug)]
pub struct SampleOut {
    /// Bytes of the slot sampled (the request rounded up to its size
    /// class: what smalloc's countdown counts).
    pub slot_size: usize,
    /// Blocks this sample stands for: `1 / (1 - exp(-slot_size / mean))`
    /// (the unbiased estimate of Poisson sampling by bytes).
    pub count: f64,
    /// Bytes it stands for: `slot_size * count`.
    pub bytes: f64,
    /// Clock at the allocation and at the free (0 while live), ns since
    /// the epoch.
    pub alloc_ns: u64,
    /// See `alloc_ns`.
    pub freed_ns: u64,
    /// Return addresses, innermost first.
    pub frames: Vec<usize>,
}

impl SampleOut {
    /// Whether the block is still live.
    pub fn live(&self) -> bool {
        self.freed_ns == 0
    }
}

/// The samples at one moment.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The mean sampling interval of the last start (bytes; each sample is
    /// weighted by the interval it was taken under).
    pub mean: usize,
    /// Samples lost: the table was full ([`table::CAPACITY`] samples) or a
    /// sampled slot could not be placed. Nonzero means the estimates are low.
    pub lost: u64,
    /// When this profile was read (ns since the epoch).
    pub time_ns: u64,
    /// The samples.
    pub samples: Vec<SampleOut>,
}

impl Profile {
    /// Reads the samples taken so far.
    pub fn snapshot() -> Profile {
        let _inside = sampler::Inside::enter();
        let mut samples = Vec::new();
        table::for_each(|s| {
            let size = 1usize << s.sc;
            let p = 1.0 - (-(size as f64) / s.mean.max(1) as f64).exp();
            samples.push(SampleOut {
                slot_size: size,
                count: 1.0 / p,
                bytes: size as f64 / p,
                alloc_ns: s.alloc_ns,
                freed_ns: s.freed_ns,
                frames: s.frames[..s.depth].to_vec(),
            });
        });
        Profile {
            mean: sampler::last_mean(),
            lost: table::lost(),
            time_ns: super::now_ns(),
            samples,
        }
    }

    /// The samples of `kind`.
    pub fn of(&self, kind: Kind) -> impl Iterator<Item = &SampleOut> {
        self.samples
            .iter()
            .filter(move |s| kind == Kind::Allocated || s.live())
    }

    /// Estimated bytes and blocks of `kind`.
    pub fn totals(&self, kind: Kind) -> (f64, f64) {
        self.of(kind)
            .fold((0.0, 0.0), |(b, c), s| (b + s.bytes, c + s.count))
    }

    /// Folded stacks of `kind`: one line per distinct stack, its frames
    /// from the outermost to the allocating function joined by `;`, then a
    /// space and the estimated bytes. A first line says how many samples
    /// were lost, if any (as a stack of its own, so it shows in a graph).
    pub fn folded(&self, kind: Kind) -> String {
        let _inside = sampler::Inside::enter();
        let mut names = Symbols::default();
        let mut stacks: HashMap<String, f64> = HashMap::new();
        for s in self.of(kind) {
            let key = names.stack(&s.frames).join(";");
            *stacks.entry(key).or_default() += s.bytes;
        }
        let mut lines: Vec<(String, u64)> = stacks
            .into_iter()
            .map(|(k, v)| (k, v.round() as u64))
            .filter(|&(_, v)| v > 0)
            .collect();
        lines.sort();
        let mut out = String::new();
        if self.lost > 0 {
            let _ = writeln!(
                out,
                "[smalloc: {} samples lost, the table was full] 1",
                self.lost
            );
        }
        for (k, v) in lines {
            let k = if k.is_empty() { "[no stack]" } else { &k };
            let _ = writeln!(out, "{k} {v}");
        }
        out
    }

    /// Writes [`folded`](Self::folded) to `w`.
    pub fn write_folded(&self, kind: Kind, mut w: impl io::Write) -> io::Result<()> {
        w.write_all(self.folded(kind).as_bytes())
    }

    /// Writes a flame graph of `kind` (SVG, rendered by inferno) to `w`.
    pub fn write_svg(&self, kind: Kind, w: impl io::Write) -> io::Result<()> {
        let folded = self.folded(kind);
        let _inside = sampler::Inside::enter();
        let mut opts = inferno::flamegraph::Options::default();
        opts.title = match kind {
            Kind::Live => "smalloc: live heap (estimated bytes)".to_string(),
            Kind::Allocated => "smalloc: allocations since start (estimated bytes)".to_string(),
        };
        opts.count_name = "bytes".to_string();
        inferno::flamegraph::from_lines(&mut opts, folded.lines(), w).map_err(io::Error::other)
    }

    /// Writes the profile in pprof's format (gzipped protobuf, readable by
    /// `go tool pprof` and speedscope) to `w`: sample types alloc_objects,
    /// alloc_space, inuse_objects, inuse_space, as Go's heap profiles.
    pub fn write_pprof(&self, w: impl io::Write) -> io::Result<()> {
        let _inside = sampler::Inside::enter();
        super::pprof::write(self, &mut Symbols::default(), w)
    }
}

/// Symbol names of return addresses, looked up once each.
#[derive(Default)]
pub(super) struct Symbols {
    names: HashMap<usize, Vec<String>>,
}

/// Functions of the allocator itself, dropped from the innermost end of a
/// stack: the sample's own frames and the allocation entry points.
const ALLOCATOR: [&str; 16] = [
    "smalloc::",
    "<smalloc::",
    "smalloc_",
    "__rust_alloc",
    "__rust_realloc",
    "__rg_alloc",
    "__rg_realloc",
    "__rdl_",
    "alloc::alloc::",
    "malloc",
    "calloc",
    "realloc",
    "aligned_alloc",
    "posix_memalign",
    "memalign",
    "operator new",
];

impl Symbols {
    /// The names of the function (and the functions inlined into it,
    /// innermost first) at return address `ip`.
    pub(super) fn names(&mut self, ip: usize) -> &[String] {
        self.names.entry(ip).or_insert_with(|| {
            let mut v = Vec::new();
            // A return address names the instruction after the call.
            backtrace::resolve(ip.saturating_sub(1) as *mut core::ffi::c_void, |sym| {
                if let Some(n) = sym.name() {
                    v.push(std::format!("{n:#}"));
                }
            });
            if v.is_empty() {
                v.push(format_unknown(ip));
            }
            v
        })
    }

    /// The frames of a stack, outermost first, inlined functions expanded,
    /// the allocator's own frames at the innermost end dropped.
    pub(super) fn stack(&mut self, frames: &[usize]) -> Vec<String> {
        let mut inner_first: Vec<String> = Vec::new();
        for &ip in frames {
            inner_first.extend(self.names(ip).iter().cloned());
        }
        let keep = inner_first
            .iter()
            .position(|n| !is_allocator(n))
            .unwrap_or(inner_first.len());
        inner_first.drain(..keep);
        inner_first.reverse();
        inner_first
    }
}

/// Whether `name` is a function of the allocator.
pub(super) fn is_allocator(name: &str) -> bool {
    ALLOCATOR.iter().any(|p| name.starts_with(p))
}

fn format_unknown(ip: usize) -> String {
    let mut s = String::new();
    let _ = write!(s, "{ip:#x}");
    s
}
