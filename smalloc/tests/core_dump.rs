//! A Rust program on smalloc that crashes dumps its core as fast as on the
//! system allocator, into a core file of about the same size, and a
//! debugger finds a live block's contents in it. The program is this test
//! binary itself, run again as a child (`child_crashes`) with core dumps
//! on, once with smalloc as its global allocator and once with the
//! system's (chosen by an environment variable before its first
//! allocation).

use std::alloc::{GlobalAlloc, Layout, System};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use devutils::process::{Crash, core_files_land_in_cwd};
use smalloc::Smalloc;

/// The child's allocator: smalloc, or the system's when
/// [`SYSTEM_ALLOC`] is set.
struct Either;

/// 0: not decided yet; 1: smalloc; 2: the system's.
static WHICH: AtomicU8 = AtomicU8::new(0);

/// Set in the child's environment to run it on the system allocator.
const SYSTEM_ALLOC: &std::ffi::CStr = c"SMALLOC_TEST_SYSTEM_ALLOC";
/// Set in the child's environment to make `child_crashes` crash.
const CHILD: &str = "SMALLOC_TEST_CRASH_CHILD";
/// What the child keeps in a live block.
const MARKER: &str = "smalloc-rust-core-marker-0123456789";

fn system() -> bool {
    // Relaxed: every thread decides the same from the environment.
    match WHICH.load(Ordering::Relaxed) {
        1 => false,
        2 => true,
        _ => {
            // SAFETY: a NUL-terminated name; getenv does not allocate.
            let sys = !unsafe { libc::getenv(SYSTEM_ALLOC.as_ptr()) }.is_null();
            WHICH.store(if sys { 2 } else { 1 }, Ordering::Relaxed);
            sys
        }
    }
}

// SAFETY: forwards every call to one allocator, the same for the whole
// process.
unsafe impl GlobalAlloc for Either {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: forwarded.
        unsafe {
            if system() {
                System.alloc(l)
            } else {
                Smalloc.alloc(l)
            }
        }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: forwarded to the allocator that made `p`.
        unsafe {
            if system() {
                System.dealloc(p, l)
            } else {
                Smalloc.dealloc(p, l)
            }
        }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        // SAFETY: forwarded to the allocator that made `p`.
        unsafe {
            if system() {
                System.realloc(p, l, n)
            } else {
                Smalloc.realloc(p, l, n)
            }
        }
    }
}

#[global_allocator]
static A: Either = Either;

/// Run only as the child: keeps a block holding [`MARKER`], prints its
/// address and aborts.
#[test]
#[ignore = "the crashing child of a_crash_dumps_what_the_program_used"]
fn child_crashes() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let block = String::from(MARKER).into_boxed_str();
    // Some more of a typical heap.
    let words: Vec<String> = (0..10_000).map(|i| format!("word {i}")).collect();
    println!("MARKER_AT {:p} {}", block.as_ptr(), words.len());
    std::process::abort();
}

/// One crash of the child in `dir`.
fn crash(dir: &Path, system: bool) -> Crash {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", "child_crashes", "--ignored", "--nocapture"])
        .env(CHILD, "1");
    if system {
        cmd.env(SYSTEM_ALLOC.to_str().unwrap(), "1");
    }
    Crash::run(&mut cmd, dir)
}

#[test]
fn a_crash_dumps_what_the_program_used() {
    if let Err(why) = core_files_land_in_cwd() {
        eprintln!("SKIPPED: {why}");
        return;
    }
    let dir = devutils::target_dir().join("core-dump-test");
    let sys = crash(&dir.join("system"), true);
    let ours = crash(&dir.join("smalloc"), false);
    let (sys_size, our_size) = (sys.core_size(), ours.core_size());
    eprintln!(
        "system allocator: {:?}, {sys_size} bytes; smalloc: {:?}, {our_size} bytes",
        sys.took, ours.took
    );
    assert!(
        ours.took < Duration::from_secs(1),
        "the dump took {:?}",
        ours.took
    );
    assert!(
        our_size.abs_diff(sys_size) < 10 << 20,
        "core of {our_size} bytes, {sys_size} on the system allocator"
    );
    let addr = ours.printed("MARKER_AT ");
    let text = ours.gdb_string(&std::env::current_exe().unwrap(), &addr);
    assert!(
        text.contains(MARKER),
        "gdb did not find the block at {addr} in the core: {text}"
    );
}
