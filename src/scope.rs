//! Which processes a trace counts when it is not one `-p PID`: several
//! pids, every process whose name matches (`--comm`, `--pgrep`), or a
//! cgroup v2 directory (`--cgroup`). Reads `/proc` and the cgroup file
//! system; never touches BPF.

use std::ffi::CString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// Processes to trace other than one `-p PID`: found when tracing starts
/// (and, for a cgroup, as they come).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Scoping {
    /// Several `-p`.
    Pids(Vec<u32>),
    /// `--cgroup PATH`.
    Cgroup(PathBuf),
    /// `--comm NAME`.
    Comm(String),
    /// `--pgrep PATTERN`.
    Pgrep(String),
}

impl Scoping {
    /// The option, as typed.
    pub fn flag(&self) -> &'static str {
        match self {
            Scoping::Pids(_) => "-p with several processes",
            Scoping::Cgroup(_) => "--cgroup",
            Scoping::Comm(_) => "--comm",
            Scoping::Pgrep(_) => "--pgrep",
        }
    }
}

/// A cgroup v2 directory as the BPF side tells it: its id (the inode of
/// the directory) and its level below the root of the hierarchy (0).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cgroup {
    pub path: PathBuf,
    pub id: u64,
    pub level: u32,
}

/// `statfs` magic of the cgroup v2 file system.
const CGROUP2_SUPER_MAGIC: i64 = 0x6367_7270;

