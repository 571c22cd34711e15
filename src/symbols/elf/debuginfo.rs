//! Separate debug information of a stripped object: a debug file found by
//! build ID (`/usr/lib/debug/.build-id/xx/yyyy.debug`) or by
//! `.gnu_debuglink` (CRC-checked, next to the object, in its `.debug/`, or
//! under `/usr/lib/debug`), else MiniDebugInfo (`.gnu_debugdata`, an
//! xz-compressed ELF with a symbol table).

use std::fs::File;
use std::io::Read;
use std::path::{Path, PathBuf};

use object::read::elf::ElfFile64;
use object::read::ReadCache;
use object::{Endianness, Object, ObjectSection, ReadRef};

/// Where debug files live; under a process's root for a process in a
/// container, and on the host.
const DEBUG_ROOT: &str = "usr/lib/debug";

/// Bytes of separate debug information.
pub enum DebugData {
    /// A separate debug file, read on demand.
    File {
        path: PathBuf,
        data: ReadCache<File>,
    },
    /// The decompressed MiniDebugInfo ELF.
    Mini(Vec<u8>),
}

/// The roots to search under: the traced process's root (when the object
/// was opened through /proc/PID/…), then the host's.
fn roots(open_path: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut comps = open_path.components();
    if let (Some(_), Some(p), Some(pid)) = (comps.next(), comps.next(), comps.next()) {
        if p.as_os_str() == "proc"
            && pid
                .as_os_str()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        {
            out.push(Path::new("/proc").join(pid.as_os_str()).join("root"));
        }
    }
    out.push(PathBuf::from("/"));
    out
}

/// An ELF debug file at `path`, if `check` accepts it.
fn debug_file(path: &Path, check: impl Fn(&File) -> bool) -> Option<DebugData> {
    let f = crate::target::open_file(path).ok()?;
    if !f.metadata().ok()?.is_file() || !check(&f) {
        return None;
    }
    let data = ReadCache::new(f);
    let ident = data.read_bytes_at(0, 4).ok()?;
    (ident == b"\x7fELF").then(|| DebugData::File {
        path: path.to_path_buf(),
        data,
    })
}

/// The CRC-32 a `.gnu_debuglink` names, computed over the whole file.
fn crc32_of(f: &File) -> Option<u32> {
    let mut h = crc32fast::Hasher::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut r = f;
    loop {
        let n = r.read(&mut buf).ok()?;
        if n == 0 {
            return Some(h.finalize());
        }
        h.update(&buf[..n]);
    }
}

/// Where a debug file named by build ID stands under `root`; None for a
/// build ID too short to name one.
fn build_id_path(root: &Path, id: &[u8]) -> Option<PathBuf> {
    if id.len() < 2 {
        return None;
    }
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    Some(
        root.join(DEBUG_ROOT)
            .join(".build-id")
            .join(&hex[..2])
            .join(format!("{}.debug", &hex[2..])),
    )
}

/// An object's `.gnu_debuglink`: the debug file's name, its CRC, and the
/// object's directory relative to `/`, under which the file is looked for.
struct Debuglink {
    name: String,
    crc: u32,
    rel: PathBuf,
}

impl Debuglink {
    fn of<'d, R: ReadRef<'d>>(file: &ElfFile64<'d, Endianness, R>, display: &Path) -> Option<Self> {
        let (name, crc) = file.gnu_debuglink().ok()??;
        let name = String::from_utf8_lossy(name).into_owned();
        if name.contains('/') || name.is_empty() {
            return None;
        }
        let abs = if display.is_absolute() {
            display.to_path_buf()
        } else {
            std::fs::canonicalize(display).unwrap_or_else(|_| display.to_path_buf())
        };
        let dir = abs.parent().unwrap_or(Path::new("/"));
        let rel = dir.strip_prefix("/").unwrap_or(dir).to_path_buf();
        Some(Debuglink { name, crc, rel })
    }

