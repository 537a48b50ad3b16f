//! Helpers shared by smalloc's tests and benchmarks.
//!
//! * [`Rng`]: a small deterministic pseudo-random generator (SplitMix64), so
//!   every run with the same seed does the same operations.
//! * [`fill`] / [`check`]: write and verify a fill pattern derived from a tag
//!   and the byte offset, so a block overwritten by anything else is caught.
//! * [`Shadow`]: a shadow model of live blocks for random operation
//!   sequences: it remembers every live block's address, size, alignment and
//!   tag, verifies contents, alignment and non-overlap.
//! * [`process`]: resource limits, the process's mappings, core files.
#![deny(unsafe_op_in_unsafe_fn)]

pub mod fork;
pub mod process;
pub mod stats;

use std::collections::BTreeMap;

/// SplitMix64: tiny, fast, statistically fine for workload generation.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator with the given seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        ((self.next_u64() as u128 * n as u128) >> 64) as u64
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }

    /// A size drawn log-uniformly from `lo..=hi`: every power-of-two band
    /// gets about the same number of draws.
    pub fn log_size(&mut self, lo: usize, hi: usize) -> usize {
        let lo_bits = usize::BITS - lo.max(1).leading_zeros() - 1;
        let hi_bits = usize::BITS - hi.leading_zeros() - 1;
        let bits = self.range(lo_bits as u64, hi_bits as u64) as u32;
        let band_lo = (1usize << bits).max(lo);
        let band_hi = ((1usize << bits) * 2 - 1).min(hi);
        self.range(band_lo as u64, band_hi as u64) as usize
    }

    /// True with probability `num / den`.
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.below(den) < num
    }
}

/// The pattern byte at `offset` of a block tagged `tag`.
#[inline]
pub fn pattern(tag: u64, offset: usize) -> u8 {
    let x = tag
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(offset as u64 / 8);
    (x ^ (x >> 29) ^ (offset as u64 & 7)) as u8
}

/// Fills `len` bytes at `p` with the pattern of `tag`.
///
/// # Safety
/// `p..p+len` is writable memory owned by the caller.
pub unsafe fn fill(p: *mut u8, len: usize, tag: u64) {
    #[cfg(miri)]
    {
        for i in miri_offsets(len) {
            // SAFETY: `i < len`.
            unsafe { *p.add(i) = pattern(tag, i) };
        }
    }
    #[cfg(not(miri))]
    {
        // SAFETY: per the contract.
        let s = unsafe { std::slice::from_raw_parts_mut(p, len) };
        for (i, b) in s.iter_mut().enumerate() {
            *b = pattern(tag, i);
        }
    }
}

/// Fills only a sample of the block (first and last 64 bytes and one byte
/// in each of at most 64 pages spread over it): cheap in time and resident
/// memory even for gigabyte blocks, still catches overlap.
///
/// # Safety
/// As for [`fill`].
pub unsafe fn fill_sparse(p: *mut u8, len: usize, tag: u64) {
    for i in sample_offsets(len) {
        // SAFETY: `i < len`.
        unsafe { *p.add(i) = pattern(tag, i) };
    }
}

/// Checks a [`fill_sparse`] pattern; returns the first bad offset.
///
/// # Safety
/// `p..p+len` is readable.
pub unsafe fn check_sparse(p: *const u8, len: usize, tag: u64) -> Result<(), usize> {
    for i in sample_offsets(len) {
        // SAFETY: `i < len`.
        if unsafe { *p.add(i) } != pattern(tag, i) {
            return Err(i);
        }
    }
    Ok(())
}

fn sample_offsets(len: usize) -> impl Iterator<Item = usize> {
    let head = 0..len.min(64);
    let tail = len.saturating_sub(64).max(len.min(64))..len;
    let step = (len / 64).next_multiple_of(4096).max(4096);
    let pages = (step..len.saturating_sub(64)).step_by(step);
    head.chain(pages).chain(tail)
}

/// Under Miri, which interprets every byte access (thousands per second),
/// [`fill`], [`check`] and [`is_zero`] touch only these offsets: the first
/// 64 bytes and every 127th byte after them. The set does not depend on
/// `len` beyond its bound, so a block filled with one length can be checked
/// with a smaller one (as after a shrinking realloc).
#[cfg(miri)]
fn miri_offsets(len: usize) -> impl Iterator<Item = usize> {
    (0..len.min(64)).chain((64..len).step_by(127))
}

