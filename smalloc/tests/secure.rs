//! The secure mode (the `secure` feature): a double free (on the hot path,
//! on the cold path, from another thread), a free of a pointer inside a
//! block, and a write into a freed slot (on a private list and on the
//! shared list) each stop the program with the documented message and
//! SIGABRT; `SMALLOC_FREE_FILL` fills freed slots. Each scenario runs in a
//! child process: this test binary again, for one `scenario_*` test, with
//! `SMALLOC_SECURE_CHILD` set (without it a scenario does nothing). Without
//! the feature this file is empty.
#![cfg(feature = "secure")]

use std::alloc::{GlobalAlloc, Layout};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Output};
use std::ptr;

use smalloc::Smalloc;

#[global_allocator]
static A: Smalloc = Smalloc::new();

/// Runs scenario `name` in a child process.
fn child(name: &str, env: &[(&str, &str)]) -> Output {
    Command::new(std::env::current_exe().unwrap())
        .args(["--exact", name, "--nocapture", "--test-threads=1"])
        .env("SMALLOC_SECURE_CHILD", "1")
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// Scenario `name` dies by SIGABRT after printing `smalloc: <what> at 0x`.
fn stopped(name: &str, what: &str) {
    let out = child(name, &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.signal(),
        Some(libc::SIGABRT),
        "{name}: {:?}\n{stderr}",
        out.status
    );
    let want = format!("smalloc: {what} at 0x");
    assert!(stderr.contains(&want), "{name}: {stderr}");
    assert!(
        stderr.contains("detected by the secure mode"),
        "{name}: {stderr}"
    );
}

/// Whether this process is a scenario's child.
fn in_child() -> bool {
    std::env::var_os("SMALLOC_SECURE_CHILD").is_some()
}

fn layout(size: usize) -> Layout {
    Layout::from_size_align(size, 8).unwrap()
}

/// A block of `size` bytes filled with `byte`.
fn block(size: usize, byte: u8) -> *mut u8 {
    // SAFETY: a non-zero layout.
    let p = unsafe { A.alloc(layout(size)) };
    assert!(!p.is_null());
    // SAFETY: `p` holds `size` bytes.
    unsafe { ptr::write_bytes(p, byte, size) };
    p
}

/// Frees `p` of `size` bytes through the allocator, even twice: the
/// scenarios hand it what a buggy program would.
fn free(p: *mut u8, size: usize) {
    // SAFETY: not always (that is the point): the secure mode must stop
    // the process before a bad free does harm.
    unsafe { A.dealloc(p, layout(size)) };
}

#[test]
fn scenario_double_free() {
    if in_child() {
        let p = block(64, 1);
        free(p, 64);
        free(p, 64);
    }
}

#[test]
fn scenario_double_free_of_a_large_block() {
    if in_child() {
        let p = block(256 << 10, 1);
        free(p, 256 << 10);
        free(p, 256 << 10);
    }
}

#[test]
fn scenario_double_free_from_other_threads() {
    if in_child() {
        let p = block(48, 1) as usize;
        for _ in 0..2 {
            std::thread::spawn(move || free(p as *mut u8, 48))
                .join()
                .unwrap();
        }
    }
}

#[test]
fn scenario_free_of_an_interior_pointer() {
    if in_child() {
        let p = block(64, 1);
        free(p.wrapping_add(16), 48);
    }
}

#[test]
fn scenario_write_after_free() {
    if in_child() {
        let p = block(64, 1);
        free(p, 64);
        // SAFETY: not (a write after free): the slot stays mapped, and the
        // secure mode must notice the write before the slot is reused.
        unsafe { ptr::write_bytes(p, 0x41, 16) };
        let _q = block(64, 2);
    }
}

#[test]
fn scenario_write_after_free_on_the_shared_list() {
    if in_child() {
        // Freed by another thread: onto its slab's shared list, which the
        // owner takes when its private list runs dry.
        let ps: Vec<usize> = (0..4).map(|_| block(96, 1) as usize).collect();
        let first = ps[0];
        std::thread::spawn(move || {
            for p in ps {
                free(p as *mut u8, 96);
            }
        })
        .join()
        .unwrap();
        // SAFETY: not (a write after free), as above; only the link word.
        unsafe { ptr::write_volatile((first as *mut u32).add(0), 0x1234_5678) };
        for _ in 0..8 {
            let _ = block(96, 2);
        }
    }
}

#[test]
fn scenario_fill() {
    if in_child() {
        let p = block(256, 0x11);
        free(p, 256);
        // SAFETY: not (a read after free): the slot stays mapped, and the
        // fill is what the test looks at.
        let bytes: Vec<u8> = (16..256)
            .map(|i| unsafe { ptr::read_volatile(p.add(i)) })
            .collect();
        println!("\nfill {:?}", (bytes.iter().min(), bytes.iter().max()));
    }
}

#[test]
fn a_double_free_is_stopped() {
    stopped("scenario_double_free", "double free");
}

#[test]
fn a_double_free_of_a_large_block_is_stopped() {
    stopped("scenario_double_free_of_a_large_block", "double free");
}

#[test]
fn a_double_free_from_other_threads_is_stopped() {
    stopped("scenario_double_free_from_other_threads", "double free");
}

#[test]
fn a_free_of_an_interior_pointer_is_stopped() {
    stopped(
        "scenario_free_of_an_interior_pointer",
        "free of a pointer that is not the start of a block",
    );
}

#[test]
fn a_write_after_free_is_stopped_at_the_next_allocation() {
    stopped(
        "scenario_write_after_free",
        "corrupted free list (a write after free?)",
    );
}

#[test]
fn a_write_after_free_on_the_shared_list_is_stopped() {
    stopped(
        "scenario_write_after_free_on_the_shared_list",
        "corrupted free list (a write after free?)",
    );
}

#[test]
fn freed_slots_are_filled_on_request() {
    let fill = |env: &[(&str, &str)]| {
        let out = child("scenario_fill", env);
        assert!(out.status.success(), "{out:?}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        stdout
            .lines()
            .find(|l| l.starts_with("fill "))
            .unwrap()
            .to_string()
    };
    assert_eq!(
        fill(&[("SMALLOC_FREE_FILL", "0xdf")]),
        "fill (Some(223), Some(223))"
    );
    assert_eq!(
        fill(&[("SMALLOC_FREE_FILL", "7")]),
        "fill (Some(7), Some(7))"
    );
    // Control: without it, the freed bytes are the program's.
    assert_eq!(fill(&[]), "fill (Some(17), Some(17))");
}
