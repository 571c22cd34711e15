//! What tachy installs: completion scripts that load and complete in bash,
//! man pages that render, `make install` and `make deb` putting the same
//! files in the usual places, and `--version` naming the commit.
//! Needs no root: everything goes under temporary directories.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const TACHY: &str = env!("CARGO_BIN_EXE_tachy");

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Every file under `root`, as paths relative to it.
fn files(root: &Path) -> BTreeSet<String> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                out.insert(p.strip_prefix(root).unwrap().display().to_string());
            }
        }
    }
    let mut out = BTreeSet::new();
    walk(root, root, &mut out);
    out
}

const PAGES: [&str; 9] = [
    "tachy.1",
    "tachy-latency.1",
    "tachy-nested.1",
    "tachy-list.1",
    "tachy-merge.1",
    "tachy-diff.1",
    "tachy-completions.1",
    "tachy-man.1",
    "tachy-explore.1",
];

/// Completes `line` (the word under the cursor is its last) with the
/// script bash loaded from `tachy completions bash`.
fn complete(line: &str) -> Vec<String> {
    complete_in(Path::new("."), line)
}

/// [`complete`] with `dir` as the current directory.
fn complete_in(dir: &Path, line: &str) -> Vec<String> {
    let script = format!(
        "source <({TACHY} completions bash) || exit 9
         COMP_LINE='{line}'; COMP_POINT=${{#COMP_LINE}}
         read -ra COMP_WORDS <<< \"$COMP_LINE\"
         [[ $COMP_LINE == *' ' ]] && COMP_WORDS+=('')
         COMP_CWORD=$(( ${{#COMP_WORDS[@]}} - 1 ))
         f=$(complete -p tachy | sed -n 's/.*-F \\([^ ]*\\).*/\\1/p')
         \"$f\" tachy \"${{COMP_WORDS[COMP_CWORD]}}\" \"${{COMP_WORDS[COMP_CWORD-1]}}\"
         printf '%s\\n' \"${{COMPREPLY[@]}}\""
    );
    let out = run(Command::new("bash").arg("-c").arg(script).current_dir(dir));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn bash_loads_the_completions_and_completes_subcommands_and_options() {
    run(Command::new("bash").arg("-c").arg(format!(
        "set -e; source <({TACHY} completions bash); complete -p tachy"
    )));
    let subs = complete("tachy ");
    for s in ["latency", "nested", "list", "completions", "man"] {
        assert!(subs.iter().any(|x| x == s), "{s} not in {subs:?}");
    }
    assert_eq!(complete("tachy nes"), vec!["nested"]);
    let opts = complete("tachy latency --slo");
    assert_eq!(opts, vec!["--slower-than"]);
    let shells = complete("tachy completions ");
    for s in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|x| x == s), "{s} not in {shells:?}");
    }
}

/// -p and -t complete the ids of running processes and threads, never file
/// names; --by completes its keys.
#[test]
fn completions_offer_ids_after_p_and_t_and_keys_after_by() {
    let dir = scratch("complete-ids");
    std::fs::write(dir.join("1x"), "").unwrap();
    let numeric = |words: &[String]| words.iter().all(|w| w.bytes().all(|b| b.is_ascii_digit()));
    for line in [
        "tachy latency -p 1",
        "tachy latency --pid 1",
        "tachy nested -p 1",
        "tachy list -p 1",
    ] {
        let got = complete_in(&dir, line);
        assert!(
            got.iter().any(|w| w == "1") && numeric(&got),
            "{line}: {got:?}"
        );
    }
    let me = std::process::id().to_string();
    let got = complete_in(&dir, "tachy latency -p ");
    assert!(got.contains(&me) && numeric(&got), "{got:?}");
    // A thread of this test, which runs several.
    let got = complete_in(&dir, "tachy latency -t ");
    let tid = std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .find(|t| *t != me)
        .unwrap_or(me);
    assert!(got.contains(&tid) && numeric(&got), "{got:?}");
    assert_eq!(complete_in(&dir, "tachy latency --by c"), vec!["caller"]);
    let keys = complete_in(&dir, "tachy latency --by ");
    for k in [
        "caller",
        "tid",
        "pid",
        "goroutine",
        "retval",
        "arg0",
        "arg5",
    ] {
        assert!(keys.iter().any(|x| x == k), "{k} not in {keys:?}");
    }
    // zsh and fish: the same, by their own means.
    let script = |shell: &str| {
        String::from_utf8(run(Command::new(TACHY).args(["completions", shell])).stdout).unwrap()
    };
    let zsh = script("zsh");
    assert!(!zsh.contains(":PID:_default") && !zsh.contains(":TID:_default"));
    // -p and --pid of latency, nested, list and explore.
    assert_eq!(zsh.matches(":PID:_pids'").count(), 8, "{zsh}");
    assert_eq!(zsh.matches(":TID:_tachy_tids'").count(), 4, "{zsh}");
    assert!(zsh.contains("_tachy_tids() {"));
    assert!(
        zsh.contains(":KEY:(caller tid pid goroutine retval arg0"),
        "{zsh}"
    );
    let fish = script("fish");
    for line in fish
        .lines()
        .filter(|l| l.contains(" -l pid ") || l.contains(" -l tid "))
    {
        assert!(line.contains(" -r -f -a \"("), "{line}");
    }
    assert!(fish.contains("__fish_complete_pids"));
    if let Ok(out) = Command::new("zsh").arg("-n").arg("-c").arg(&zsh).output() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    if let Ok(out) = Command::new("fish").arg("-n").arg("-c").arg(&fish).output() {
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(dir.join("tachy.fish"), &fish).unwrap();
        for (line, want) in [("-p 1", "1"), ("-t ", tid.as_str()), ("--by c", "caller")] {
            let out = run(Command::new("fish")
                .arg("-c")
                .arg(format!(
                    "source tachy.fish; complete -C 'tachy latency {line}'"
                ))
                .current_dir(&dir));
            let text = String::from_utf8(out.stdout).unwrap();
            let got: Vec<&str> = text
                .lines()
                .map(|l| l.split('\t').next().unwrap())
                .collect();
            assert!(got.contains(&want), "fish {line}: {text}");
            assert!(!got.contains(&"1x"), "fish {line}: {text}");
        }
    }
}

#[test]
fn every_man_page_renders() {
    let dir = scratch("man");
    run(Command::new(TACHY).arg("man").arg(&dir));
    let expect: BTreeSet<String> = PAGES.iter().map(|p| p.to_string()).collect();
    assert_eq!(files(&dir), expect);
    for page in PAGES {
        let out = run(Command::new("man")
            .args(["-P", "cat", "-l"])
            .arg(dir.join(page))
            .env("MANWIDTH", "100")
            .env("LC_ALL", "C.UTF-8"));
        let text = String::from_utf8(out.stdout).unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.trim().is_empty(), "{page}: {stderr}");
        let title = page.trim_end_matches(".1");
        assert!(text.starts_with(&format!("{title}(1)")), "{page}:\n{text}");
        assert!(text.contains("SYNOPSIS"), "{page}");
    }
    // The page of `latency` documents its options, with their help text.
    let out = run(Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(dir.join("tachy-latency.1"))
        .env("MANWIDTH", "200"));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("--slower-than <DUR>"), "{text}");
    assert!(
        text.contains("Keep only calls that took at least DUR"),
        "{text}"
    );
    // `tachy man` alone prints tachy(1).
    let out = run(Command::new(TACHY).arg("man"));
    assert_eq!(out.stdout, std::fs::read(dir.join("tachy.1")).unwrap());
}

/// `man -l` of `page`, as plain text `width` columns wide.
fn render_page(page: &Path, width: u32) -> String {
    let out = run(Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(page)
        .env("MANWIDTH", width.to_string())
        .env("LC_ALL", "C.UTF-8"));
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn man_creates_a_missing_directory_and_prints_a_subcommands_page() {
    let root = scratch("man-missing");
    let dir = root.join("a/b/man1");
    run(Command::new(TACHY).arg("man").arg(&dir));
    let expect: BTreeSet<String> = PAGES.iter().map(|p| p.to_string()).collect();
    assert_eq!(files(&dir), expect);
    // A name without a / is a page, with or without its tachy- prefix,
    // even where a directory of that name exists.
    std::fs::create_dir_all(root.join("latency")).unwrap();
    for name in ["latency", "tachy-latency"] {
        let out = run(Command::new(TACHY).args(["man", name]).current_dir(&root));
        assert_eq!(
            out.stdout,
            std::fs::read(dir.join("tachy-latency.1")).unwrap(),
            "{name}"
        );
    }
    assert_eq!(files(&root.join("latency")), BTreeSet::new());
    // ./latency is the directory.
    run(Command::new(TACHY)
        .args(["man", "./latency"])
        .current_dir(&root));
    assert_eq!(files(&root.join("latency")), expect);
    // A name that is no page is bad usage, and says how to name a directory.
    let out = Command::new(TACHY)
        .args(["man", "latncy"])
        .current_dir(&root)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"latncy\" is not a page (tachy, latency, nested,")
            && err.contains("(./latncy)"),
        "{err}"
    );
    assert!(!root.join("latncy").exists());
    // The help says how a page is told from a directory.
    let help = run(Command::new(TACHY).args(["man", "--help"]));
    let help = String::from_utf8(help.stdout).unwrap();
    let words = help.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        words.contains("An argument with a `/` in it, or `.` or `..`, is a directory instead"),
        "{help}"
    );
}

