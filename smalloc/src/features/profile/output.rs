//! Profiles read back from the table and written out: folded stacks (the
//! input of flame graph tools), a flame graph SVG (inferno) and pprof's
//! gzipped protobuf ([`Profile::write_pprof`], in [`pprof`](super::pprof)). Runs with the std library,
//! inside the profiler's re-entrancy guard, so its own allocations are
//! never sampled.

use crate::features::std;
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

/// Samples and the blocks and bytes they stand for (the unbiased estimate
/// of Poisson sampling by bytes: a block of `s` bytes sampled at mean `m`
/// stands for `1 / (1 - exp(-s / m))` blocks).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Totals {
    /// Samples taken.
    pub samples: u64,
    /// Estimated blocks.
    pub count: f64,
    /// Estimated bytes.
    pub bytes: f64,
}

/// One distinct call stack and what was sampled there.
#[derive(Clone, Debug)]
pub struct StackOut {
    /// Return addresses, innermost first.
    pub frames: Vec<usize>,
    /// Every sample taken here since the start.
    pub allocated: Totals,
    /// The samples taken here whose blocks are not freed yet.
    pub live: Totals,
}

impl StackOut {
    /// The totals of `kind`.
    pub fn totals(&self, kind: Kind) -> &Totals {
        match kind {
            Kind::Live => &self.live,
            Kind::Allocated => &self.allocated,
        }
    }
}

/// One sampled block not freed yet.
#[derive(Clone, Debug)]
pub struct SampleOut {
    /// Bytes of the slot sampled (the request rounded up to its size
    /// class: what smalloc's countdown counts).
    pub size: usize,
    /// Blocks this sample stands for.
    pub count: f64,
    /// Bytes it stands for: `size * count`.
    pub bytes: f64,
    /// Clock at the allocation, ns since the epoch.
    pub alloc_ns: u64,
    /// Its stack: an index into [`Profile::stacks`].
    pub stack: usize,
}

/// The samples at one moment.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The mean sampling interval of the last start (bytes; each sample is
    /// weighted by the interval it was taken under).
    pub mean: usize,
    /// Samples lost: the stack table had no room for a new stack
    /// ([`STACKS`](super::STACKS) distinct stacks), or a sampled slot
    /// number was beyond the live map ([`MAP_SLOTS`](super::MAP_SLOTS) per
    /// size class). Nonzero means the estimates are low.
    pub lost: u64,
    /// When this profile was read (ns since the epoch).
    pub time_ns: u64,
    /// Every stack sampled since the start, with its totals.
    pub stacks: Vec<StackOut>,
    /// The sampled blocks not freed yet.
    pub live: Vec<SampleOut>,
}

impl Profile {
    /// Reads the samples taken so far.
    pub fn snapshot() -> Profile {
        let _inside = sampler::Inside::enter();
        let mut stacks = Vec::new();
        let mut at = HashMap::new();
        table::for_each_stack(|s| {
            at.insert(s.index, stacks.len());
            stacks.push(StackOut {
                frames: s.frames.to_vec(),
                allocated: Totals {
                    samples: s.samples,
                    count: s.count,
                    bytes: s.bytes,
                },
                live: Totals::default(),
            });
        });
        let mut live = Vec::new();
        table::for_each_live(|l| {
            // A stack entered after the table was read: left for next time.
            let Some(&stack) = at.get(&l.stack) else {
                return;
            };
            let t = &mut stacks[stack].live;
            t.samples += 1;
            t.count += l.count;
            t.bytes += l.size as f64 * l.count;
            live.push(SampleOut {
                size: l.size,
                count: l.count,
                bytes: l.size as f64 * l.count,
                alloc_ns: l.alloc_ns,
                stack,
            });
        });
        Profile {
            mean: sampler::last_mean(),
            lost: table::lost(),
            time_ns: super::now_ns(),
            stacks,
            live,
        }
    }

    /// The stacks with samples of `kind`.
    pub fn of(&self, kind: Kind) -> impl Iterator<Item = &StackOut> {
        self.stacks
            .iter()
            .filter(move |s| s.totals(kind).samples > 0)
    }

