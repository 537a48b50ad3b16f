//! Unit tests of the layout arithmetic and the free-list walk (each runs in
//! its own process under nextest; these use the system allocator for the
//! harness and call smalloc directly).

use core::alloc::{GlobalAlloc, Layout};

use crate::Smalloc;
use crate::layout::*;

#[test]
fn smoke() {
    let a = Smalloc::new();
    let l = Layout::from_size_align(24, 8).unwrap();
    let p = unsafe { a.alloc(l) };
    assert!(!p.is_null());
    unsafe { a.dealloc(p, l) };
}
