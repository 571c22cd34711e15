//! What to trace: a running process (`-p PID`), a binary or library on disk
//! (every process that maps it), or a command tachy starts. Reads /proc;
//! opens objects through `/proc/PID/map_files` or `/proc/PID/root` so
//! processes in other mount namespaces, and deleted binaries, work.

use std::ffi::CString;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

mod libs;
mod spawn;

pub use libs::{find_library, lib_matches, needed_libraries};
pub use spawn::{check_runnable, program_image, which, Spawned};

/// Splits `/proc/PID/root/REST` into PID and REST (relative).
pub fn in_process_root(path: &Path) -> Option<(u32, &Path)> {
    let rest = path.strip_prefix("/proc").ok()?;
    let mut comps = rest.components();
    let pid = comps.next()?.as_os_str().to_str()?.parse::<u32>().ok()?;
    let rest = comps.as_path().strip_prefix("root").ok()?;
    Some((pid, rest))
}

/// Opens a file for reading. A path under `/proc/PID/root` is resolved
/// inside that root, as the process would resolve it (openat2 with
/// RESOLVE_IN_ROOT, or the same walk done here where openat2 is missing or
/// refused): an absolute symlink or `..` in a container cannot lead to a
/// file of the host.
pub fn open_file(path: &Path) -> std::io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    use std::os::unix::fs::OpenOptionsExt;

    let Some((pid, rest)) = in_process_root(path) else {
        return fs::File::open(path);
    };
    let root = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
        .open(format!("/proc/{pid}/root"))?;
    let rel = CString::new(rest.as_os_str().as_bytes())
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
    // SAFETY: open_how is plain data; all-zero is its "no options" value.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (libc::O_RDONLY | libc::O_CLOEXEC) as u64;
    how.resolve = libc::RESOLVE_IN_ROOT | libc::RESOLVE_NO_MAGICLINKS;
    // EAGAIN: a rename raced with the lookup; the kernel asks for a retry.
    for _ in 0..3 {
        // SAFETY: a valid directory fd, a NUL-terminated path and an
        // open_how of the size passed; the returned fd, if any, is ours.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_openat2,
                root.as_raw_fd(),
                rel.as_ptr(),
                &how as *const libc::open_how,
                std::mem::size_of::<libc::open_how>(),
            )
        };
        if fd >= 0 {
            // SAFETY: the kernel just returned this fd to us.
            return Ok(unsafe { fs::File::from_raw_fd(fd as i32) });
        }
        let err = std::io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::EAGAIN) => continue,
            // No openat2 (before Linux 5.6), or a seccomp filter refusing it.
            Some(libc::ENOSYS | libc::EPERM) => break,
            _ => return Err(err),
        }
    }
    open_in_root(&root, rest)
}

/// openat(dir, name, flags) without following a symlink at `name`.
fn open_at(dir: &fs::File, name: &std::ffi::CStr, flags: i32) -> std::io::Result<fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd};
    // SAFETY: a valid directory fd and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd to us.
    Ok(unsafe { fs::File::from_raw_fd(fd) })
}

/// Most symlinks one lookup follows, as the kernel's limit.
const MAX_SYMLINKS: usize = 40;