    /// The directories the file is looked for in under `root`, in order:
    /// beside the object, in its `.debug/`, under the debug root.
    fn dirs(&self, root: &Path) -> [PathBuf; 3] {
        [
            root.join(&self.rel),
            root.join(&self.rel).join(".debug"),
            root.join(DEBUG_ROOT).join(&self.rel),
        ]
    }
}

/// Finds separate debug information for an object.
pub fn find<'d, R: ReadRef<'d>>(
    file: &ElfFile64<'d, Endianness, R>,
    display: &Path,
    open_path: &Path,
) -> Option<DebugData> {
    let roots = roots(open_path);
    if let Ok(Some(id)) = file.build_id() {
        for root in &roots {
            let Some(p) = build_id_path(root, id) else {
                break;
            };
            if let Some(d) = debug_file(&p, |_| true).filter(|d| same_build_id(d, id)) {
                return Some(d);
            }
        }
    }
    if let Some(link) = Debuglink::of(file, display) {
        for root in &roots {
            for dir in link.dirs(root) {
                let cand = dir.join(&link.name);
                if let Some(d) = debug_file(&cand, |f| crc32_of(f) == Some(link.crc)) {
                    return Some(d);
                }
            }
        }
    }
    let sec = file.section_by_name(".gnu_debugdata")?;
    let xz = sec.data().ok()?;
    let mut out = Limited(Vec::new());
    let mut input = std::io::BufReader::new(xz);
    lzma_rs::xz_decompress(&mut input, &mut out).ok()?;
    (out.0.len() > 64 && out.0.starts_with(b"\x7fELF")).then_some(DebugData::Mini(out.0))
}

/// Where a debug file for this object was looked for, when none was found:
/// the build-ID path and the `.gnu_debuglink` name with the directories it
/// was looked for in, as a hint for a message (`no debug file: …`). None
/// when the object names no debug file.
pub fn missing_hint<'d, R: ReadRef<'d>>(
    file: &ElfFile64<'d, Endianness, R>,
    display: &Path,
    open_path: &Path,
) -> Option<String> {
    let roots = roots(open_path);
    let root = roots.first()?;
    let mut looked: Vec<String> = Vec::new();
    if let Some(p) = file
        .build_id()
        .ok()
        .flatten()
        .and_then(|id| build_id_path(root, id))
    {
        looked.push(format!("{} (by build ID)", p.display()));
    }
    if let Some(link) = Debuglink::of(file, display) {
        let (name, crc, dirs) = (&link.name, link.crc, link.dirs(root));
        // A file of that name from another build is not this object's.
        let other = dirs.iter().map(|d| d.join(name)).find(|p| {
            crate::target::open_file(p)
                .ok()
                .filter(|f| f.metadata().is_ok_and(|m| m.is_file()))
                .is_some_and(|f| crc32_of(&f) != Some(crc))
        });
        looked.push(match other {
            Some(p) => format!(
                "{name} (named by .gnu_debuglink): {} is another build's (its CRC differs)",
                p.display()
            ),
            None => format!(
                "{name} (named by .gnu_debuglink) in {}, {} or {}",
                dirs[0].display(),
                dirs[1].display(),
                dirs[2].display()
            ),
        });
    }
    if looked.is_empty() {
        return None;
    }
    let also = if roots.len() > 1 {
        ", in the process's root and on the host"
    } else {
        ""
    };
    Some(format!(
        "no debug file: looked for {}{also}",
        looked.join(", and ")
    ))
}

/// A MiniDebugInfo ELF holds symbols only, a few MiB at most: more is
/// hostile input, refused rather than decompressed.
struct Limited(Vec<u8>);

const MINI_LIMIT: usize = 256 << 20;

impl std::io::Write for Limited {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MINI_LIMIT {
            return Err(std::io::Error::other(
                "MiniDebugInfo is larger than 256 MiB",
            ));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn same_build_id(debug: &DebugData, id: &[u8]) -> bool {
    let DebugData::File { data, .. } = debug else {
        return false;
    };
    ElfFile64::<Endianness, _>::parse(data)
        .ok()
        .and_then(|f| f.build_id().ok().flatten().map(|d| d == id))
        .unwrap_or(false)
}
