//! Least privilege: tachy traces with CAP_BPF and CAP_PERFMON instead of
//! root, and names the capability it lacks otherwise. Runs tachy as user
//! `nobody` with chosen capabilities through setpriv(1).

use crate::common;

use std::process::{Command, Output};

/// Runs tachy as uid/gid 65534 with exactly `caps` (plus reading any file,
/// as the fixtures live under root's directories).
fn tachy_with_caps(caps: &[&str], args: &[&str]) -> Option<Output> {
    if !common::is_root() {
        common::skip("needs root to drop to chosen capabilities");
        return None;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        common::skip("needs setpriv(1) from util-linux");
        return None;
    }
    let mut all: Vec<String> = caps.iter().map(|c| format!("+{c}")).collect();
    all.push("+dac_read_search".into());
    let list = all.join(",");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={list}"))
        .arg(format!("--ambient-caps={list}"))
        .arg(common::tachy())
        .args(args)
        .env("FIXTURE_NO_WAIT", "1")
        .output()
        .expect("setpriv runs");
    Some(out)
}

#[test]
fn traces_with_cap_bpf_and_cap_perfmon() {
    let _lock = common::serial();
    let exe = common::build("plain");
    let Some(out) = tachy_with_caps(
        &["bpf", "perfmon"],
        &[
            "latency",
            "--json",
            "slow_sum",
            "--",
            exe.to_str().unwrap(),
            "5",
            "1",
        ],
    ) else {
        return;
    };
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: serde_json::Value =
        serde_json::from_str(stdout.lines().find(|l| l.starts_with('{')).unwrap()).unwrap();
    assert_eq!(report["functions"][0]["count"], 5, "{report}");
}

#[test]
fn names_the_missing_capability() {
    let _lock = common::serial();
    let exe = common::build("plain");
    let Some(out) = tachy_with_caps(
        &["bpf"],
        &["latency", "slow_sum", "--", exe.to_str().unwrap(), "1", "1"],
    ) else {
        return;
    };
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tachy: tracing needs root, or the capabilities CAP_BPF and CAP_PERFMON (missing: CAP_PERFMON)\n"
    );
}

#[test]
fn another_users_process_needs_cap_sys_ptrace() {
    let _lock = common::serial();
    // Process 1 belongs to root; nobody without CAP_SYS_PTRACE cannot read its map.
    let Some(out) = tachy_with_caps(&["bpf", "perfmon"], &["latency", "-p", "1", "c:malloc"])
    else {
        return;
    };
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err,
        "tachy: cannot read the memory map of process 1: permission denied (another user's process needs root or CAP_SYS_PTRACE)\n"
    );
}

#[test]
fn traces_another_users_process_with_cap_sys_ptrace() {
    use std::io::{BufRead, BufReader, Read};
    use std::process::Stdio;
    let _lock = common::serial();
    if !common::is_root() || Command::new("setpriv").arg("--version").output().is_err() {
        common::skip("needs root and setpriv(1)");
        return;
    }
    // The fixture runs as root; tachy as nobody with three capabilities.
    let mut fx = common::Fixture::spawn("plain", &["4", "1"]);
    let caps = "+bpf,+perfmon,+sys_ptrace";
    let mut child = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(format!("--inh-caps={caps}"))
        .arg(format!("--ambient-caps={caps}"))
        .arg(common::tachy())
        .args(["latency", "-p", &fx.pid().to_string(), "slow_sum"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut header = String::new();
    out.read_line(&mut header).unwrap();
    assert!(
        header.starts_with("Tracing 1 function in pid "),
        "{header:?}"
    );
    fx.go();
    let (status, _) = fx.wait();
    assert!(status.success());
    let mut rest = String::new();
    out.read_to_string(&mut rest).unwrap();
    assert!(child.wait().unwrap().success(), "{rest}");
    assert!(rest.contains("count: 4\n"), "{rest}");
}

/// Copies `src` to `root` + `src`'s absolute path (making the directories).
fn copy_into(root: &std::path::Path, src: &std::path::Path) {
    let dst = root.join(src.strip_prefix("/").unwrap());
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    std::fs::copy(src, &dst).unwrap();
}

/// A process chrooted into a directory of its own: a debug file that its
/// build-ID path reaches through a symlink to an absolute path is looked
/// up inside the process's root, as the process would see it, never on the
/// host: a symlink to a host file (which the process cannot see) is not
/// followed there, and one to a path inside its root is.
#[test]
fn symlinks_in_a_process_root_resolve_inside_it() {
    use object::Object;
    let _lock = common::serial();
    if !common::is_root() || Command::new("chroot").arg("--version").output().is_err() {
        common::skip("needs root and chroot(1)");
        return;
    }
    let plain = common::build("plain");
    let base = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("privilege-root-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&base);
    let root = base.join("root");
    let host = base.join("host");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::create_dir_all(&host).unwrap();

    // The program, stripped (slow_sum is in no symbol table it keeps), its
    // libraries, and its debug file on the host.
    let run = |cmd: &mut Command| assert!(cmd.status().unwrap().success(), "{cmd:?}");
    run(Command::new("strip")
        .arg("-o")
        .arg(root.join("app"))
        .arg(&plain));
    run(Command::new("objcopy")
        .arg("--only-keep-debug")
        .arg(&plain)
        .arg(host.join("app.debug")));
    let ldd = Command::new("ldd").arg(&plain).output().unwrap();
    for lib in String::from_utf8_lossy(&ldd.stdout)
        .split_whitespace()
        .filter(|w| w.starts_with('/'))
    {
        copy_into(&root, std::path::Path::new(lib));
    }
    let data = std::fs::read(&plain).unwrap();
    let id = object::File::parse(&*data)
        .unwrap()
        .build_id()
        .unwrap()
        .unwrap();
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let by_id = root
        .join("usr/lib/debug/.build-id")
        .join(&hex[..2])
        .join(format!("{}.debug", &hex[2..]));
    std::fs::create_dir_all(by_id.parent().unwrap()).unwrap();
    // To the host's copy, by its absolute host path.
    std::os::unix::fs::symlink(host.join("app.debug"), &by_id).unwrap();

    let mut cmd = Command::new("chroot");
    cmd.arg(&root).args(["/app", "1", "1"]);
    let mut fx = common::Fixture::spawn_command("plain", cmd);
    let pid = fx.pid().to_string();
    let list = || {
        Command::new(common::tachy())
            .args(["list", "-p", &pid, "slow_sum"])
            .output()
            .unwrap()
    };
    let out = list();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no function matches \"slow_sum\""),
        "{stderr}"
    );

    // To a copy inside the root, by its absolute path there.
    std::fs::copy(host.join("app.debug"), root.join("usr/lib/debug/app.debug")).unwrap();
    std::fs::remove_file(&by_id).unwrap();
    std::os::unix::fs::symlink("/usr/lib/debug/app.debug", &by_id).unwrap();
    let out = list();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "(symbols from the debug file /proc/{pid}/root/usr/lib/debug/.build-id/"
        )),
        "{stdout}"
    );
    fx.go();
    let (status, _) = fx.wait();
    assert!(status.success());
    let _ = std::fs::remove_dir_all(&base);
}