/// Resolves `rest` inside the directory `root` one component at a time,
/// as RESOLVE_IN_ROOT does: `..` stops at `root`, an absolute symlink
/// starts again from `root`, and no component is followed through a magic
/// link. Opens the file it names for reading.
fn open_in_root(root: &fs::File, rest: &Path) -> std::io::Result<fs::File> {
    use std::ffi::OsString;
    use std::os::fd::AsRawFd;
    use std::path::Component;

    let err = |k: i32| std::io::Error::from_raw_os_error(k);
    let push_all = |todo: &mut Vec<OsString>, p: &Path| {
        // Reversed: the next component to walk is last.
        for c in p.components().rev() {
            match c {
                Component::Normal(n) => todo.push(n.to_os_string()),
                Component::ParentDir => todo.push("..".into()),
                Component::RootDir => todo.push("/".into()),
                Component::CurDir | Component::Prefix(_) => {}
            }
        }
    };
    let mut todo = Vec::new();
    push_all(&mut todo, rest);
    // Directories opened below `root`, innermost last.
    let mut dirs: Vec<fs::File> = Vec::new();
    let mut links = 0;
    while let Some(name) = todo.pop() {
        if name == "/" {
            dirs.clear();
            continue;
        }
        if name == ".." {
            dirs.pop();
            continue;
        }
        let at = dirs.last().unwrap_or(root);
        let cname = CString::new(name.as_bytes()).map_err(|_| err(libc::EINVAL))?;
        let node = open_at(at, &cname, libc::O_PATH)?;
        let kind = node.metadata()?.file_type();
        if kind.is_symlink() {
            links += 1;
            if links > MAX_SYMLINKS {
                return Err(err(libc::ELOOP));
            }
            let mut buf = vec![0u8; libc::PATH_MAX as usize];
            // SAFETY: readlinkat on an O_PATH fd of the link itself (empty
            // name) into a buffer of the length passed.
            let n = unsafe {
                libc::readlinkat(
                    node.as_raw_fd(),
                    c"".as_ptr(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                )
            };
            if n < 0 {
                return Err(std::io::Error::last_os_error());
            }
            buf.truncate(n as usize);
            push_all(&mut todo, Path::new(std::ffi::OsStr::from_bytes(&buf)));
            continue;
        }
        if todo.is_empty() {
            if kind.is_dir() {
                return Err(err(libc::EISDIR));
            }
            // Reopened for reading by name, still not following a symlink
            // that may have replaced it since.
            return open_at(at, &cname, libc::O_RDONLY);
        }
        if !kind.is_dir() {
            return Err(err(libc::ENOTDIR));
        }
        dirs.push(node);
    }
    Err(err(libc::EISDIR))
}

/// An object file: the path users know, and the path tachy opens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectRef {
    pub display: PathBuf,
    pub open_path: PathBuf,
}

/// The executable mappings of a process: its executable first.
#[derive(Clone, Debug)]
pub struct ProcessMaps {
    pub pid: u32,
    pub exe: ObjectRef,
    /// Several processes of different programs: the executables of the
    /// others, searched with `exe`.
    pub other_exes: Vec<ObjectRef>,
    pub libs: Vec<ObjectRef>,
}

impl ProcessMaps {
    pub fn all(&self) -> impl Iterator<Item = &ObjectRef> {
        std::iter::once(&self.exe)
            .chain(&self.other_exes)
            .chain(&self.libs)
    }

    /// The mappings of several processes as one: the first's, with the
    /// other programs' executables and every library, each file once (by
    /// device and inode, so a library seen through two processes' roots
    /// is probed once).
    pub fn joined(all: Vec<ProcessMaps>) -> Option<ProcessMaps> {
        let mut it = all.into_iter();
        let mut out = it.next()?;
        let id = |o: &ObjectRef| {
            use std::os::unix::fs::MetadataExt;
            fs::metadata(&o.open_path).map(|m| (m.dev(), m.ino())).ok()
        };
        let mut seen: Vec<(u64, u64)> = out.all().filter_map(id).collect();
        let mut fresh = |o: &ObjectRef| match id(o) {
            Some(k) if seen.contains(&k) => false,
            Some(k) => {
                seen.push(k);
                true
            }
            None => true,
        };
        for m in it {
            if fresh(&m.exe) {
                out.other_exes.push(m.exe);
            }
            for lib in m.libs {
                if fresh(&lib) {
                    out.libs.push(lib);
                }
            }
        }
        Some(out)
    }
}

pub fn process_alive(pid: u32) -> bool {
    // A zombie has exited; its /proc entry lingers until it is reaped.
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => !s
            .rsplit_once(')')
            .map(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The process (thread group) that thread `tid` belongs to, from
/// /proc/TID/status; for a process's main thread, its own id.
pub fn thread_group(tid: u32) -> Option<u32> {
    status_field(tid, "Tgid:")
}

/// A number field of /proc/PID/status (`Tgid:`, `PPid:`).
fn status_field(pid: u32, field: &str) -> Option<u32> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(field))?
        .trim()
        .parse()
        .ok()
}

