//! Function patterns as users write them: `ns::Class::read`, `ns::Class::read(int)`,
//! `ns::Class::*`, `crate::module::func`, `malloc`, or a raw mangled name.

use super::demangle::{Lang, Names};

/// A parsed function pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    with_params: bool,
    glob: bool,
}

impl Pattern {
    pub fn parse(text: &str) -> anyhow::Result<Pattern> {
        let text = text.trim();
        if text.is_empty() {
            anyhow::bail!("empty function name");
        }
        if text.len() > 4096 {
            anyhow::bail!("function pattern is longer than 4096 bytes");
        }
        if text.chars().any(|c| c.is_control()) {
            anyhow::bail!("function pattern {text:?} contains control characters");
        }
        Ok(Pattern {
            text: text.to_string(),
            with_params: text.contains('('),
            glob: text.contains(['*', '?']),
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// A substring every raw (mangled) name of a match contains, so most
    /// symbols are rejected before they are demangled. Identifiers appear
    /// verbatim in Itanium, Rust and C names.
    pub fn prefilter(&self) -> Option<&str> {
        let name = self.text.split('(').next().unwrap_or("");
        name.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '*' || c == '?'))
            .filter(|w| !w.contains(['*', '?']))
            .filter(|w| {
                !matches!(
                    *w,
                    "const" | "volatile" | "operator" | "unsigned" | "signed"
                )
            })
            .max_by_key(|w| w.len())
            .filter(|w| w.len() >= 2)
    }

    /// Whether a symbol matches: its raw name exactly, or its demangled name
    /// (with parameters if the pattern has them), whole or from any `::`
    /// boundary on, so `Store::lookup` finds `shop::Store::lookup`.
    pub fn matches(&self, raw: &str, names: &Names) -> bool {
        if raw == self.text || names.stem == self.text {
            return true;
        }
        let pat = if self.with_params {
            normalize(&self.text)
        } else {
            self.text.clone()
        };
        let mut subjects = vec![if self.with_params {
            normalize(&names.full)
        } else {
            names.base.clone()
        }];
        // Rust v0 names carry generic arguments in the full name only
        // (`app::f::<u32>`), so a pattern can pick one instantiation.
        if !self.with_params && names.lang == Lang::Rust && names.full != names.base {
            subjects.push(names.full.clone());
        }
        subjects.iter().any(|subject| {
            // `[abi:cxx11]` tags (functions returning std::string) are noise
            // unless the pattern spells one out.
            let subject = if self.text.contains("[abi:") {
                subject.clone()
            } else {
                strip_abi_tags(subject)
            };
            let hit = tails(&subject).any(|tail| {
                if self.glob {
                    glob_match(&pat, tail)
                } else {
                    pat == tail
                }
            });
            hit
        })
    }
}

/// `s` and every suffix of it that starts after a top-level `::`.
fn tails(s: &str) -> impl Iterator<Item = &str> {
    let mut starts = vec![0];
    let (mut angle, mut paren) = (0i32, 0i32);
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'<' => angle += 1,
            b'>' => angle -= 1,
            b'(' => paren += 1,
            b')' => paren -= 1,
            b':' if angle == 0 && paren == 0 && b.get(i + 1) == Some(&b':') => {
                starts.push(i + 2);
                i += 1;
            }
            _ => {}
        }
        i += 1;
    }
    starts.into_iter().map(move |k| &s[k..])
}

/// Removes `[abi:…]` tags from a demangled name.
fn strip_abi_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("[abi:") {
        out.push_str(&rest[..i]);
        match rest[i..].find(']') {
            Some(j) => rest = &rest[i + j + 1..],
            None => {
                rest = &rest[i..];
                break;
            }
        }
    }
    out.push_str(rest);
    out
}