/// Checks that `path` is a cgroup v2 directory and finds its id and level.
pub fn cgroup(path: &Path) -> Result<Cgroup> {
    let canon = std::fs::canonicalize(path)
        .with_context(|| format!("--cgroup {}: no such directory", path.display()))?;
    let meta = std::fs::metadata(&canon)
        .with_context(|| format!("--cgroup {}: cannot read it", path.display()))?;
    if !meta.is_dir() {
        bail!("--cgroup {}: not a directory", path.display());
    }
    let c = CString::new(canon.as_os_str().as_encoded_bytes())
        .context("--cgroup: the path holds a NUL byte")?;
    // SAFETY: statfs on a NUL-terminated path into a zeroed struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; the struct outlives the call.
    if unsafe { libc::statfs(c.as_ptr(), &mut st) } != 0 {
        bail!(
            "--cgroup {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    if st.f_type as i64 != CGROUP2_SUPER_MAGIC {
        bail!(
            "--cgroup {}: not a cgroup v2 directory (cgroup v2 is mounted at {})",
            path.display(),
            cgroup2_mounts()
                .first()
                .map_or("no mount point".to_string(), |m| m.display().to_string())
        );
    }
    // The level is the depth below the mount point of the hierarchy; the
    // mount whose path is the longest prefix holds it.
    let mount = cgroup2_mounts()
        .into_iter()
        .filter(|m| canon.starts_with(m))
        .max_by_key(|m| m.as_os_str().len())
        .with_context(|| format!("--cgroup {}: no cgroup v2 mount holds it", path.display()))?;
    let level = canon
        .strip_prefix(&mount)
        .map_or(0, |rest| rest.components().count()) as u32;
    Ok(Cgroup {
        path: canon,
        id: meta.ino(),
        level,
    })
}

/// Where cgroup v2 is mounted, from /proc/self/mountinfo.
pub fn cgroup2_mounts() -> Vec<PathBuf> {
    let Ok(info) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    info.lines()
        .filter_map(|l| {
            // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS... - FSTYPE SOURCE ...
            let (left, right) = l.split_once(" - ")?;
            let mount = left.split(' ').nth(4)?;
            (right.split(' ').next()? == "cgroup2").then(|| PathBuf::from(unescape_mount(mount)))
        })
        .collect()
}

/// mountinfo writes space, tab, newline and backslash as `\ooo`.
fn unescape_mount(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let oct = b.get(i + 1..i + 4).and_then(|d| {
            std::str::from_utf8(d)
                .ok()
                .and_then(|d| u8::from_str_radix(d, 8).ok())
        });
        match (b[i], oct) {
            (b'\\', Some(c)) => {
                out.push(c);
                i += 4;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The processes of a cgroup and the cgroups below it, now.
pub fn cgroup_pids(dir: &Path) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        if let Ok(text) = std::fs::read_to_string(d.join("cgroup.procs")) {
            pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
        }
        if let Ok(entries) = std::fs::read_dir(&d) {
            dirs.extend(
                entries
                    .flatten()
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
    }
    pids.sort_unstable();
    pids
}

/// A process's command name, as `/proc/PID/comm` holds it.
pub fn comm(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
    Some(s.trim_end_matches('\n').to_string())
}

/// Every running process (not tachy itself) whose command name `matches`.
fn pids_where(matches: impl Fn(&str) -> bool) -> Vec<u32> {
    let me = std::process::id();
    let mut pids: Vec<u32> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| p != me)
        .filter(|&p| comm(p).is_some_and(|c| matches(&c)))
        .collect();
    pids.sort_unstable();
    pids
}

/// An extended regular expression compiled by the C library, as pgrep
/// compiles its pattern.
struct Regex(libc::regex_t);

impl Regex {
    fn new(pattern: &str) -> Result<Regex> {
        let c = CString::new(pattern).context("--pgrep: the pattern holds a NUL byte")?;
        // SAFETY: regcomp initializes the zeroed regex_t from a
        // NUL-terminated pattern; on failure nothing needs freeing.
        let mut re: libc::regex_t = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let rc =
            unsafe { libc::regcomp(&mut re, c.as_ptr(), libc::REG_EXTENDED | libc::REG_NOSUB) };
        if rc != 0 {
            let mut buf = [0u8; 256];
            // SAFETY: regerror writes at most buf.len() bytes, NUL-terminated.
            unsafe { libc::regerror(rc, &re, buf.as_mut_ptr().cast(), buf.len()) };
            let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
            bail!(
                "--pgrep {pattern:?}: {}",
                String::from_utf8_lossy(&buf[..end])
            );
        }
        Ok(Regex(re))
    }

    fn is_match(&self, s: &str) -> bool {
        let Ok(c) = CString::new(s) else { return false };
        // SAFETY: a compiled regex and a NUL-terminated string; no matches
        // are asked for (REG_NOSUB).
        unsafe { libc::regexec(&self.0, c.as_ptr(), 0, std::ptr::null_mut(), 0) == 0 }
    }
}

impl Drop for Regex {
    fn drop(&mut self) {
        // SAFETY: the regex was compiled by regcomp and is freed once.
        unsafe { libc::regfree(&mut self.0) };
    }
}

/// Checks a `--pgrep` pattern: an extended regular expression that
/// compiles; else why not.
pub fn check_pattern(pattern: &str) -> std::result::Result<(), String> {
    Regex::new(pattern)
        .map(|_| ())
        .map_err(|e| format!("{e:#}"))
}

/// The processes to trace now: `-p` pids (which must run), or those whose
/// name matches; the cgroup's are found by [`cgroup_pids`]. Clear errors
/// when none (or a named pid) is running.
pub fn pids(s: &Scoping) -> Result<Vec<u32>> {
    match s {
        Scoping::Pids(pids) => {
            if let Some(gone) = pids.iter().find(|&&p| !crate::target::process_alive(p)) {
                bail!("-p: no process {gone} is running");
            }
            Ok(pids.clone())
        }
        Scoping::Comm(name) => {
            if name.len() > 15 {
                bail!("--comm {name:?}: command names have at most 15 characters (/proc/PID/comm); use --pgrep '^{}'", &name[..name.char_indices().nth(15).map_or(name.len(), |(i, _)| i)]);
            }
            let pids = pids_where(|c| c == name);
            if pids.is_empty() {
                bail!("--comm {name}: no running process has that command name");
            }
            Ok(pids)
        }
        Scoping::Pgrep(pattern) => {
            let re = Regex::new(pattern)?;
            let pids = pids_where(|c| re.is_match(c));
            if pids.is_empty() {
                bail!("--pgrep {pattern}: no running process's command name matches");
            }
            Ok(pids)
        }
        Scoping::Cgroup(path) => Ok(cgroup_pids(path)),
    }
}

/// One process of each program among `pids` (the same executable file, by
/// device and inode), in the order given: names are looked up in each
/// program's files once.
pub fn one_per_program(pids: &[u32]) -> Result<Vec<u32>> {
    let mut seen = Vec::new();
    let mut out = Vec::new();
    for &p in pids {
        let path = format!("/proc/{p}/exe");
        let id = std::fs::metadata(&path)
            .map(|m| (m.dev(), m.ino()))
            .with_context(|| format!("cannot read {path}"))?;
        if !seen.contains(&id) {
            seen.push(id);
            out.push(p);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgrep_patterns_are_extended_regular_expressions() {
        let re = Regex::new("^(kv|db)d$").unwrap();
        assert!(re.is_match("kvd"));
        assert!(re.is_match("dbd"));
        assert!(!re.is_match("xkvd"));
        let err = Regex::new("(").err().unwrap().to_string();
        assert!(err.starts_with("--pgrep \"(\": "), "{err}");
    }

    #[test]
    fn this_process_is_found_by_name_but_not_tachy_itself() {
        let me = comm(std::process::id()).unwrap();
        // The test process is "tachy-..." or similar: searching for its own
        // name excludes itself, by design of pids_where.
        assert!(!pids_where(|c| c == me).contains(&std::process::id()));
        assert!(pids_where(|_| true).contains(&1));
    }

    #[test]
    fn mount_paths_unescape() {
        assert_eq!(unescape_mount("/a\\040b"), "/a b");
        assert_eq!(unescape_mount("/x\\"), "/x\\");
    }

    #[test]
    fn a_file_is_not_a_cgroup() {
        let err = cgroup(Path::new("/proc/self/status"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a directory"), "{err}");
        let err = cgroup(Path::new("/tmp")).unwrap_err().to_string();
        assert!(err.contains("not a cgroup v2 directory"), "{err}");
    }
}
