//! The C++ `operator new` / `operator delete` family, under their Itanium
//! ABI names for x86-64 and aarch64 Linux (`size_t` is `m`,
//! `std::align_val_t` is `St11align_val_t`, `const std::nothrow_t&` is
//! `RKSt9nothrow_t`).
//!
//! # Failure of the throwing forms
//!
//! A throwing `operator new` that cannot allocate must call the installed
//! `std::new_handler` and retry, or throw `std::bad_alloc`. Rust cannot
//! throw C++ exceptions, and a C++ exception must not unwind through a Rust
//! frame. So the throwing forms are written as small naked functions: they
//! call the Rust allocation and return its result, and on null they *jump*
//! (a tail call, leaving no frame of ours on the stack) to the same
//! operator of the next object (libstdc++), found with
//! `dlsym(RTLD_NEXT, ...)`. libstdc++'s operator calls `malloc` /
//! `aligned_alloc` (ours) in its new-handler loop and throws `bad_alloc`
//! itself. Without a next definition (no C++ runtime loaded, impossible
//! for a program that calls `operator new`) the process aborts.
//!
//! The nothrow forms return null on failure after giving the next nothrow
//! operator (which catches everything) the same chance.
//!
//! The `delete` forms ignore size and alignment: `free` finds both from the
//! pointer.
#![allow(non_snake_case)]

use core::ffi::c_void;
use core::mem::transmute;

use crate::c_alloc;
use crate::next::NextSym;

static NEXT_NEW: NextSym = NextSym::new(c"_Znwm");
static NEXT_NEW_ARRAY: NextSym = NextSym::new(c"_Znam");
static NEXT_NEW_ALIGNED: NextSym = NextSym::new(c"_ZnwmSt11align_val_t");
static NEXT_NEW_ARRAY_ALIGNED: NextSym = NextSym::new(c"_ZnamSt11align_val_t");
static NEXT_NEW_NOTHROW: NextSym = NextSym::new(c"_ZnwmRKSt9nothrow_t");
static NEXT_NEW_ARRAY_NOTHROW: NextSym = NextSym::new(c"_ZnamRKSt9nothrow_t");
static NEXT_NEW_ALIGNED_NOTHROW: NextSym = NextSym::new(c"_ZnwmSt11align_val_tRKSt9nothrow_t");
static NEXT_NEW_ARRAY_ALIGNED_NOTHROW: NextSym =
    NextSym::new(c"_ZnamSt11align_val_tRKSt9nothrow_t");

/// The allocation of the plain throwing forms; null on failure.
extern "C" fn try_new(size: usize) -> *mut c_void {
    c_alloc::malloc(size)
}

/// The allocation of the aligned throwing forms; null on failure.
/// `align` is a power of two by the C++ standard's precondition.
extern "C" fn try_new_aligned(size: usize, align: usize) -> *mut c_void {
    c_alloc::aligned(size, align)
}

/// The next definition of a throwing operator, or abort.
fn next_or_abort(sym: &NextSym) -> usize {
    match sym.get() {
        Some(a) => a,
        // SAFETY: abort has no preconditions; nothing can be thrown here.
        None => unsafe { libc::abort() },
    }
}

extern "C" fn next_new() -> usize {
    next_or_abort(&NEXT_NEW)
}
extern "C" fn next_new_array() -> usize {
    next_or_abort(&NEXT_NEW_ARRAY)
}
extern "C" fn next_new_aligned() -> usize {
    next_or_abort(&NEXT_NEW_ALIGNED)
}
extern "C" fn next_new_array_aligned() -> usize {
    next_or_abort(&NEXT_NEW_ARRAY_ALIGNED)
}