    /// Estimated bytes and blocks of `kind`.
    pub fn totals(&self, kind: Kind) -> (f64, f64) {
        self.of(kind).fold((0.0, 0.0), |(b, c), s| {
            (b + s.totals(kind).bytes, c + s.totals(kind).count)
        })
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
            *stacks.entry(key).or_default() += s.totals(kind).bytes;
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
                "[smalloc: {} samples lost, the profile's table was full] 1",
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
}

/// Symbol names of return addresses, looked up once each.
#[derive(Default)]
pub(super) struct Symbols {
    names: HashMap<usize, Vec<String>>,
    /// The address range of the shared library holding the profiler, when
    /// it is one (a preloaded libsmalloc.so): all of it is the allocator.
    library: Option<Option<(usize, usize)>>,
}

/// The allocation entry points (name prefixes): a stack is cut after the
/// outermost of them among its innermost [`ENTRY_DEPTH`] frames, which
/// drops the allocator's own frames (whose names, inlined or not, vary
/// with the build).
const ENTRIES: [&str; 25] = [
    "<smalloc::Smalloc as core::alloc::global::GlobalAlloc>",
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
    "valloc",
    "pvalloc",
    "__libc_malloc",
    "__libc_calloc",
    "__libc_realloc",
    "__libc_memalign",
    "__libc_valloc",
    "__libc_pvalloc",
    "operator new",
    "_Znwm",
    "_Znam",
];

/// How deep into a stack the entry points are looked for.
const ENTRY_DEPTH: usize = 24;

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
                v.push(std::format!("{ip:#x}"));
            }
            v
        })
    }

    /// The frames of a stack, outermost first, inlined functions expanded,
    /// the allocator's own frames at the innermost end dropped.
    pub(super) fn stack(&mut self, frames: &[usize]) -> Vec<String> {
        let mut inner_first: Vec<String> = Vec::new();
        let cut = allocator_cut(self, frames);
        for (i, &ip) in frames.iter().enumerate().skip(cut.frames) {
            let skip = if i == cut.frames { cut.names } else { 0 };
            inner_first.extend(self.names(ip)[skip..].iter().cloned());
        }
        inner_first.reverse();
        inner_first
    }
}

/// The address range of the shared library that holds this code, if it is
/// a shared library (not the main program).
fn own_library() -> Option<(usize, usize)> {
    let mut info = core::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let here = own_library as *const () as *const core::ffi::c_void;
    // SAFETY: `here` is an address of our code; `info` is a valid
    // out-pointer.
    if unsafe { libc::dladdr(here, info.as_mut_ptr()) } == 0 {
        return None;
    }
    // SAFETY: dladdr filled it.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: a NUL-terminated path from dladdr.
    let path = unsafe { core::ffi::CStr::from_ptr(info.dli_fname) }
        .to_str()
        .ok()?;
    if !path.contains(".so") {
        return None;
    }
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    // Its code: the executable mapping holding `here`.
    let here = here.addr();
    maps.lines().filter(|l| l.ends_with(path)).find_map(|line| {
        let mut f = line.split_whitespace();
        let (a, b) = f.next()?.split_once('-')?;
        let (lo, hi) = (
            usize::from_str_radix(a, 16).ok()?,
            usize::from_str_radix(b, 16).ok()?,
        );
        (f.next()?.contains('x') && (lo..hi).contains(&here)).then_some((lo, hi))
    })
}

/// Whether `name` is an allocation entry point.
fn is_entry(name: &str) -> bool {
    ENTRIES.iter().any(|p| name.starts_with(p))
}

/// Where the allocator's own part of a stack (innermost first) ends: its
/// first `frames` frames, and the first `names` of the next frame's names
/// (functions inlined into it, innermost first; an entry point such as
/// `alloc::alloc::alloc` inlined into the program's function leaves that
/// function in the stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Cut {
    pub frames: usize,
    pub names: usize,
}

/// The allocator's part of `frames`: up to and including the outermost
/// entry point among the first [`ENTRY_DEPTH`] frames (nothing if none is
/// found). Frames inside the preloaded library count too (its entry points
/// may have tail-called out of the stack).
pub(super) fn allocator_cut(names: &mut Symbols, frames: &[usize]) -> Cut {
    let depth = frames.len().min(ENTRY_DEPTH);
    let by_name = (0..depth)
        .rev()
        .find_map(|i| {
            let n = names.names(frames[i]);
            let j = n.iter().rposition(|n| is_entry(n))?;
            Some(if j + 1 == n.len() {
                Cut {
                    frames: i + 1,
                    names: 0,
                }
            } else {
                Cut {
                    frames: i,
                    names: j + 1,
                }
            })
        })
        .unwrap_or(Cut {
            frames: 0,
            names: 0,
        });
    let by_place = match *names.library.get_or_insert_with(own_library) {
        Some((lo, hi)) => frames
            .iter()
            .take_while(|&&ip| (lo..hi).contains(&ip))
            .count(),
        None => 0,
    };
    by_name.max(Cut {
        frames: by_place,
        names: 0,
    })
}
