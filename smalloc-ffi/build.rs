//! The link of libsmalloc.so: `getenv` wrapped, so that nothing in the
//! library reads the environment but through `secure_getenv` (see
//! src/introspect.rs). The static library's references are the linking
//! program's to resolve.

fn main() {
    let target = std::env::var("TARGET").unwrap_or_default();
    if target == "x86_64-unknown-linux-gnu" {
        println!("cargo:rustc-cdylib-link-arg=-Wl,--wrap=getenv");
    }
    println!("cargo:rerun-if-changed=build.rs");
}