/// The pages have the sections a user looks for, and the after-help text
/// under EXAMPLES and NOTES; every TACHY_ variable the code reads is under
/// ENVIRONMENT.
#[test]
fn man_pages_have_exit_status_environment_files_and_examples() {
    let dir = scratch("man-sections");
    run(Command::new(TACHY).arg("man").arg(&dir));
    let mut read = BTreeSet::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join("src")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for call in ["var_os(\"", "var(\""] {
                    for (i, _) in text.match_indices(call) {
                        let name: String = text[i + call.len()..]
                            .chars()
                            .take_while(|c| *c != '"')
                            .collect();
                        // TACHY_BLESS rewrites the golden files of the tests.
                        if name.starts_with("TACHY_") && name != "TACHY_BLESS" {
                            read.insert(name);
                        }
                    }
                }
            }
        }
    }
    assert!(read.contains("TACHY_CACHE_DIR") && read.contains("TACHY_BY_GROUPS"));
    for page in PAGES {
        let text = render_page(&dir.join(page), 200);
        for section in ["\nEXIT STATUS\n", "\nENVIRONMENT\n", "\nFILES\n"] {
            assert!(text.contains(section), "{page}: no {section}\n{text}");
        }
        assert!(!text.contains("\nEXTRA\n"), "{page}:\n{text}");
        for var in &read {
            assert!(text.contains(var.as_str()), "{page}: no {var}");
        }
        assert!(text.contains("/var/cache/tachy/probe-time"), "{page}");
        if page != "tachy.1" {
            assert!(text.contains("\nEXAMPLES\n"), "{page}:\n{text}");
        }
    }
    let text = render_page(&dir.join("tachy-latency.1"), 200);
    // One example a line, as in --help.
    assert!(
        text.contains("       tachy latency -p 4242 'db::Table::scan'          histogram of every overload and clone\n"),
        "{text}"
    );
    assert!(text.contains("\nNOTES\n"), "{text}");
    assert!(text.contains("2      Bad usage"), "{text}");
}

