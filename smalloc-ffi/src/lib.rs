//! smalloc's C ABI. (Filled in by the C ABI issue; for now the prefixed
//! malloc and free only.)
#![no_std]

use core::alloc::{GlobalAlloc, Layout};

use smalloc_core::Smalloc;

static A: Smalloc = Smalloc::new();

#[panic_handler]
fn panic(_: &core::panic::PanicInfo) -> ! {
    // SAFETY: abort has no preconditions.
    unsafe { libc::abort() }
}

/// Allocates `size` bytes aligned to 16.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_malloc(size: usize) -> *mut u8 {
    match Layout::from_size_align(size.max(1), 16) {
        // SAFETY: the layout has a non-zero size.
        Ok(l) => unsafe { A.alloc(l) },
        Err(_) => core::ptr::null_mut(),
    }
}
