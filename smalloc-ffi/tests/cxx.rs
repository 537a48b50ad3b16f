//! A C++ program (new/delete in every form, std::vector, std::string,
//! std::map, bad_alloc through the new-handler) under `LD_PRELOAD`.

mod common;

use common::*;

#[test]
fn cxx_new_delete_and_containers() {
    let dir = scratch_dir("cxx");
    let exe = compile(&dir, "cxx.cpp", &[]);
    run_preloaded_expect(&exe, &[], "c++ ok");
}