/// Checks the pattern of `tag` over `len` bytes at `p`; returns the first
/// bad offset.
///
/// # Safety
/// `p..p+len` is readable memory.
pub unsafe fn check(p: *const u8, len: usize, tag: u64) -> Result<(), usize> {
    #[cfg(miri)]
    {
        // SAFETY: `i < len`.
        match miri_offsets(len).find(|&i| unsafe { *p.add(i) } != pattern(tag, i)) {
            Some(i) => Err(i),
            None => Ok(()),
        }
    }
    #[cfg(not(miri))]
    {
        // SAFETY: per the contract.
        let s = unsafe { std::slice::from_raw_parts(p, len) };
        match s.iter().enumerate().find(|&(i, &b)| b != pattern(tag, i)) {
            Some((i, _)) => Err(i),
            None => Ok(()),
        }
    }
}

/// Whether `len` bytes at `p` are all zero.
///
/// # Safety
/// `p..p+len` is readable memory.
pub unsafe fn is_zero(p: *const u8, len: usize) -> bool {
    #[cfg(miri)]
    {
        // SAFETY: `i < len`.
        miri_offsets(len).all(|i| unsafe { *p.add(i) } == 0)
    }
    #[cfg(not(miri))]
    {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(p, len) }
            .iter()
            .all(|&b| b == 0)
    }
}

/// A live block as the shadow model knows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Block {
    /// Start address.
    pub addr: usize,
    /// Size in bytes as requested.
    pub size: usize,
    /// Alignment as requested.
    pub align: usize,
    /// Tag of its fill pattern.
    pub tag: u64,
}

/// Shadow model of the live blocks of a random operation sequence.
#[derive(Default, Debug)]
pub struct Shadow {
    by_addr: BTreeMap<usize, Block>,
    order: Vec<usize>,
}

impl Shadow {
    /// An empty model.
    pub fn new() -> Shadow {
        Shadow::default()
    }

    /// Number of live blocks.
    pub fn len(&self) -> usize {
        self.by_addr.len()
    }

    /// Whether no block is live.
    pub fn is_empty(&self) -> bool {
        self.by_addr.is_empty()
    }

    /// Records a new live block; panics if it is misaligned or overlaps a
    /// live block (a slot handed out twice).
    pub fn insert(&mut self, b: Block) {
        assert_eq!(b.addr % b.align, 0, "block {b:x?} misaligned");
        let end = b.addr + b.size.max(1);
        if let Some((_, prev)) = self.by_addr.range(..=b.addr).next_back() {
            assert!(
                prev.addr + prev.size.max(1) <= b.addr,
                "block {b:x?} overlaps live block {prev:x?}"
            );
        }
        if let Some((_, next)) = self.by_addr.range(b.addr + 1..).next() {
            assert!(
                end <= next.addr,
                "block {b:x?} overlaps live block {next:x?}"
            );
        }
        self.by_addr.insert(b.addr, b);
        self.order.push(b.addr);
    }

    /// Removes and returns a random live block (None if empty).
    pub fn take_random(&mut self, rng: &mut Rng) -> Option<Block> {
        while !self.order.is_empty() {
            let i = rng.below(self.order.len() as u64) as usize;
            let addr = self.order.swap_remove(i);
            if let Some(b) = self.by_addr.remove(&addr) {
                return Some(b);
            }
        }
        None
    }

    /// Removes the block at `addr`.
    pub fn remove(&mut self, addr: usize) -> Option<Block> {
        self.by_addr.remove(&addr)
    }

    /// Every live block.
    pub fn blocks(&self) -> impl Iterator<Item = &Block> {
        self.by_addr.values()
    }

    /// Removes every block, returning them.
    pub fn drain(&mut self) -> Vec<Block> {
        self.order.clear();
        std::mem::take(&mut self.by_addr).into_values().collect()
    }
}

/// The workspace's root directory.
pub fn workspace_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("devutils lives in the workspace")
        .to_path_buf()
}

/// The cargo target directory: `CARGO_TARGET_DIR` if set, else the closest
/// ancestor of this test executable that cargo marked with `CACHEDIR.TAG`.
pub fn target_dir() -> std::path::PathBuf {
    if let Some(dir) = std::env::var_os("CARGO_TARGET_DIR") {
        return workspace_dir().join(dir);
    }
    let exe = std::env::current_exe().expect("current_exe");
    exe.ancestors()
        .find(|d| d.join("CACHEDIR.TAG").is_file())
        .map(std::path::Path::to_path_buf)
        .unwrap_or_else(|| workspace_dir().join("target"))
}

/// The emulator that runs programs built for the target under test, with
/// its arguments (`SMALLOC_TEST_RUNNER`, split at spaces; e.g.
/// `qemu-aarch64 -L /usr/aarch64-linux-gnu`), when the tests run under one.
pub fn runner() -> Option<Vec<String>> {
    let r = std::env::var("SMALLOC_TEST_RUNNER").ok()?;
    let words: Vec<String> = r.split_whitespace().map(str::to_owned).collect();
    (!words.is_empty()).then_some(words)
}