/// Reads /proc/PID/maps.
pub fn process_maps(pid: u32) -> Result<ProcessMaps> {
    if pid == 0 || !Path::new(&format!("/proc/{pid}")).exists() {
        bail!("no such process: {pid}");
    }
    if !process_alive(pid) {
        // Its maps are empty, as a kernel thread's are.
        match status_field(pid, "PPid:") {
            Some(parent) => {
                bail!("process {pid} has exited: a zombie that its parent {parent} has not reaped")
            }
            None => bail!("no such process: {pid}"),
        }
    }
    let maps = match fs::read_to_string(format!("/proc/{pid}/maps")) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => bail!(
            "cannot read the memory map of process {pid}: permission denied (another user's process needs root or CAP_SYS_PTRACE)"
        ),
        Err(e) => return Err(e).with_context(|| format!("cannot read the memory map of process {pid}")),
    };
    let exe_ino = fs::metadata(format!("/proc/{pid}/exe")).ok().map(|m| {
        use std::os::unix::fs::MetadataExt;
        (m.dev(), m.ino())
    });
    let mut objects: Vec<(ObjectRef, u64)> = Vec::new();
    for line in maps.lines() {
        let Some(m) = parse_maps_line(line) else {
            continue;
        };
        if !m.perms.contains('x') || !m.path.starts_with('/') {
            continue;
        }
        if objects
            .iter()
            .any(|(o, _)| o.display == Path::new(m.path.trim_end_matches(" (deleted)")))
        {
            continue;
        }
        let deleted = m.path.ends_with(" (deleted)");
        let display = PathBuf::from(m.path.trim_end_matches(" (deleted)"));
        let map_files = PathBuf::from(format!("/proc/{pid}/map_files/{}", m.range));
        // map_files links straight to the mapped file, wherever it lives;
        // reading it needs CAP_SYS_ADMIN, else go through the process's root.
        let open_path = if fs::metadata(&map_files).is_ok() {
            map_files
        } else if deleted {
            bail!(
                "{} was deleted after process {pid} mapped it, and /proc/{pid}/map_files is not readable",
                display.display()
            );
        } else {
            Path::new(&format!("/proc/{pid}/root"))
                .join(display.strip_prefix("/").unwrap_or(&display))
        };
        objects.push((ObjectRef { display, open_path }, m.inode));
    }
    let exe_pos = exe_ino
        .and_then(|(_, ino)| objects.iter().position(|(_, i)| *i == ino))
        .unwrap_or(0);
    if objects.is_empty() {
        bail!("process {pid} maps no executable files (a kernel thread?)");
    }
    let (exe, _) = objects.remove(exe_pos);
    Ok(ProcessMaps {
        pid,
        exe,
        other_exes: Vec::new(),
        libs: objects.into_iter().map(|(o, _)| o).collect(),
    })
}

/// An executable mapping of a file in a process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: u64,
    pub end: u64,
    /// The file offset mapped at `start`.
    pub offset: u64,
    pub object: ObjectRef,
}

/// The executable file mappings of process `pid`, from /proc/PID/maps; an
/// address of the process in one of them is in its object at
/// `addr - start + offset`.
pub fn exec_mappings(pid: u32) -> Result<Vec<Mapping>> {
    let maps = fs::read_to_string(format!("/proc/{pid}/maps"))
        .with_context(|| format!("cannot read the memory map of process {pid}"))?;
    Ok(maps
        .lines()
        .filter_map(parse_maps_line)
        .filter(|m| m.perms.contains('x') && m.path.starts_with('/'))
        .filter_map(|m| {
            let (start, end) = m.range.split_once('-')?;
            let display = PathBuf::from(m.path.trim_end_matches(" (deleted)"));
            Some(Mapping {
                start: u64::from_str_radix(start, 16).ok()?,
                end: u64::from_str_radix(end, 16).ok()?,
                offset: u64::from_str_radix(m.offset, 16).ok()?,
                object: ObjectRef {
                    open_path: PathBuf::from(format!("/proc/{pid}/map_files/{}", m.range)),
                    display,
                },
            })
        })
        .collect())
}

/// The memory of a running process, read through /proc/PID/mem, and
/// where it mapped each object.
pub struct ProcessMemory {
    mem: fs::File,
    maps: Vec<Mapping>,
}

impl ProcessMemory {
    /// `None` when the process's maps or memory cannot be read.
    pub fn open(pid: u32) -> Option<ProcessMemory> {
        Some(ProcessMemory {
            maps: exec_mappings(pid).ok()?,
            mem: fs::File::open(format!("/proc/{pid}/mem")).ok()?,
        })
    }

    /// The load bias of the object known as `display` (where the process
    /// put its address 0), from its executable mapping and the object's
    /// own file-offset-to-address map.
    pub fn bias(
        &self,
        display: &Path,
        offset_to_vaddr: impl Fn(u64) -> Option<u64>,
    ) -> Option<u64> {
        let m = self.maps.iter().find(|m| m.object.display == display)?;
        Some(m.start.wrapping_sub(offset_to_vaddr(m.offset)?))
    }

