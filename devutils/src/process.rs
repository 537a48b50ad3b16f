//! What tests read and set about a process: resource limits, its mappings
//! (`/proc/PID/smaps`), and where the kernel writes its core file.

use std::path::{Path, PathBuf};

/// Sets the soft limit `resource` (`libc::RLIMIT_AS`, ...) to `bytes`
/// (`libc::RLIM_INFINITY`: as far as the hard limit allows), leaving the
/// hard limit as it is, so it can be raised again. Async-signal-safe (two
/// system calls), so a `pre_exec` closure may call it. False if the kernel
/// refuses.
pub fn set_limit(resource: libc::__rlimit_resource_t, bytes: u64) -> bool {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `lim` is a valid out-pointer, then a valid rlimit.
    unsafe {
        if libc::getrlimit(resource, &mut lim) != 0 {
            return false;
        }
        lim.rlim_cur = bytes.min(lim.rlim_max);
        libc::setrlimit(resource, &lim) == 0
    }
}

/// The page size.
pub fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) as usize }
}

/// This process's virtual memory size in bytes (what `RLIMIT_AS` counts).
pub fn vm_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .next()
        .and_then(|x| x.parse().ok())
        .unwrap_or(0);
    pages * page_size() as u64
}

/// A `kB` field of `/proc/self/status` (`VmData`, `VmRSS`, ...) in bytes.
pub fn status_bytes(field: &str) -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or(0, |kb| kb << 10)
}

/// One mapping of a process, from `/proc/PID/smaps`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vma {
    /// First address.
    pub start: usize,
    /// One past the last address.
    pub end: usize,
    /// Permissions (`rw-p`, ...).
    pub perms: String,
    /// Whether it is left out of core dumps (`dd` in its `VmFlags`).
    pub dont_dump: bool,
    /// Whether transparent huge pages are kept out of it (`nh` in its
    /// `VmFlags`).
    pub no_huge: bool,
}

impl Vma {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.end - self.start
    }

    /// Whether it is empty (never, for a mapping the kernel lists).
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
}

/// The mappings of process `pid` ("self" for this one), in address order.
pub fn vmas(pid: &str) -> Vec<Vma> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps")).unwrap_or_default();
    let mut out: Vec<Vma> = Vec::new();
    for line in text.lines() {
        let mut words = line.split_whitespace();
        let first = words.next().unwrap_or("");
        if let Some((a, b)) = first.split_once('-')
            && let (Ok(start), Ok(end)) =
                (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
        {
            out.push(Vma {
                start,
                end,
                perms: words.next().unwrap_or("").to_string(),
                dont_dump: false,
                no_huge: false,
            });
        } else if first == "VmFlags:"
            && let Some(v) = out.last_mut()
        {
            let flags: Vec<&str> = words.collect();
            v.dont_dump = flags.contains(&"dd");
            v.no_huge = flags.contains(&"nh");
        }
    }
    out
}

/// Why core files of a program run in a directory of ours cannot be found
/// there (`Err`), from `/proc/sys/kernel/core_pattern`: a pipe to a handler
/// (systemd-coredump, apport) or an absolute path.
pub fn core_files_land_in_cwd() -> Result<(), String> {
    let pattern = std::fs::read_to_string("/proc/sys/kernel/core_pattern").unwrap_or_default();
    let pattern = pattern.trim();
    if pattern.is_empty() || pattern.starts_with('|') || pattern.starts_with('/') {
        return Err(format!(
            "kernel.core_pattern is {pattern:?}: core files do not land in the working directory"
        ));
    }
    Ok(())
}

/// The core file a crash left in `dir` (the only file there whose name
/// starts with "core"), if any.
pub fn core_file(dir: &Path) -> Option<PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("core"))
        })
}

/// What a program that crashed left: how long it ran (its core dump
/// included), its standard output, and its core file.
#[derive(Debug)]
pub struct Crash {
    /// From the start to the end of the dump.
    pub took: std::time::Duration,
    /// What it printed.
    pub stdout: String,
    /// The core file the kernel wrote.
    pub core: PathBuf,
}

impl Crash {
    /// Runs `cmd` in `dir` (made afresh) with core dumps on (`ulimit -c
    /// unlimited`); panics unless it crashes and leaves a core file there.
    pub fn run(cmd: &mut std::process::Command, dir: &Path) -> Crash {
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).unwrap();
        cmd.current_dir(dir);
        // SAFETY: the closure makes async-signal-safe system calls only.
        unsafe {
            std::os::unix::process::CommandExt::pre_exec(cmd, || {
                set_limit(libc::RLIMIT_CORE, libc::RLIM_INFINITY);
                Ok(())
            })
        };
        let start = std::time::Instant::now();
        let out = cmd.output().unwrap();
        let took = start.elapsed();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(!out.status.success(), "{cmd:?} did not crash: {stdout}");
        let core = core_file(dir)
            .unwrap_or_else(|| panic!("{cmd:?} left no core file in {}", dir.display()));
        Crash { took, stdout, core }
    }

    /// The core file's size in bytes (as `ls -l` shows it).
    pub fn core_size(&self) -> u64 {
        std::fs::metadata(&self.core).unwrap().len()
    }

    /// The first word after `key` on a line of the output that starts
    /// with it.
    pub fn printed(&self, key: &str) -> String {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|l| l.split_whitespace().next())
            .unwrap_or_else(|| panic!("no line {key:?} in {}", self.stdout))
            .to_string()
    }

    /// The string at address `addr` in the core, as `gdb` reads it with
    /// the program `exe` (`x/s`).
    pub fn gdb_string(&self, exe: &Path, addr: &str) -> String {
        let gdb = std::process::Command::new("gdb")
            .args(["-batch", "-ex"])
            .arg(format!("x/s {addr}"))
            .arg(exe)
            .arg(&self.core)
            .output()
            .expect("run gdb (devutils/install-deps.sh installs it)");
        String::from_utf8_lossy(&gdb.stdout).into_owned() + &String::from_utf8_lossy(&gdb.stderr)
    }
}
