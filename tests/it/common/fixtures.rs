//! The fixture programs: one table says what each is built from and how
//! ([`FIXTURES`]), and [`build`] builds them from `tests/fixtures/` into
//! `$CARGO_TARGET_TMPDIR/fixtures/`, once, when a source is newer.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::SystemTime;

use super::env_or;

/// The compiler of a fixture.
#[derive(Clone, Copy)]
enum Tool {
    /// `$FIXTURE_CC`, else gcc.
    Cc,
    /// `$FIXTURE_CXX`, else g++.
    Cxx,
    /// `$RUSTC`, else rustc.
    Rustc,
    /// `$GO`, else go (Debian's golang-go), with its caches under the
    /// fixtures' directory: a file outside any module builds as
    /// `command-line-arguments`.
    Go,
}

/// One fixture output.
struct Def {
    /// Its file name under the output directory; what tests ask for.
    name: &'static str,
    /// Files of `tests/fixtures/`: the first is compiled, the others
    /// (headers) only make the fixture rebuild when they change.
    sources: &'static [&'static str],
    /// Fixture outputs built first (linked in, or loaded at run time).
    deps: &'static [&'static str],
    tool: Tool,
    /// `TOOL FLAGS -o OUT SOURCE LATE`, with `{src}` standing for the
    /// sources' directory and `{out}` for the outputs'. `$ORIGIN` is
    /// literal (no shell runs): the loader finds a library next to the
    /// executable.
    flags: &'static [&'static str],
    late: &'static [&'static str],
    /// Then `strip --strip-all`, as distributions ship libraries.
    strip: bool,
}

const C: &[&str] = &["-std=c11", "-O2", "-g", "-pthread", "-Wall", "-Wextra"];
const CXX: &[&str] = &["-std=c++17", "-O2", "-g", "-pthread", "-Wall", "-Wextra"];
const RUST_APP: &[&str] = &[
    "--edition",
    "2021",
    "--crate-name",
    "rust_app",
    "--crate-type",
    "bin",
    "-O",
    "-g",
    "-C",
    "panic=unwind",
];
const RUST_NAMES: &[&str] = &[
    "--edition",
    "2021",
    "--crate-name",
    "rust_names",
    "--crate-type",
    "bin",
    "-O",
    "-g",
];

/// A fixture without dependencies or late arguments.
const fn plain(
    name: &'static str,
    sources: &'static [&'static str],
    tool: Tool,
    flags: &'static [&'static str],
) -> Def {
    Def {
        name,
        sources,
        deps: &[],
        tool,
        flags,
        late: &[],
        strip: false,
    }
}

/// A C++ fixture linked with libfixture.so, found next to it.
const fn with_libfixture(
    name: &'static str,
    sources: &'static [&'static str],
    flags: &'static [&'static str],
) -> Def {
    Def {
        deps: &["libfixture.so"],
        late: &["{out}/libfixture.so", "-Wl,-rpath,$ORIGIN"],
        ..plain(name, sources, Tool::Cxx, flags)
    }
}