    /// The 8 bytes at `addr` of the process, little-endian.
    pub fn read_u64(&self, addr: u64) -> Option<u64> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 8];
        self.mem.read_exact_at(&mut buf, addr).ok()?;
        Some(u64::from_le_bytes(buf))
    }
}

struct MapsLine<'a> {
    range: &'a str,
    perms: &'a str,
    offset: &'a str,
    inode: u64,
    path: &'a str,
}

fn parse_maps_line(line: &str) -> Option<MapsLine<'_>> {
    let mut rest = line;
    let mut field = || {
        let t = rest.trim_start();
        let end = t.find(' ').unwrap_or(t.len());
        let (f, r) = t.split_at(end);
        rest = r;
        f
    };
    let range = field();
    let perms = field();
    let offset = field();
    let _dev = field();
    let inode = field().parse().ok()?;
    let path = rest.trim_start();
    Some(MapsLine {
        range,
        perms,
        offset,
        inode,
        path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_in_a_process_root() {
        assert_eq!(
            in_process_root(Path::new("/proc/42/root/usr/lib/x.so")),
            Some((42, Path::new("usr/lib/x.so")))
        );
        assert_eq!(in_process_root(Path::new("/proc/42/map_files/1-2")), None);
        assert_eq!(in_process_root(Path::new("/proc/self/root/x")), None);
        assert_eq!(in_process_root(Path::new("/usr/lib/x.so")), None);
    }

    /// The walk used where openat2 is missing resolves as RESOLVE_IN_ROOT:
    /// symlinks and `..` stay inside the root.
    #[test]
    fn resolving_inside_a_root() {
        let dir = std::env::temp_dir().join(format!("tachy-in-root-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(dir.join("a/b")).unwrap();
        fs::write(dir.join("a/f"), b"inside").unwrap();
        // Absolute: /a/f of the root, not of the host.
        std::os::unix::fs::symlink("/a/f", dir.join("abs")).unwrap();
        // Relative through ..: a/b/../f.
        std::os::unix::fs::symlink("../f", dir.join("a/b/rel")).unwrap();
        // .. above the root stops at the root.
        std::os::unix::fs::symlink("../../../../a/f", dir.join("a/b/up")).unwrap();
        std::os::unix::fs::symlink("loop", dir.join("loop")).unwrap();
        std::os::unix::fs::symlink("/etc/hostname", dir.join("host")).unwrap();
        let root = fs::File::open(&dir).unwrap();
        let read = |p: &str| {
            let mut s = String::new();
            use std::io::Read;
            open_in_root(&root, Path::new(p))
                .and_then(|mut f| f.read_to_string(&mut s))
                .map(|_| s)
        };
        for p in ["a/f", "abs", "a/b/rel", "a/b/up", "a/b/../f", "../a/f"] {
            assert_eq!(read(p).unwrap(), "inside", "{p}");
        }
        assert_eq!(read("loop").unwrap_err().raw_os_error(), Some(libc::ELOOP));
        assert!(
            read("host").is_err(),
            "a host file through an absolute link"
        );
        assert_eq!(read("a").unwrap_err().raw_os_error(), Some(libc::EISDIR));
        assert_eq!(
            read("a/f/x").unwrap_err().raw_os_error(),
            Some(libc::ENOTDIR)
        );
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parses_maps_lines() {
        let m = parse_maps_line(
            "7f00-7f10 r-xp 00001000 08:01 1234   /usr/lib/x86_64-linux-gnu/libc.so.6",
        )
        .unwrap();
        assert_eq!(
            (m.range, m.perms, m.inode, m.path),
            (
                "7f00-7f10",
                "r-xp",
                1234,
                "/usr/lib/x86_64-linux-gnu/libc.so.6"
            )
        );
        let m = parse_maps_line("7f00-7f10 r-xp 00000000 08:01 99 /tmp/a b (deleted)").unwrap();
        assert_eq!(m.path, "/tmp/a b (deleted)");
        let m = parse_maps_line("7ffd-7ffe r-xp 00000000 00:00 0                  [vdso]").unwrap();
        assert_eq!(m.path, "[vdso]");
    }

    #[test]
    fn reads_own_maps() {
        let m = process_maps(std::process::id()).unwrap();
        assert_eq!(m.exe.display, std::env::current_exe().unwrap());
        assert!(m.libs.iter().any(|l| lib_matches("c", &l.display)));
        assert!(process_maps(0).is_err());
    }
}
