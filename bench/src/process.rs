//! Resource use of whole processes. [`run`] starts a child and reads, with
//! `wait4`, its peak RSS, page faults and CPU time, so the figures belong
//! to that process alone: `bench --isolate` runs each allocator's pass so,
//! simd-json-bench `--compare` each build. [`own_peak_rss_kib`] is the
//! calling process's own peak RSS (simd-json-bench's single run).

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

/// Resource use of one child process.
#[derive(Clone, Debug, Default)]
pub struct Usage {
    /// What ran: the allocator (or the build named after it).
    pub alloc: String,
    /// Peak resident set size, KiB (`ru_maxrss`).
    pub max_rss_kib: u64,
    /// Minor page faults.
    pub minflt: u64,
    /// Major page faults.
    pub majflt: u64,
    /// User CPU seconds.
    pub user_s: f64,
    /// System CPU seconds.
    pub sys_s: f64,
    /// Wall seconds.
    pub wall_s: f64,
}

/// Runs `exe args` (its stderr passed through) for `alloc`; returns its
/// stdout and its resource use, or an error if it did not exit with 0.
pub fn run(alloc: &str, exe: &Path, args: &[String]) -> Result<(String, Usage), String> {
    let t0 = Instant::now();
    let mut child = Command::new(exe)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("spawning {} for {alloc}: {e}", exe.display()))?;
    let mut out = String::new();
    child
        .stdout
        .take()
        .expect("piped")
        .read_to_string(&mut out)
        .map_err(|e| format!("reading the {alloc} child: {e}"))?;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `child` is our unreaped child; both out-pointers are valid.
    let r = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut ru) };
    let wall_s = t0.elapsed().as_secs_f64();
    if r < 0 || !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        return Err(format!(
            "the {alloc} child failed ({} {}: wait status {status})",
            exe.display(),
            args.join(" ")
        ));
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    let usage = Usage {
        alloc: alloc.to_string(),
        max_rss_kib: ru.ru_maxrss as u64,
        minflt: ru.ru_minflt as u64,
        majflt: ru.ru_majflt as u64,
        user_s: secs(ru.ru_utime),
        sys_s: secs(ru.ru_stime),
        wall_s,
    };
    Ok((out, usage))
}

/// `ru_maxrss` of this process in KiB (0 if unavailable).
pub fn own_peak_rss_kib() -> u64 {
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc == 0 { ru.ru_maxrss as u64 } else { 0 }
}