/// Drops spaces that do not separate two identifier characters, so
/// `f(int, char const*)` and `f(int,char const *)` compare equal.
fn normalize(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let prev = out.chars().last();
            let next = chars.get(i + 1).copied();
            if let (Some(p), Some(n)) = (prev, next) {
                if word(p) && word(n) {
                    out.push(' ');
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Shell-style matching of `*` (any run) and `?` (one character).
pub fn glob_match(pat: &str, s: &str) -> bool {
    let p: Vec<char> = pat.chars().collect();
    let t: Vec<char> = s.chars().collect();
    let (mut pi, mut ti) = (0, 0);
    let (mut star, mut mark) = (None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(sp) = star {
            pi = sp + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    while pi < p.len() && p[pi] == '*' {
        pi += 1;
    }
    pi == p.len()
}

#[cfg(test)]
mod tests {
    use super::super::demangle::demangle;
    use super::*;

    fn m(pat: &str, raw: &str) -> bool {
        Pattern::parse(pat).unwrap().matches(raw, &demangle(raw))
    }

    #[test]
    fn matches_every_overload_and_clone() {
        assert!(m("shop::Store::lookup", "_ZN4shop5Store6lookupEi"));
        assert!(m("shop::Store::lookup", "_ZN4shop5Store6lookupEi.isra.0"));
        assert!(m("Store::lookup", "_ZN4shop5Store6lookupEi"));
        assert!(m("lookup", "_ZN4shop5Store6lookupEi"));
        assert!(!m("tore::lookup", "_ZN4shop5Store6lookupEi"));
        assert!(!m("shop::Store::look", "_ZN4shop5Store6lookupEi"));
    }

    #[test]
    fn params_pick_one_overload() {
        assert!(m("shop::Store::lookup(int)", "_ZN4shop5Store6lookupEi"));
        assert!(!m("shop::Store::lookup(int)", "_ZN4shop5Store6lookupEl"));
        assert!(m("shop::Store::size() const", "_ZNK4shop5Store4sizeEv"));
        assert!(m("shop::Store::size()const", "_ZNK4shop5Store4sizeEv"));
        assert!(m("shop::Store::lookup(*)", "_ZN4shop5Store6lookupEl"));
    }

    #[test]
    fn globs_templates_and_raw_names() {
        assert!(m("shop::Store::*", "_ZN4shop5Store6lookupEi"));
        assert!(!m("shop::Cart::*", "_ZN4shop5Store6lookupEi"));
        assert!(m(
            "shop::Pool<shop::Conn>::acquire",
            "_ZN4shop4PoolINS_4ConnEE7acquireEv"
        ));
        assert!(m(
            "Pool<shop::Conn>::acquire",
            "_ZN4shop4PoolINS_4ConnEE7acquireEv"
        ));
        assert!(m("_ZN4shop5Store6lookupEi", "_ZN4shop5Store6lookupEi"));
        assert!(m("slow_*", "slow_sum"));
        // kv::Store::read[abi:cxx11](int)
        assert!(m("kv::Store::read", "_ZN2kv5Store4readB5cxx11Ei"));
        assert!(m("kv::Store::read(int)", "_ZN2kv5Store4readB5cxx11Ei"));
        assert!(m(
            "kv::Store::read[abi:cxx11]",
            "_ZN2kv5Store4readB5cxx11Ei"
        ));
        assert!(m(
            "rust_app::engine::process",
            "_ZN8rust_app6engine7process17h0123456789abcdefE"
        ));
    }

    #[test]
    fn prefilter_is_a_literal_identifier() {
        let p = Pattern::parse("shop::Store::lookup(int)").unwrap();
        assert_eq!(p.prefilter(), Some("lookup"));
        let p = Pattern::parse("shop::Store::*").unwrap();
        assert_eq!(p.prefilter(), Some("Store"));
        let p = Pattern::parse("*").unwrap();
        assert_eq!(p.prefilter(), None);
    }

    #[test]
    fn glob_edge_cases() {
        assert!(glob_match("*", ""));
        assert!(glob_match("a*b*c", "axxbyyc"));
        assert!(!glob_match("a*b*c", "axxbyy"));
        assert!(glob_match("a?c", "abc"));
    }

    #[test]
    fn rejects_bad_patterns() {
        assert!(Pattern::parse("  ").is_err());
        assert!(Pattern::parse("a\nb").is_err());
    }
}
