//! Separate debug information of a stripped object: a debug file found by
//! build ID (`/usr/lib/debug/.build-id/xx/yyyy.debug`) or by
//! `.gnu_debuglink` (CRC-checked, next to the object, in its `.debug/`, or
//! under `/usr/lib/debug`), else MiniDebugInfo (`.gnu_debugdata`, an
//! xz-compressed ELF with a symbol table).

use std::fs::File;
use std::path::{Path, PathBuf};

use object::{Object, ObjectSection};

/// Where debug files live; under a process's root for a process in a
/// container, and on the host.
const DEBUG_ROOT: &str = "usr/lib/debug";

/// Bytes of separate debug information.
pub enum DebugData {
    /// A separate debug file, mapped.
    File { path: PathBuf, map: memmap2::Mmap },
    /// The decompressed MiniDebugInfo ELF.
    Mini(Vec<u8>),
}

impl DebugData {
    pub fn bytes(&self) -> &[u8] {
        match self {
            DebugData::File { map, .. } => map,
            DebugData::Mini(v) => v,
        }
    }
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

fn map(path: &Path) -> Option<memmap2::Mmap> {
    let f = File::open(path).ok()?;
    if !f.metadata().ok()?.is_file() {
        return None;
    }
    // SAFETY: a private read-only mapping of a debug file; see ElfObject::open.
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

fn is_elf(data: &[u8]) -> bool {
    data.len() > 64 && &data[..4] == b"\x7fELF"
}

/// Finds separate debug information for an object whose own bytes are `data`.
pub fn find(data: &[u8], display: &Path, open_path: &Path) -> Option<DebugData> {
    let file = object::File::parse(data).ok()?;
    let roots = roots(open_path);
    if let Ok(Some(id)) = file.build_id() {
        if id.len() >= 2 {
            let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
            for root in &roots {
                let p = root
                    .join(DEBUG_ROOT)
                    .join(".build-id")
                    .join(&hex[..2])
                    .join(format!("{}.debug", &hex[2..]));
                if let Some(m) = map(&p).filter(|m| is_elf(m) && same_build_id(m, id)) {
                    return Some(DebugData::File { path: p, map: m });
                }
            }
        }
    }
    if let Ok(Some((name, crc))) = file.gnu_debuglink() {
        let name = String::from_utf8_lossy(name).into_owned();
        if !name.contains('/') && !name.is_empty() {
            let abs = if display.is_absolute() {
                display.to_path_buf()
            } else {
                std::fs::canonicalize(display).unwrap_or_else(|_| display.to_path_buf())
            };
            let dir = abs.parent().unwrap_or(Path::new("/"));
            let rel = dir.strip_prefix("/").unwrap_or(dir);
            for root in &roots {
                for cand in [
                    root.join(rel).join(&name),
                    root.join(rel).join(".debug").join(&name),
                    root.join(DEBUG_ROOT).join(rel).join(&name),
                ] {
                    if let Some(m) = map(&cand).filter(|m| is_elf(m) && crc32fast::hash(m) == crc) {
                        return Some(DebugData::File { path: cand, map: m });
                    }
                }
            }
        }
    }
    let sec = file.section_by_name(".gnu_debugdata")?;
    let xz = sec.data().ok()?;
    let mut out = Limited(Vec::new());
    let mut input = std::io::BufReader::new(xz);
    lzma_rs::xz_decompress(&mut input, &mut out).ok()?;
    is_elf(&out.0).then_some(DebugData::Mini(out.0))
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

fn same_build_id(debug: &[u8], id: &[u8]) -> bool {
    object::File::parse(debug)
        .ok()
        .and_then(|f| f.build_id().ok().flatten().map(|d| d == id))
        .unwrap_or(false)
}