/// A throwing `operator new(size_t)`: allocate, or tail-jump to the next
/// definition (see the module documentation). At entry `rsp` is 8 mod 16;
/// one push realigns it for the calls.
#[cfg(target_arch = "x86_64")]
macro_rules! throwing_new {
    ($name:ident, $next:ident) => {
        /// A throwing C++ `operator new` (see the module documentation).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(size: usize) -> *mut c_void {
            core::arch::naked_asm!(
                "push rdi",
                "call {alloc}",
                "pop rdi",
                "test rax, rax",
                "jz 2f",
                "ret",
                "2:",
                "push rdi",
                "call {next}",
                "pop rdi",
                "jmp rax",
                alloc = sym try_new,
                next = sym $next,
            )
        }
    };
}

/// A throwing `operator new(size_t, align_val_t)`; two pushes and eight
/// bytes more keep `rsp` 16-byte aligned at the calls.
#[cfg(target_arch = "x86_64")]
macro_rules! throwing_new_aligned {
    ($name:ident, $next:ident) => {
        /// A throwing aligned C++ `operator new` (see the module
        /// documentation).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(size: usize, align: usize) -> *mut c_void {
            core::arch::naked_asm!(
                "push rdi",
                "push rsi",
                "sub rsp, 8",
                "call {alloc}",
                "test rax, rax",
                "jz 2f",
                "add rsp, 24",
                "ret",
                "2:",
                "call {next}",
                "add rsp, 8",
                "pop rsi",
                "pop rdi",
                "jmp rax",
                alloc = sym try_new_aligned,
                next = sym $next,
            )
        }
    };
}

/// A throwing `operator new(size_t)` on aarch64: a frame record (which
/// keeps `sp` 16-byte aligned and the frame walkable) and the size saved
/// across the calls; the next definition's address goes to `x16`, the
/// register the ABI leaves free for such jumps.
#[cfg(target_arch = "aarch64")]
macro_rules! throwing_new {
    ($name:ident, $next:ident) => {
        /// A throwing C++ `operator new` (see the module documentation).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(size: usize) -> *mut c_void {
            core::arch::naked_asm!(
                "stp x29, x30, [sp, #-32]!",
                "mov x29, sp",
                "str x0, [sp, #16]",
                "bl {alloc}",
                "cbz x0, 2f",
                "ldp x29, x30, [sp], #32",
                "ret",
                "2:",
                "bl {next}",
                "mov x16, x0",
                "ldr x0, [sp, #16]",
                "ldp x29, x30, [sp], #32",
                "br x16",
                alloc = sym try_new,
                next = sym $next,
            )
        }
    };
}

/// A throwing `operator new(size_t, align_val_t)` on aarch64: as
/// `throwing_new`, saving both arguments.
#[cfg(target_arch = "aarch64")]
macro_rules! throwing_new_aligned {
    ($name:ident, $next:ident) => {
        /// A throwing aligned C++ `operator new` (see the module
        /// documentation).
        #[unsafe(naked)]
        #[unsafe(no_mangle)]
        pub extern "C" fn $name(size: usize, align: usize) -> *mut c_void {
            core::arch::naked_asm!(
                "stp x29, x30, [sp, #-32]!",
                "mov x29, sp",
                "stp x0, x1, [sp, #16]",
                "bl {alloc}",
                "cbz x0, 2f",
                "ldp x29, x30, [sp], #32",
                "ret",
                "2:",
                "bl {next}",
                "mov x16, x0",
                "ldp x0, x1, [sp, #16]",
                "ldp x29, x30, [sp], #32",
                "br x16",
                alloc = sym try_new_aligned,
                next = sym $next,
            )
        }
    };
}

throwing_new!(_Znwm, next_new);
throwing_new!(_Znam, next_new_array);
throwing_new_aligned!(_ZnwmSt11align_val_t, next_new_aligned);
throwing_new_aligned!(_ZnamSt11align_val_t, next_new_array_aligned);

