//! smalloc's C ABI. (Filled in by the C ABI issue; for now the prefixed
//! malloc and free only.)

use core::alloc::{GlobalAlloc, Layout};

use smalloc_core::Smalloc;

static A: Smalloc = Smalloc::new();

/// Allocates `size` bytes aligned to 16.
#[unsafe(no_mangle)]
pub extern "C" fn smalloc_malloc(size: usize) -> *mut u8 {
    match Layout::from_size_align(size.max(1), 16) {
        // SAFETY: the layout has a non-zero size.
        Ok(l) => unsafe { A.alloc(l) },
        Err(_) => core::ptr::null_mut(),
    }
}
