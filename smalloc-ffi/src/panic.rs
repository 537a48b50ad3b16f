//! The panic handler of the release build, which links no `std`.
//!
//! Nothing reachable from an entry point panics (the crate documentation);
//! a panic here would be a bug in smalloc, and the heap cannot be trusted
//! after it, so the process ends at once, as `panic = "abort"` would.

#[panic_handler]
fn on_panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // No formatting: the message is what can be written without allocating.
    const MSG: &[u8] = b"smalloc: internal error (a panic); aborting\n";
    // SAFETY: MSG is valid for its length; write and abort have no other
    // preconditions, and abort never returns.
    unsafe {
        libc::write(2, MSG.as_ptr().cast(), MSG.len());
        libc::abort()
    }
}
