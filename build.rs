//! Compiles the BPF program in `src/bpf/` (tachy.bpf.c and the headers it
//! includes) against the committed `vmlinux/` header and generates its Rust
//! skeleton into `OUT_DIR`; sets `TACHY_VERSION` to the package version and,
//! in a git checkout, the commit it was built from.

use std::env;
use std::path::PathBuf;
use std::process::Command;

use libbpf_cargo::SkeletonBuilder;

const SRC: &str = "src/bpf/tachy.bpf.c";
/// `tachy explore`'s sampling profile: a program of its own, loaded only
/// by that command.
const PROFILE_SRC: &str = "src/bpf/profile.bpf.c";

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("OUT_DIR is set by cargo"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").expect("CARGO_CFG_TARGET_ARCH is set by cargo");
    let vmlinux_dir = match arch.as_str() {
        "x86_64" => "x86",
        "aarch64" => "arm64",
        other => panic!("tachy has no vmlinux.h for target architecture {other}"),
    };
    SkeletonBuilder::new()
        .source(SRC)
        .clang_args(["-I", &format!("vmlinux/{vmlinux_dir}"), "-I", "src/bpf"])
        .build_and_generate(out.join("tachy.skel.rs"))
        .expect("failed to build the BPF program (is clang installed?)");
    SkeletonBuilder::new()
        .source(PROFILE_SRC)
        .clang_args(["-I", &format!("vmlinux/{vmlinux_dir}"), "-I", "src/bpf"])
        .build_and_generate(out.join("profile.skel.rs"))
        .expect("failed to build the BPF profile program (is clang installed?)");
    // The programs' headers (tachy.h and one per concern, profile.h) are in
    // src/bpf: cargo watches every file under a directory it is given.
    println!("cargo:rerun-if-changed=src/bpf");
    println!("cargo:rerun-if-changed=vmlinux/{vmlinux_dir}");
    // The calibration functions (src/calibrate.rs) are found by name in
    // tachy's own binary: in .dynsym too, they outlive `strip` (make deb).
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=tachy_cal_*");
    version();
}

/// `0.1.0 (git 1a2b3c4d5e6f)` in a git checkout, `0.1.0` elsewhere (a
/// source tarball, or no git installed).
fn version() {
    let pkg = env::var("CARGO_PKG_VERSION").expect("CARGO_PKG_VERSION is set by cargo");
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
        (out.status.success() && !s.is_empty()).then_some(s)
    };
    let version = match git(&["rev-parse", "--short=12", "HEAD"]) {
        Some(commit) => {
            // Rebuild when HEAD moves: HEAD itself (a checkout), the branch
            // it names (a commit) and packed-refs (refs packed by gc). A
            // path that does not exist would make cargo rerun this script,
            // and so recompile the BPF program, on every build.
            let mut watch = vec!["HEAD".to_string(), "packed-refs".to_string()];
            watch.extend(git(&["symbolic-ref", "-q", "HEAD"]));
            for name in watch {
                if let Some(p) = git(&["rev-parse", "--git-path", &name]) {
                    if std::path::Path::new(&p).exists() {
                        println!("cargo:rerun-if-changed={p}");
                    }
                }
            }
            format!("{pkg} (git {commit})")
        }
        None => pkg,
    };
    println!("cargo:rustc-env=TACHY_VERSION={version}");
}