/// A command that runs `program`, built for the target under test (this
/// test binary, or a test program compiled with [`target_cc`]): through
/// the [`runner`] when there is one.
pub fn target_command(program: impl AsRef<std::ffi::OsStr>) -> std::process::Command {
    match runner() {
        Some(words) => {
            let mut cmd = std::process::Command::new(&words[0]);
            // Tells the test programs that their resident set is not
            // their own.
            cmd.args(&words[1..])
                .arg(program)
                .env("SMALLOC_TEST_EMULATED", "1");
            cmd
        }
        None => std::process::Command::new(program),
    }
}

/// Sets `LD_PRELOAD` to `lib` for the program `cmd` runs: under a [`runner`]
/// (qemu-user) through `QEMU_SET_ENV`, so that only the emulated program's
/// loader sees it, not the emulator's.
pub fn preload<'a>(
    cmd: &'a mut std::process::Command,
    lib: &std::path::Path,
) -> &'a mut std::process::Command {
    if runner().is_some() {
        let mut v = std::ffi::OsString::from("LD_PRELOAD=");
        v.push(lib);
        cmd.env("QEMU_SET_ENV", v)
    } else {
        cmd.env("LD_PRELOAD", lib)
    }
}

/// The C compiler (`c++`: the C++ compiler) for the target under test:
/// `SMALLOC_TEST_CC` (`SMALLOC_TEST_CXX`) if set, else `cc` (`c++`).
pub fn target_cc(cxx: bool) -> String {
    let (var, default) = if cxx {
        ("SMALLOC_TEST_CXX", "c++")
    } else {
        ("SMALLOC_TEST_CC", "cc")
    };
    std::env::var(var).unwrap_or_else(|_| default.to_owned())
}

/// Runs `cmd`, panicking with its status and both outputs unless it exits
/// with status 0; returns its output.
pub fn run_ok(cmd: &mut std::process::Command) -> std::process::Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// Whether valgrind can be run; when not, prints a line saying the test
/// that asked is skipped.
pub fn have_valgrind() -> bool {
    let ok = std::process::Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        eprintln!("SKIPPED: valgrind is not installed (apt-get install valgrind)");
    }
    ok
}

/// Resident set size of this process in bytes (from /proc/self/statm).
pub fn rss_bytes() -> usize {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: usize = s
        .split_whitespace()
        .nth(1)
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * process::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rng_is_deterministic() {
        let mut a = Rng::new(7);
        let mut b = Rng::new(7);
        for _ in 0..100 {
            assert_eq!(a.next_u64(), b.next_u64());
        }
    }

    #[test]
    fn log_size_stays_in_range() {
        let mut r = Rng::new(1);
        for _ in 0..10_000 {
            let s = r.log_size(3, 5000);
            assert!((3..=5000).contains(&s));
        }
    }

    #[test]
    fn check_catches_a_changed_byte() {
        let mut v = vec![0u8; 300];
        // SAFETY: the ranges lie inside the vector `v`.
        unsafe { fill(v.as_mut_ptr(), 300, 5) };
        // SAFETY: the ranges lie inside the vector `v`.
        assert_eq!(unsafe { check(v.as_ptr(), 300, 5) }, Ok(()));
        v[177] ^= 1;
        // SAFETY: the ranges lie inside the vector `v`.
        assert_eq!(unsafe { check(v.as_ptr(), 300, 5) }, Err(177));
        // SAFETY: the ranges lie inside the vector `v`.
        assert!(unsafe { check(v.as_ptr(), 300, 6) }.is_err());
    }

    #[test]
    fn shadow_catches_overlap() {
        let mut s = Shadow::new();
        s.insert(Block {
            addr: 100,
            size: 10,
            align: 1,
            tag: 0,
        });
        s.insert(Block {
            addr: 110,
            size: 10,
            align: 2,
            tag: 0,
        });
        let r = std::panic::catch_unwind(move || {
            s.insert(Block {
                addr: 105,
                size: 1,
                align: 1,
                tag: 0,
            })
        });
        assert!(r.is_err());
    }

    #[test]
    fn sparse_sample_covers_ends() {
        let mut v = vec![0u8; 10_000];
        // SAFETY: the ranges lie inside the vector `v`.
        unsafe { fill_sparse(v.as_mut_ptr(), v.len(), 9) };
        // SAFETY: the ranges lie inside the vector `v`.
        assert!(unsafe { check_sparse(v.as_ptr(), v.len(), 9) }.is_ok());
        v[9_999] ^= 0xff;
        // SAFETY: the ranges lie inside the vector `v`.
        assert_eq!(unsafe { check_sparse(v.as_ptr(), v.len(), 9) }, Err(9_999));
    }
}