#[test]
fn version_names_the_commit() {
    let out = run(Command::new(TACHY).arg("--version"));
    let line = String::from_utf8(out.stdout).unwrap();
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success());
    match head {
        Some(h) => {
            let commit = String::from_utf8(h.stdout).unwrap();
            assert_eq!(
                line,
                format!(
                    "tachy {} (git {})\n",
                    env!("CARGO_PKG_VERSION"),
                    commit.trim()
                )
            );
        }
        None => assert_eq!(line, format!("tachy {}\n", env!("CARGO_PKG_VERSION"))),
    }
}

fn expected_install(prefix: &str, zsh: &str, man_suffix: &str) -> BTreeSet<String> {
    let mut want: BTreeSet<String> = [
        format!("{prefix}/bin/tachy"),
        format!("{prefix}/share/bash-completion/completions/tachy"),
        format!("{prefix}/share/fish/vendor_completions.d/tachy.fish"),
        format!("{prefix}/share/{zsh}/_tachy"),
    ]
    .into_iter()
    .collect();
    for p in PAGES {
        want.insert(format!("{prefix}/share/man/man1/{p}{man_suffix}"));
    }
    want
}

#[test]
fn make_install_and_make_deb_put_the_same_files_in_the_usual_places() {
    let root = scratch("install");
    let dest = root.join("dest");
    run(Command::new("make")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("--no-print-directory")
        .arg("install")
        .arg(format!("BIN={TACHY}"))
        .arg(format!("DESTDIR={}", dest.display()))
        .arg("PREFIX=/opt/tachy")
        .arg(format!("GEN={}", root.join("gen").display())));
    assert_eq!(
        files(&dest),
        expected_install("opt/tachy", "zsh/site-functions", "")
    );
    let installed = dest.join("opt/tachy/bin/tachy");
    let v = run(Command::new(&installed).arg("--version"));
    assert!(String::from_utf8(v.stdout).unwrap().starts_with("tachy "));
    let bash =
        std::fs::read(dest.join("opt/tachy/share/bash-completion/completions/tachy")).unwrap();
    assert_eq!(
        bash,
        run(Command::new(TACHY).args(["completions", "bash"])).stdout
    );

    // The package: the same files under /usr, with Debian's zsh directory,
    // gzipped man pages, a stripped binary, and the files Debian asks for.
    let debs = root.join("deb");
    let make_deb = |target: &str| {
        run(Command::new("make")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg("--no-print-directory")
            .arg(target)
            .arg(format!("BIN={TACHY}"))
            .arg(format!("DEB_DIR={}", debs.display()))
            // lintian refuses an uncompressed package; xz takes longer.
            .arg("DEB_COMPRESS=gzip"))
    };
    make_deb("deb");
    let deb = std::fs::read_dir(&debs)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "deb"))
        .expect("make deb wrote no .deb");
    let version = deb_version();
    let name = deb.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with(&format!("tachy_{version}_")), "{name}");
    let fields = run(Command::new("dpkg-deb").args(["-f"]).arg(&deb));
    let fields = String::from_utf8(fields.stdout).unwrap();
    assert!(fields.contains("Package: tachy\n"), "{fields}");
    assert!(
        fields.contains(&format!("Version: {version}\n")),
        "{fields}"
    );
    assert!(fields.contains("@example.org>\n"), "{fields}");
    let unpacked = root.join("unpacked");
    run(Command::new("dpkg-deb").arg("-x").arg(&deb).arg(&unpacked));
    let mut want = expected_install("usr", "zsh/vendor-completions", ".gz");
    for f in [
        "usr/share/doc/tachy/copyright",
        "usr/share/doc/tachy/changelog.gz",
        "usr/share/lintian/overrides/tachy",
    ] {
        want.insert(f.to_string());
    }
    assert_eq!(files(&unpacked), want);
    // Stripped, but the calibration functions it finds in itself by name
    // are still there, in .dynsym.
    let bin = unpacked.join("usr/bin/tachy");
    let sections = run(Command::new("readelf").arg("-SW").arg(&bin));
    let sections = String::from_utf8(sections.stdout).unwrap();
    assert!(
        !sections.contains(".symtab") && !sections.contains(".debug_info"),
        "{sections}"
    );
    let dynsym = run(Command::new("nm").arg("-D").arg(&bin));
    let dynsym = String::from_utf8(dynsym.stdout).unwrap();
    for f in ["tachy_cal_push_ret", "tachy_cal_site_with"] {
        assert!(dynsym.contains(f), "{f} not in .dynsym:\n{dynsym}");
    }
    assert_eq!(
        run(Command::new(&bin).arg("--version")).stdout,
        run(Command::new(&installed).arg("--version")).stdout
    );
    let page = run(Command::new("man")
        .args(["-P", "cat", "-l"])
        .arg(unpacked.join("usr/share/man/man1/tachy-nested.1.gz")));
    assert!(String::from_utf8(page.stdout)
        .unwrap()
        .starts_with("tachy-nested(1)"));
    // Debian's lintian finds no error in it.
    let lint = make_deb("lintian");
    let text = String::from_utf8_lossy(&lint.stdout);
    assert!(!text.lines().any(|l| l.starts_with("E:")), "{text}");
}

/// The version `make deb` gives the package: Cargo.toml's on a commit
/// tagged with it, else 0.1.0+gitYYYYMMDD.COMMIT (the commit's date, UTC).
fn deb_version() -> String {
    let pkg = env!("CARGO_PKG_VERSION");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("TZ", "UTC")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8(o.stdout).unwrap().trim().to_string())
    };
    let Some(commit) = git(&["rev-parse", "--short=7", "HEAD"]) else {
        return pkg.to_string();
    };
    let tags = git(&["tag", "--points-at", "HEAD"]).unwrap_or_default();
    if tags.lines().any(|t| t == format!("v{pkg}")) {
        return pkg.to_string();
    }
    let date = git(&["log", "-1", "--date=format-local:%Y%m%d", "--format=%cd"]).unwrap();
    format!("{pkg}+git{date}.{commit}")
}
