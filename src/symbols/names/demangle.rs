//! Demangling of C++ (Itanium), Rust (legacy and v0) and C symbol names, and
//! the split of compiler suffixes (`.isra.0`, `.cold`, …) off a raw name.
//! Pure string work: no I/O.

use cpp_demangle::{DemangleOptions, Symbol};

/// Source language of a symbol, as told by its mangling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lang {
    C,
    Cpp,
    Rust,
    Go,
}

impl Lang {
    pub fn as_str(self) -> &'static str {
        match self {
            Lang::C => "c",
            Lang::Cpp => "c++",
            Lang::Rust => "rust",
            Lang::Go => "go",
        }
    }
}

/// What a compiler suffix says about a symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The function itself, or a clone of it (`.isra.N`, `.constprop.N`, …): an entry point.
    Whole,
    /// A `.cold`/`.warm` split part: code of its parent, never entered by a call.
    Fragment,
}

/// A symbol's names: the raw one split from its compiler suffix, and demangled forms.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Names {
    /// Raw name without the compiler suffix (`_ZN4shop6lookupEi` of `_ZN4shop6lookupEi.isra.0`).
    pub stem: String,
    /// The compiler suffix, with its leading dot, or empty.
    pub suffix: String,
    /// Demangled with parameters (`shop::lookup(int)`); the stem for C.
    pub full: String,
    /// Demangled without parameters or return type (`shop::lookup`).
    pub base: String,
    pub lang: Lang,
    pub part: Part,
}

/// Splits `name.isra.0.cold` into `name` and `.isra.0.cold`. Only suffixes that
/// compilers add are split, so a C name with a dot in it stays whole.
pub fn split_suffix(raw: &str) -> (&str, &str) {
    const KNOWN: &[&str] = &[
        "isra",
        "constprop",
        "part",
        "cold",
        "warm",
        "lto_priv",
        "llvm",
        "clone",
        "localalias",
        "specialized",
    ];
    let mut cut = raw.len();
    // Walk dot-separated components from the end while they are known suffix
    // words or numbers.
    loop {
        let head = &raw[..cut];
        let Some(dot) = memchr::memrchr(b'.', head.as_bytes()) else {
            break;
        };
        if dot == 0 {
            break;
        }
        let word = &head[dot + 1..];
        let known = KNOWN.contains(&word)
            || (!word.is_empty() && word.bytes().all(|b| b.is_ascii_digit()))
            || word.starts_with("llvm") // .llvm.123456
            || word.starts_with("cold"); // clang's .cold.1
        if !known {
            break;
        }
        cut = dot;
    }
    // A bare numeric suffix (`foo.1`, a static local) only counts after a known word.
    let suffix = &raw[cut..];
    if suffix
        .split('.')
        .skip(1)
        .all(|w| w.bytes().all(|b| b.is_ascii_digit()))
    {
        return (raw, "");
    }
    (&raw[..cut], suffix)
}

fn is_rust_legacy(stem: &str) -> bool {
    // _ZN…17h<16 hex digits>E
    let b = stem.as_bytes();
    let n = b.len();
    n > 24
        && stem.starts_with("_ZN")
        && b[n - 1] == b'E'
        && &b[n - 20..n - 17] == b"17h"
        && b[n - 17..n - 1].iter().all(|c| c.is_ascii_hexdigit())
}

/// Whether a raw name is a whole function or a split part, without
/// demangling it.
pub fn part_of(raw: &str) -> Part {
    let (_, suffix) = split_suffix(raw);
    if suffix.contains(".cold") || suffix.contains(".warm") {
        Part::Fragment
    } else {
        Part::Whole
    }
}

/// Demangles a raw symbol name.
pub fn demangle(raw: &str) -> Names {
    let (stem, suffix) = split_suffix(raw);
    let part = part_of(raw);
    let plain = |lang| Names {
        stem: stem.to_string(),
        suffix: suffix.to_string(),
        full: stem.to_string(),
        base: stem.to_string(),
        lang,
        part,
    };
    if stem.starts_with("_R") || is_rust_legacy(stem) {
        if let Ok(d) = rustc_demangle::try_demangle(stem) {
            // `{:#}` leaves out the hash of legacy names.
            let s = format!("{d:#}");
            return Names {
                full: s.clone(),
                base: strip_generics_tail(&s),
                ..plain(Lang::Rust)
            };
        }
    }
    if stem.starts_with("_Z") {
        if let Ok(sym) = Symbol::new(stem.as_bytes()) {
            let full = sym.demangle_with_options(&DemangleOptions::new().no_return_type());
            let base =
                sym.demangle_with_options(&DemangleOptions::new().no_params().no_return_type());
            if let (Ok(full), Ok(base)) = (full, base) {
                return Names {
                    full,
                    base,
                    ..plain(Lang::Cpp)
                };
            }
        }
    }
    plain(Lang::C)
}

