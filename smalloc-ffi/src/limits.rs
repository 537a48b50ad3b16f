//! The process lowering its own address-space or data limit: `setrlimit`,
//! `prlimit` on itself, and their `64` forms. The reservation counts
//! against both limits, so once it is made a limit of a few GiB would
//! refuse every later mapping of the process (thread stacks, `dlopen`,
//! big blocks). Before such a limit takes effect smalloc gives the
//! reservation up and maps its regions on demand, keeping every live block
//! where it is ([`smalloc_core::map_on_demand`]). The call itself is the
//! kernel's (`prlimit64`), with its result and `errno`.

use core::ffi::c_int;
use core::ptr;

use smalloc_core::layout::TOTAL_SIZE;

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
