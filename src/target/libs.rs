//! Which libraries a name means (`c`, `libstdc++`) and which ones a
//! program needs before it runs (its DT_NEEDED, searched as ld.so does).

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::Result;

/// Whether `obj` is the library a user means by `lib` (`c`, `libc`,
/// `libstdc++`, `libfoo.so.1`).
pub fn lib_matches(lib: &str, obj: &Path) -> bool {
    let Some(base) = obj.file_name().and_then(|b| b.to_str()) else {
        return false;
    };
    let want = if lib.starts_with("lib") {
        lib.to_string()
    } else {
        format!("lib{lib}")
    };
    base == want
        || base == lib
        || base.starts_with(&format!("{want}.so"))
        || base.starts_with(&format!("{want}-"))
}

/// Library directories searched for `LIB:FUNC` when no process says where
/// the library is.
const LIB_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
    "/usr/local/lib",
];

/// Finds a library by name in the standard directories and `extra` ones.
pub fn find_library(lib: &str, extra: &[PathBuf]) -> Option<PathBuf> {
    let dirs = extra
        .iter()
        .cloned()
        .chain(LIB_DIRS.iter().map(PathBuf::from));
    for dir in dirs {
        let Ok(rd) = fs::read_dir(&dir) else { continue };
        let mut hits: Vec<PathBuf> = rd
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| lib_matches(lib, p) && p.is_file() && is_elf(p))
            .collect();
        hits.sort();
        if let Some(p) = hits.into_iter().next() {
            return Some(p);
        }
    }
    None
}

/// Whether `p` starts as an ELF file does (`libc.so` is often a linker
/// script beside `libc.so.6`).
fn is_elf(p: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    fs::File::open(p)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok()
        && magic == *b"\x7fELF"
}

/// The shared libraries an executable will load (DT_NEEDED, transitively),
/// found through its RUNPATH/RPATH (with `$ORIGIN`), LD_LIBRARY_PATH and the
/// standard directories. Used for a command tachy starts, before its
/// libraries are mapped.
pub fn needed_libraries(exe: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    let mut queue = vec![exe.to_path_buf()];
    while let Some(obj) = queue.pop() {
        let Ok((needed, dirs)) = dynamic_deps(&obj) else {
            continue;
        };
        for name in needed {
            let found = dirs
                .iter()
                .map(|d| d.join(&name))
                .chain(
                    std::env::var_os("LD_LIBRARY_PATH")
                        .map(|v| {
                            std::env::split_paths(&v)
                                .map(|d| d.join(&name))
                                .collect::<Vec<_>>()
                        })
                        .unwrap_or_default(),
                )
                .chain(LIB_DIRS.iter().map(|d| Path::new(d).join(&name)))
                .find(|p| p.is_file());
            if let Some(p) = found {
                let p = fs::canonicalize(&p).unwrap_or(p);
                if !out.contains(&p) && out.len() < 512 {
                    out.push(p.clone());
                    queue.push(p);
                }
            }
        }
    }
    out
}

fn dynamic_deps(obj: &Path) -> Result<(Vec<String>, Vec<PathBuf>)> {
    use object::read::elf::{Dyn, ElfFile64, FileHeader, SectionHeader};
    use object::{elf, Endianness};
    let data = fs::read(obj)?;
    let file = ElfFile64::<Endianness>::parse(&*data)?;
    let endian = file.endian();
    let header = file.elf_header();
    let sections = header.sections(endian, &*data)?;
    let mut needed = Vec::new();
    let mut dirs = Vec::new();
    let origin = obj.parent().unwrap_or(Path::new("/")).to_path_buf();
    for sec in sections.iter() {
        let Some((dyns, link)) = sec.dynamic(endian, &*data)? else {
            continue;
        };
        let strings = sections.strings(endian, &*data, link)?;
        for d in dyns {
            let tag = d.d_tag(endian) as u32;
            if tag != elf::DT_NEEDED && tag != elf::DT_RUNPATH && tag != elf::DT_RPATH {
                continue;
            }
            let Ok(s) = d.string(endian, strings) else {
                continue;
            };
            let s = String::from_utf8_lossy(s).into_owned();
            if tag == elf::DT_NEEDED {
                needed.push(s);
            } else {
                for d in s.split(':') {
                    let d = d
                        .replace("$ORIGIN", &origin.to_string_lossy())
                        .replace("${ORIGIN}", &origin.to_string_lossy());
                    dirs.push(PathBuf::from(d));
                }
            }
        }
    }
    Ok((needed, dirs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_names() {
        assert!(lib_matches(
            "c",
            Path::new("/lib/x86_64-linux-gnu/libc.so.6")
        ));
        assert!(lib_matches("libc", Path::new("/lib/libc-2.31.so")));
        assert!(!lib_matches("c", Path::new("/lib/libcrypt.so.1")));
        assert!(lib_matches(
            "libstdc++",
            Path::new("/usr/lib/libstdc++.so.6.0.30")
        ));
        assert!(lib_matches("libfixture.so", Path::new("/x/libfixture.so")));
    }
}