/// The names of a Go function: Go does not mangle, so its symbol is its
/// name; `base` is the name as Go prints it (`main.Map[...]` for an
/// instance of a generic function).
pub fn go_names(raw: &str) -> Names {
    Names {
        stem: raw.to_string(),
        suffix: String::new(),
        full: raw.to_string(),
        base: super::go::printed(raw),
        lang: Lang::Go,
        part: Part::Whole,
    }
}

/// Rust v0 names carry generic arguments (`app::f::<u64>`); the base path drops
/// a trailing `::<…>` so `app::f` matches every instance.
fn strip_generics_tail(s: &str) -> String {
    if s.ends_with('>') {
        if let Some(i) = s.rfind("::<") {
            // Only if the `<` at i+2 closes at the very end.
            let mut depth = 0i32;
            let tail = &s[i + 2..];
            let mut closes_at_end = false;
            for (k, c) in tail.char_indices() {
                match c {
                    '<' => depth += 1,
                    '>' => {
                        depth -= 1;
                        if depth == 0 {
                            closes_at_end = k == tail.len() - 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            if closes_at_end {
                return s[..i].to_string();
            }
        }
    }
    s.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_compiler_suffixes() {
        assert_eq!(split_suffix("_Z1fi.isra.0"), ("_Z1fi", ".isra.0"));
        assert_eq!(
            split_suffix("foo.constprop.0.isra.0"),
            ("foo", ".constprop.0.isra.0")
        );
        assert_eq!(split_suffix("foo.part.0"), ("foo", ".part.0"));
        assert_eq!(split_suffix("foo.cold"), ("foo", ".cold"));
        assert_eq!(split_suffix("foo.cold.12"), ("foo", ".cold.12"));
        assert_eq!(split_suffix("foo.llvm.1234567"), ("foo", ".llvm.1234567"));
        assert_eq!(split_suffix("counter.1"), ("counter.1", ""));
        assert_eq!(split_suffix("a.b"), ("a.b", ""));
        assert_eq!(split_suffix(".cold"), (".cold", ""));
    }

    #[test]
    fn demangles_cpp_with_and_without_params() {
        let n = demangle("_ZN4shop5Store6lookupEi.isra.0");
        assert_eq!(n.lang, Lang::Cpp);
        assert_eq!(n.full, "shop::Store::lookup(int)");
        assert_eq!(n.base, "shop::Store::lookup");
        assert_eq!(n.suffix, ".isra.0");
        assert_eq!(n.part, Part::Whole);
        let n = demangle("_ZNK4shop5Store4sizeEv.cold");
        assert_eq!(n.full, "shop::Store::size() const");
        assert_eq!(n.part, Part::Fragment);
        let n = demangle("_ZN4shop4PoolINS_4ConnEE7acquireEv");
        assert_eq!(n.base, "shop::Pool<shop::Conn>::acquire");
    }

    #[test]
    fn demangles_rust_legacy_and_v0() {
        let n = demangle("_ZN8rust_app6engine7process17h0123456789abcdefE");
        assert_eq!(n.lang, Lang::Rust);
        assert_eq!(n.base, "rust_app::engine::process");
        let n = demangle("_RNvNtCs1234_8rust_app6engine7process");
        assert_eq!(n.lang, Lang::Rust);
        assert_eq!(n.base, "rust_app::engine::process");
    }

    #[test]
    fn c_names_stay_as_they_are() {
        let n = demangle("slow_sum");
        assert_eq!(n.lang, Lang::C);
        assert_eq!((n.full.as_str(), n.base.as_str()), ("slow_sum", "slow_sum"));
    }

    #[test]
    fn strips_only_a_trailing_generic_list() {
        assert_eq!(strip_generics_tail("a::f::<u64>"), "a::f");
        assert_eq!(strip_generics_tail("a::f::<Vec<u8>>"), "a::f");
        assert_eq!(
            strip_generics_tail("<a::S as b::T>::f"),
            "<a::S as b::T>::f"
        );
    }
}