/// Every fixture. Their modes and what they print are in their sources.
#[rustfmt::skip]
const FIXTURES: &[Def] = &[
    plain("libfixture.so", &["libfixture.c", "libfixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra",
            "-Wl,-soname,libfixture.so"]),
    with_libfixture("cpp_o2", &["workload.cpp", "libfixture.h", "fixture.h"],
          &["-std=c++17", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-I{src}"]),
    with_libfixture("cpp_o0", &["workload.cpp", "libfixture.h", "fixture.h"],
          &["-std=c++17", "-O0", "-g", "-pthread", "-Wall", "-Wextra", "-I{src}"]),
    with_libfixture("nested_o2", &["nested.cpp", "libfixture.h", "fixture.h"],
          &["-std=c++17", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-I{src}"]),
    plain("plain", &["plain.c", "fixture.h"], Tool::Cc, C),
    plain("retval", &["retval.c", "fixture.h"], Tool::Cc, C),
    // One function inlined into three callers, and called out of line.
    plain("inlined_o2", &["inlined.c", "fixture.h"], Tool::Cc, C),
    plain("inlined_o3", &["inlined.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O3", "-funroll-loops", "-g", "-Wall", "-Wextra"]),
    // An inline-only function whose loop's closing jump leaves it.
    plain("inlined_loop_o2", &["inlined_loop.c", "fixture.h"], Tool::Cc, C),
    plain("inlined_loop_o3", &["inlined_loop.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O3", "-funroll-loops", "-g", "-Wall", "-Wextra"]),
    // The same callers with and without frame pointers (--stack).
    plain("stacks_fp", &["stacks.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-fno-omit-frame-pointer"]),
    plain("stacks_nofp", &["stacks.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-fomit-frame-pointer"]),
    plain("faults", &["faults.c", "fixture.h"], Tool::Cc, C),
    plain("wide", &["wide.c", "fixture.h"], Tool::Cc, C),
    // Its nested plan costs ~10x its work: see the source.
    // Its leaves are called from inline assembly: no red zone.
    plain("budget", &["budget.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-mno-red-zone"]),
    plain("ijump", &["ijump.c", "fixture.h"], Tool::Cc, C),
    plain("icall", &["icall.c", "fixture.h"], Tool::Cc, C),
    // No builtins: every memset, memcpy and strlen is a call through the
    // PLT. No stdio either: it speaks the protocol by itself.
    plain("ifunc", &["ifunc.c"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-fno-builtin", "-Wall", "-Wextra", "-Wl,-z,now"]),
    // Stripped to its dynamic symbols: its `.cold` parts lose theirs.
    Def {
        strip: true,
        ..plain("libcold.so", &["libcold.c"], Tool::Cc,
                &["-std=c11", "-O2", "-g", "-fPIC", "-shared", "-Wall", "-Wextra",
                  "-Wl,-soname,libcold.so"])
    },
    Def {
        deps: &["libcold.so"],
        late: &["{out}/libcold.so", "-Wl,-rpath,$ORIGIN"],
        ..plain("shapes", &["shapes.c", "fixture.h"], Tool::Cc,
                &["-std=c11", "-O2", "-g", "-Wall", "-Wextra"])
    },
    plain("calls", &["calls.c", "fixture.h"], Tool::Cc, C),
    // Calls that need ret probes (unwinding).
    plain("calls_unwind", &["calls.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-pthread", "-Wall", "-Wextra", "-DWITH_UNWIND"]),
    plain("seams", &["seams.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-Wall", "-Wextra"]),
    // The same shapes with ret probes (the process may unwind).
    plain("seams_unwind", &["seams.c", "fixture.h"], Tool::Cc,
          &["-std=c11", "-O2", "-g", "-Wall", "-Wextra", "-DWITH_UNWIND"]),
    // Without CET's `endbr64` (as Debian's g++ builds by default), every
    // traced function starts with `push`.
    plain("exits", &["exits.cpp", "fixture.h"], Tool::Cxx,
          &["-std=c++17", "-O2", "-g", "-fcf-protection=none", "-Wall", "-Wextra"]),
    // Its late mode dlopen()s the library.
    Def {
        deps: &["libfixture.so"],
        late: &["-ldl"],
        ..plain("why", &["why.c", "fixture.h"], Tool::Cc,
                &["-O2", "-g", "-pthread", "-Wall", "-Wextra"])
    },
    // Signals drive it: see the source.
    plain("explore", &["explore.c"], Tool::Cc, &["-O2", "-g", "-pthread", "-Wall", "-Wextra"]),
    plain("args", &["args.cpp", "fixture.h"], Tool::Cxx,
          &["-std=c++17", "-O2", "-Wall", "-Wextra", "-g"]),
    // No DWARF.
    plain("args_nodebug", &["args.cpp", "fixture.h"], Tool::Cxx,
          &["-std=c++17", "-O2", "-Wall", "-Wextra"]),
    plain("by", &["by.cpp", "fixture.h"], Tool::Cxx, CXX),
    // Legacy mangling, and v0.
    plain("rust_app", &["rust_app.rs"], Tool::Rustc, RUST_APP),
    Def {
        late: &["-C", "symbol-mangling-version=v0"],
        ..plain("rust_app_v0", &["rust_app.rs"], Tool::Rustc, RUST_APP)
    },
    plain("rust_names", &["rust_names.rs"], Tool::Rustc, RUST_NAMES),
    Def {
        late: &["-C", "symbol-mangling-version=v0"],
        ..plain("rust_names_v0", &["rust_names.rs"], Tool::Rustc, RUST_NAMES)
    },
    plain("gowork", &["gowork.go"], Tool::Go, &["build"]),
    plain("gowork_stripped", &["gowork.go"], Tool::Go, &["build", "-ldflags=-s -w"]),
];

fn def(name: &str) -> &'static Def {
    FIXTURES.iter().find(|d| d.name == name).unwrap_or_else(|| {
        let known: Vec<&str> = FIXTURES.iter().map(|d| d.name).collect();
        panic!("unknown fixture {name:?} (known: {})", known.join(", "))
    })
}

/// Directory holding the fixture sources.
pub fn fixtures_src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

/// Directory the fixtures are built into.
pub fn fixtures_out_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR")).join("fixtures")
}

/// The command that builds `def` at `tmp_out`.
fn compile_command(def: &Def, src: &Path, out_dir: &Path, tmp_out: &Path) -> Command {
    let mut c = Command::new(match def.tool {
        Tool::Cc => env_or("FIXTURE_CC", "gcc"),
        Tool::Cxx => env_or("FIXTURE_CXX", "g++"),
        Tool::Rustc => env_or("RUSTC", "rustc"),
        Tool::Go => env_or("GO", "go"),
    });
    if let Tool::Go = def.tool {
        c.env("GOCACHE", out_dir.join(".gocache"))
            .env("GOPATH", out_dir.join(".gopath"))
            .env("GO111MODULE", "off");
    }
    let (src_dir, out) = (src.to_string_lossy(), out_dir.to_string_lossy());
    let fill = |a: &&str| a.replace("{src}", &src_dir).replace("{out}", &out);
    c.args(def.flags.iter().map(fill))
        .arg("-o")
        .arg(tmp_out)
        .arg(src.join(def.sources[0]))
        .args(def.late.iter().map(fill));
    c
}

fn mtime(path: &Path) -> Option<SystemTime> {
    fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// Builds fixture `name` (and what it depends on) unless an up-to-date copy
/// exists, and returns the path of the output.
///
/// Within a test process each fixture is checked once; concurrent test
/// processes are serialized by an flock on `fixtures/.build.lock`, and every
/// output is compiled under a temporary name and then renamed into place, so
/// a running fixture is never overwritten in place. Panics with the
/// compiler's stderr if compilation fails.
pub fn build(name: &str) -> PathBuf {
    static BUILT: Mutex<BTreeMap<String, PathBuf>> = Mutex::new(BTreeMap::new());
    let mut built = BUILT.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let out_dir = fixtures_out_dir();
    fs::create_dir_all(&out_dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", out_dir.display()));
    let _lock = FileLock::acquire(&out_dir.join(".build.lock"));
    build_locked(name, &out_dir, &mut built)
}

fn build_locked(name: &str, out_dir: &Path, built: &mut BTreeMap<String, PathBuf>) -> PathBuf {
    if let Some(path) = built.get(name) {
        return path.clone();
    }
    let def = def(name);
    let src = fixtures_src_dir();

    // Inputs: the sources, the outputs depended on, and this file (it holds
    // the compiler flags).
    let mut inputs: Vec<PathBuf> = def.sources.iter().map(|s| src.join(s)).collect();
    for dep in def.deps {
        inputs.push(build_locked(dep, out_dir, built));
    }
    inputs.push(PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/common/fixtures.rs"
    )));

    let out = out_dir.join(name);
    let newest_input = inputs
        .iter()
        .map(|p| mtime(p).unwrap_or_else(|| panic!("missing fixture input {}", p.display())))
        .max()
        .expect("fixture has inputs");
    let up_to_date = matches!(mtime(&out), Some(t) if t > newest_input);

    if !up_to_date {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let tmp = out_dir.join(format!(
            ".{name}.tmp.{}.{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        run_step(name, compile_command(def, &src, out_dir, &tmp), &tmp);
        if def.strip {
            let mut strip = Command::new("strip");
            strip.arg("--strip-all").arg(&tmp);
            run_step(name, strip, &tmp);
        }
        fs::rename(&tmp, &out).unwrap_or_else(|e| {
            let _ = fs::remove_file(&tmp);
            panic!("cannot move {} to {}: {e}", tmp.display(), out.display())
        });
    }

    built.insert(name.to_string(), out.clone());
    out
}

/// Runs one step of building fixture `name` into `tmp`; on failure removes
/// `tmp` and panics with what the tool printed.
fn run_step(name: &str, mut cmd: Command, tmp: &Path) {
    let output = cmd
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("cannot run compiler for fixture {name}: {cmd:?}: {e}"));
    if !output.status.success() {
        let _ = fs::remove_file(tmp);
        panic!(
            "building fixture {name} failed ({}):\n{cmd:?}\n--- stderr ---\n{}\n--- stdout ---\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr),
            String::from_utf8_lossy(&output.stdout),
        );
    }
}

/// Exclusive flock held until dropped (closing the file releases it).
struct FileLock(File);

impl FileLock {
    fn acquire(path: &Path) -> FileLock {
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", path.display()));
        loop {
            // SAFETY: the descriptor is valid for the lifetime of `file`.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return FileLock(file);
            }
            let err = std::io::Error::last_os_error();
            if err.kind() != std::io::ErrorKind::Interrupted {
                panic!("flock {}: {err}", path.display());
            }
        }
    }
}
