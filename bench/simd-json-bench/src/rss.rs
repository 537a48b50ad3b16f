//! Peak resident set size of this process.

/// `ru_maxrss` of this process in KiB (0 if unavailable).
pub fn peak_kib() -> u64 {
    // SAFETY: `rusage` is plain old data; all-zero is a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `ru` is a valid, writable `rusage`.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    if rc == 0 { ru.ru_maxrss as u64 } else { 0 }
}
