//! The link of libsmalloc.so: `getenv` wrapped, so that nothing in the
//! library reads the environment but through `secure_getenv` (see
//! src/introspect.rs); and a soname, without which valgrind's memcheck
//! takes the library for the main program and replaces its `malloc` with
//! its own (docs/valgrind.md). The static library's references are the
//! linking program's to resolve.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target == "x86_64-unknown-linux-gnu" || target == "aarch64-unknown-linux-gnu" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--wrap=getenv");
    }
    if std::env::var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux") {
        println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libsmalloc.so");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
