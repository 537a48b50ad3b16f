//! The checked-in C header `include/smalloc.h` is what cbindgen generates
//! from the current source (devutils/install-deps.sh installs the pinned
//! cbindgen, so this test always runs under devutils/test.sh).

use std::path::Path;
use std::process::Command;

/// The cbindgen version the header is generated with (pinned in
/// devutils/install-deps.sh; other versions may format differently).
const CBINDGEN_VERSION: &str = "0.29.4";

#[test]
fn header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let version = Command::new("cbindgen").arg("--version").output();
    let Ok(version) = version else {
        panic!("cbindgen is not installed: run `bash devutils/install-deps.sh`");
    };
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.trim() == format!("cbindgen {CBINDGEN_VERSION}"),
        "found {}, the header is generated with cbindgen {CBINDGEN_VERSION}: \
         run `bash devutils/install-deps.sh`",
        version.trim()
    );
    let out_dir = std::env::temp_dir().join(format!("smalloc-header-{}", std::process::id()));
    std::fs::create_dir_all(&out_dir).unwrap();
    let fresh = out_dir.join("smalloc.h");
    let run = Command::new("cbindgen")
        .current_dir(crate_dir)
        .args(["--config", "cbindgen.toml", "--quiet", "--output"])
        .arg(&fresh)
        .output()
        .expect("run cbindgen");
    assert!(
        run.status.success(),
        "cbindgen failed:\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let generated = std::fs::read_to_string(&fresh).unwrap();
    let checked_in = std::fs::read_to_string(crate_dir.join("include/smalloc.h")).unwrap();
    let _ = std::fs::remove_dir_all(&out_dir);
    assert!(
        generated == checked_in,
        "include/smalloc.h is out of date; regenerate it with\n  \
         cd smalloc-ffi && cbindgen --config cbindgen.toml --output include/smalloc.h\n\
         --- generated:\n{generated}"
    );
    // Every prefixed function is declared.
    for f in [
        "smalloc_malloc",
        "smalloc_free",
        "smalloc_calloc",
        "smalloc_realloc",
        "smalloc_reallocarray",
        "smalloc_aligned_alloc",
        "smalloc_posix_memalign",
        "smalloc_memalign",
        "smalloc_valloc",
        "smalloc_pvalloc",
        "smalloc_malloc_usable_size",
        "smalloc_free_sized",
        "smalloc_free_aligned_sized",
        "smalloc_owns",
    ] {
        assert!(checked_in.contains(&format!("{f}(")), "{f} missing");
    }
}