/// A nothrow form: allocate, else let the next nothrow operator try
/// (it runs the new-handler loop and catches everything), else null.
fn nothrow(p: *mut c_void, sym: &NextSym, size: usize) -> *mut c_void {
    if !p.is_null() {
        return p;
    }
    match sym.get() {
        Some(a) => {
            // SAFETY: `a` is the next object's nothrow operator new, which
            // takes the size and a `const nothrow_t&` it never reads
            // (any valid pointer will do) and does not throw.
            let f: unsafe extern "C" fn(usize, *const u8) -> *mut c_void = unsafe { transmute(a) };
            // SAFETY: see above.
            unsafe { f(size, c"".as_ptr().cast()) }
        }
        None => p,
    }
}

/// As [`nothrow`] for the aligned forms.
fn nothrow_aligned(p: *mut c_void, sym: &NextSym, size: usize, align: usize) -> *mut c_void {
    if !p.is_null() {
        return p;
    }
    match sym.get() {
        Some(a) => {
            // SAFETY: as in `nothrow`, with the alignment argument.
            let f: unsafe extern "C" fn(usize, usize, *const u8) -> *mut c_void =
                unsafe { transmute(a) };
            // SAFETY: see above.
            unsafe { f(size, align, c"".as_ptr().cast()) }
        }
        None => p,
    }
}

/// `operator new(size_t, const nothrow_t&)`.
#[unsafe(no_mangle)]
pub extern "C" fn _ZnwmRKSt9nothrow_t(size: usize, _nt: *const c_void) -> *mut c_void {
    nothrow(c_alloc::malloc(size), &NEXT_NEW_NOTHROW, size)
}

/// `operator new[](size_t, const nothrow_t&)`.
#[unsafe(no_mangle)]
pub extern "C" fn _ZnamRKSt9nothrow_t(size: usize, _nt: *const c_void) -> *mut c_void {
    nothrow(c_alloc::malloc(size), &NEXT_NEW_ARRAY_NOTHROW, size)
}

/// `operator new(size_t, align_val_t, const nothrow_t&)`.
#[unsafe(no_mangle)]
pub extern "C" fn _ZnwmSt11align_val_tRKSt9nothrow_t(
    size: usize,
    align: usize,
    _nt: *const c_void,
) -> *mut c_void {
    let p = c_alloc::aligned(size, align);
    nothrow_aligned(p, &NEXT_NEW_ALIGNED_NOTHROW, size, align)
}

/// `operator new[](size_t, align_val_t, const nothrow_t&)`.
#[unsafe(no_mangle)]
pub extern "C" fn _ZnamSt11align_val_tRKSt9nothrow_t(
    size: usize,
    align: usize,
    _nt: *const c_void,
) -> *mut c_void {
    let p = c_alloc::aligned(size, align);
    nothrow_aligned(p, &NEXT_NEW_ARRAY_ALIGNED_NOTHROW, size, align)
}

/// Defines `operator delete` forms: every one is `free` of its first
/// argument; the other arguments (size, alignment, nothrow tag) are unused.
macro_rules! delete {
    ($($name:ident($($arg:ident: $ty:ty),*);)*) => {$(
        /// A C++ `operator delete` form: frees the pointer.
        ///
        /// # Safety
        /// `p` is null or a live allocation, not used afterwards.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn $name(p: *mut c_void $(, $arg: $ty)*) {
            $(let _ = $arg;)*
            // SAFETY: per the contract.
            unsafe { c_alloc::free(p) }
        }
    )*};
}

delete! {
    _ZdlPv();
    _ZdaPv();
    _ZdlPvm(size: usize);
    _ZdaPvm(size: usize);
    _ZdlPvRKSt9nothrow_t(nt: *const c_void);
    _ZdaPvRKSt9nothrow_t(nt: *const c_void);
    _ZdlPvSt11align_val_t(align: usize);
    _ZdaPvSt11align_val_t(align: usize);
    _ZdlPvmSt11align_val_t(size: usize, align: usize);
    _ZdaPvmSt11align_val_t(size: usize, align: usize);
    _ZdlPvSt11align_val_tRKSt9nothrow_t(align: usize, nt: *const c_void);
    _ZdaPvSt11align_val_tRKSt9nothrow_t(align: usize, nt: *const c_void);
}
