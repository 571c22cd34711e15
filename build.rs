//! Compiles the BPF program in `src/bpf/` against the committed `vmlinux/` header
//! and generates its Rust skeleton into `OUT_DIR`.

use std::env;
use std::path::PathBuf;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/tachy.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH is set by cargo");
    let vmlinux_dir = match arch.as_str() {
        "x86_64" => "x86",
        other => panic!("tachy has no vmlinux.h for target architecture {other}"),
    };
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(["-I", &format!("vmlinux/{vmlinux_dir}"), "-I", "src/bpf"])
        .build_and_generate(out.join("tachy.skel.rs"))
        .expect("failed to build the BPF program (is clang installed?)");
    println!("cargo:rerun-if-changed={SRC}");
    println!("cargo:rerun-if-changed=src/bpf/tachy.h");
}
