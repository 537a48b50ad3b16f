//! Calls the reservation would break, made by the process on itself, which
//! therefore give it up first ([`smalloc_core::map_on_demand`]: the
//! regions are mapped on demand from then on, every live block where it
//! is); then the kernel's system call, with its result and `errno`.
//!
//! * Lowering its own address-space or data limit (`setrlimit`, `prlimit`
//!   and their `64` forms): the reservation counts against both, so a limit
//!   of a few GiB would refuse every later mapping (thread stacks,
//!   `dlopen`, big blocks).
//! * Locking all its memory (`mlockall` with `MCL_CURRENT`): the kernel
//!   would fault in and lock all 8 TiB (memory runs out), or refuse with
//!   `ENOMEM` under `RLIMIT_MEMLOCK`, which counts the reservation.

use core::ffi::c_int;
use core::ptr;

use smalloc_core::layout::TOTAL_SIZE;

/// `mlockall`: with `MCL_CURRENT`, gives the reservation up first.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn mlockall(flags: c_int) -> c_int {
    if flags & libc::MCL_CURRENT != 0 {
        smalloc_core::map_on_demand();
    }
    // SAFETY: a system call without pointers; glibc's `syscall` sets errno
    // and returns -1 on failure.
    unsafe { libc::syscall(libc::SYS_mlockall, flags) as c_int }
}

/// `setrlimit`: [`prlimit64`] on the calling process.
///
/// # Safety
/// As the C function: `rlim` points to a `struct rlimit`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setrlimit(resource: c_int, rlim: *const libc::rlimit) -> c_int {
    // SAFETY: `struct rlimit` and `struct rlimit64` are the same on 64-bit.
    unsafe { prlimit64(0, resource, rlim.cast(), ptr::null_mut()) }
}

/// `setrlimit64`: [`prlimit64`] on the calling process.
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn setrlimit64(resource: c_int, rlim: *const libc::rlimit64) -> c_int {
    // SAFETY: per the contract.
    unsafe { prlimit64(0, resource, rlim, ptr::null_mut()) }
}

/// `prlimit`: [`prlimit64`].
///
/// # Safety
/// As the C function.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn prlimit(
    pid: libc::pid_t,
    resource: c_int,
    new: *const libc::rlimit,
    old: *mut libc::rlimit,
) -> c_int {
    // SAFETY: `struct rlimit` and `struct rlimit64` are the same on 64-bit.
    unsafe { prlimit64(pid, resource, new.cast(), old.cast()) }
}

/// `prlimit64`: gives the reservation up first if the process lowers its
/// own address-space or data limit below twice the layout (as a limit
/// that refuses the reservation at start), then asks the kernel.
///
/// # Safety
/// As the C function: `new` is null or points to a `struct rlimit64`, and
/// `old` is null or points to one to fill.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn prlimit64(
    pid: libc::pid_t,
    resource: c_int,
    new: *const libc::rlimit64,
    old: *mut libc::rlimit64,
) -> c_int {
    let space = resource == libc::RLIMIT_AS as c_int || resource == libc::RLIMIT_DATA as c_int;
    // SAFETY: getpid has no preconditions.
    let me = pid == 0 || pid == unsafe { libc::getpid() };
    // SAFETY: `new` is null or points to a `struct rlimit64` (the contract).
    let lowers =
        space && me && unsafe { new.as_ref() }.is_some_and(|l| l.rlim_cur < 2 * TOTAL_SIZE as u64);
    if lowers {
        smalloc_core::map_on_demand();
    }
    // SAFETY: the kernel checks the pointers; glibc's `syscall` sets errno
    // and returns -1 on failure.
    unsafe { libc::syscall(libc::SYS_prlimit64, pid, resource, new, old) as c_int }
}
