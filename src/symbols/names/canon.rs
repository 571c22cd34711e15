//! The canonical form patterns and demangled names are compared in (see
//! the comment of `pattern`): spaces only where they separate words, `const`
//! after the type, no inline namespaces or default template arguments,
//! standard typedefs and builtin integer types as the demangler prints them.

use super::syntax::{find_close, find_top, is_word, operator_end, strip_abi_tags, walk};

/// Drops spaces that do not separate two identifier characters, so
/// `f(int, char const*)` and `f(int,char const *)` compare equal. The space
/// after an operator before its template arguments stays
/// (`operator< <int>` is not `operator<<int>`).
fn normalize(s: &str) -> String {
    let chars: Vec<char> = s.chars().collect();
    let mut out = String::with_capacity(s.len());
    for (i, &c) in chars.iter().enumerate() {
        if c == ' ' {
            let prev = out.chars().last();
            let next = chars[i + 1..].iter().copied().find(|&c| c != ' ');
            let keep = match (prev, next) {
                (Some(p), Some(n)) => {
                    (is_word(p) && is_word(n)) || (n == '<' && "<>=!+-*/%^&|~,".contains(p))
                }
                _ => false,
            };
            if keep && prev != Some(' ') {
                out.push(' ');
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Template arguments a standard template has by default: left out of the
/// canonical form (`std::vector<int, std::allocator<int> >` is
/// `std::vector<int>`), but never a first argument.
const DEFAULT_ARGS: &[&str] = &[
    "std::allocator<",
    "std::char_traits<",
    "std::less<",
    "std::hash<",
    "std::equal_to<",
    "std::default_delete<",
    "std::regex_traits<",
];

/// Standard templates whose `<char>` instance has a typedef:
/// `std::basic_string<char>` is `std::string`, `<wchar_t>` `std::wstring`.
pub(super) const TYPEDEFS: &[&str] = &[
    "string",
    "string_view",
    "istream",
    "ostream",
    "iostream",
    "ifstream",
    "ofstream",
    "fstream",
    "istringstream",
    "ostringstream",
    "stringstream",
    "streambuf",
    "stringbuf",
    "filebuf",
    "ios",
    "regex",
];

/// Builtin types as the demangler prints them, for the names people write.
const INT_TYPES: &[(&str, &str)] = &[
    ("size_t", "unsigned long"),
    ("std::size_t", "unsigned long"),
    ("uintptr_t", "unsigned long"),
    ("ssize_t", "long"),
    ("ptrdiff_t", "long"),
    ("std::ptrdiff_t", "long"),
    ("intptr_t", "long"),
    ("int8_t", "signed char"),
    ("uint8_t", "unsigned char"),
    ("int16_t", "short"),
    ("uint16_t", "unsigned short"),
    ("int32_t", "int"),
    ("uint32_t", "unsigned int"),
    ("int64_t", "long"),
    ("uint64_t", "unsigned long"),
    ("std::int8_t", "signed char"),
    ("std::uint8_t", "unsigned char"),
    ("std::int16_t", "short"),
    ("std::uint16_t", "unsigned short"),
    ("std::int32_t", "int"),
    ("std::uint32_t", "unsigned int"),
    ("std::int64_t", "long"),
    ("std::uint64_t", "unsigned long"),
];

/// The canonical form of a pattern or a demangled name (see the module
/// comment); `top_typedefs` spells the name's own path with typedefs too
/// (`std::string::size`, not only its parameters). Text it cannot parse (an unclosed `<` in `std::vector<*`)
/// stays as it is.
pub fn canon(s: &str, keep_abi: bool, top_typedefs: bool) -> String {
    let plain = |c: char| is_word(c) || matches!(c, ':' | '.' | '$' | '~' | '*' | '?');
    if s.chars().all(plain) && !s.contains("operator") && !s.contains("::_") {
        return s.to_string();
    }
    let mut s = normalize(s);
    if !keep_abi && s.contains("[abi:") {
        s = strip_abi_tags(&s);
    }
    for inline in ["::__cxx11::", "::__1::", "::_V2::"] {
        while s.contains(inline) {
            s = s.replace(inline, "::");
        }
    }
    canon_seq(&s, 0, top_typedefs)
}

/// Canonical form of a sequence: each bracket group's items in canonical
/// form, then the standard typedefs (at the top level only if
/// `top_typedefs`). Groups nested deeper than any real name stay as they
/// are.
fn canon_seq(s: &str, nest: usize, top_typedefs: bool) -> String {
    if nest > 32 {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    let b = s.as_bytes();
    while i < b.len() {
        if b[i] == b'o' {
            if let Some(end) = operator_end(s, i) {
                out.push_str(&s[i..end]);
                i = end;
                continue;
            }
        }
        let c = b[i];
        if matches!(c, b'<' | b'(') && !(c == b'<' && i > 0 && b[i - 1] == b'-') {
            let Some(close) = find_close(&s[i..]).map(|k| k + i) else {
                out.push_str(&s[i..]);
                break;
            };
            let items = split_items(&s[i + 1..close]);
            let mut kept: Vec<String> = Vec::with_capacity(items.len());
            for (k, item) in items.iter().enumerate() {
                let item = canon_item(item, nest + 1);
                if c == b'<' && k > 0 && DEFAULT_ARGS.iter().any(|d| item.starts_with(d)) {
                    continue;
                }
                kept.push(item);
            }
            out.push(c as char);
            out.push_str(&kept.join(","));
            out.push(b[close] as char);
            i = close + 1;
            continue;
        }
        // Copy up to the next byte of interest.
        let next = s[i..]
            .char_indices()
            .skip(1)
            .find(|(_, c)| matches!(c, '<' | '(' | 'o'))
            .map_or(s.len(), |(k, _)| k + i);
        out.push_str(&s[i..next]);
        i = next;
    }
    if out.contains("std::basic_") && (nest > 0 || top_typedefs) {
        out = typedefs(&out);
    }
    out
}

/// The top-level comma-separated items of a bracket group's contents.
fn split_items(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut last = 0;
    walk(s, |i, depth| {
        if depth == 0 && s.as_bytes()[i] == b',' {
            out.push(&s[last..i]);
            last = i + 1;
        }
        false
    });
    out.push(&s[last..]);
    out
}

/// One parameter or template argument in canonical form: `const T&` is
/// `T const&`, `size_t` is `unsigned long`, `unsigned` is `unsigned int`.
fn canon_item(item: &str, nest: usize) -> String {
    let mut item = canon_seq(item, nest, true);
    if let Some(rest) = item.strip_prefix("const ") {
        let cut = find_top(rest, |b| matches!(b, b'*' | b'&' | b'(')).unwrap_or(rest.len());
        item = normalize(&format!("{} const{}", &rest[..cut], &rest[cut..]));
    }
    if item.contains("operator") {
        return item;
    }
    int_types(&item)
}

/// Replaces integer typedefs (`size_t`, `uint64_t`) and short spellings
/// (`unsigned`, `long int`) by the builtin types the demangler prints.
fn int_types(item: &str) -> String {
    if !item.contains(['_', 'u', 's', 'l', 'i']) {
        return item.to_string();
    }
    // Words (qualified ones whole: `std::size_t`) and single other characters.
    let mut toks: Vec<(bool, String)> = Vec::new();
    let b = item.as_bytes();
    let mut i = 0;
    while i < item.len() {
        let c = item[i..].chars().next().unwrap_or(' ');
        if is_word(c) {
            let mut j = i;
            loop {
                let run = item[j..]
                    .find(|c: char| !is_word(c))
                    .map_or(item.len(), |k| k + j);
                j = run;
                if item[j..].starts_with("::") && item[j + 2..].starts_with(is_word) {
                    j += 2;
                } else {
                    break;
                }
            }
            let word = &item[i..j];
            match INT_TYPES.iter().find(|(from, _)| *from == word) {
                Some((_, to)) => toks.extend(to.split(' ').map(|w| (true, w.to_string()))),
                None => toks.push((true, word.to_string())),
            }
            i = j;
        } else {
            if b[i] != b' ' {
                toks.push((false, c.to_string()));
            }
            i += c.len_utf8();
        }
    }
    let word = |k: usize, toks: &[(bool, String)]| -> Option<String> {
        toks.get(k).filter(|t| t.0).map(|t| t.1.clone())
    };
    let mut out: Vec<(bool, String)> = Vec::with_capacity(toks.len() + 1);
    for k in 0..toks.len() {
        let t = &toks[k];
        let next = word(k + 1, &toks);
        let builtin = matches!(
            next.as_deref(),
            Some("char" | "short" | "int" | "long" | "__int128")
        );
        if t.0
            && t.1 == "int"
            && matches!(out.last(), Some((true, p)) if p == "long" || p == "short")
        {
            continue;
        }
        if t.0 && t.1 == "signed" && builtin && next.as_deref() != Some("char") {
            continue;
        }
        out.push(t.clone());
        if t.0 && (t.1 == "unsigned" || t.1 == "signed") && !builtin {
            if t.1 == "signed" {
                out.pop();
            }
            out.push((true, "int".to_string()));
        }
    }
    let mut s = String::with_capacity(item.len() + 4);
    for (k, t) in out.iter().enumerate() {
        if k > 0 && t.0 && out[k - 1].0 {
            s.push(' ');
        }
        s.push_str(&t.1);
    }
    s
}

/// `std::basic_string<char>` as `std::string`, and the other typedefs.
fn typedefs(s: &str) -> String {
    let mut out = s.to_string();
    for name in TYPEDEFS {
        for (arg, prefix) in [("char", ""), ("wchar_t", "w")] {
            let from = format!("std::basic_{name}<{arg}>");
            if out.contains(&from) {
                out = replace_qualified(&out, &from, &format!("std::{prefix}{name}"));
            }
        }
    }
    out
}

/// Replaces `from` where it is not part of a longer qualified name.
fn replace_qualified(s: &str, from: &str, to: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find(from) {
        let head = &rest[..i];
        let qualified = head.ends_with(|c: char| is_word(c) || c == ':');
        out.push_str(head);
        out.push_str(if qualified { from } else { to });
        rest = &rest[i + from.len()..];
        // `std::basic_string<char>const&` was spaceless after its `>`.
        if !qualified && rest.starts_with(is_word) {
            out.push(' ');
        }
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::symbols::names::syntax::strip_args;

    #[test]
    fn canonical_forms() {
        let c = |s: &str| canon(s, false, true);
        assert_eq!(
            c("std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> > const&"),
            "std::string const&"
        );
        assert_eq!(c("f(const std::string &)"), "f(std::string const&)");
        assert_eq!(
            c("std::basic_istream<char, std::char_traits<char> >&"),
            "std::istream&"
        );
        assert_eq!(c("f(const char *, size_t)"), "f(char const*,unsigned long)");
        assert_eq!(c("std::operator<< <int>"), "std::operator<< <int>");
        assert_eq!(c("a::f::<fn(u32) -> u32>"), "a::f::<fn(u32)->u32>");
        assert_eq!(c("std::vector<*"), "std::vector<*");
        assert_eq!(
            strip_args("std::vector<int>::push_back"),
            "std::vector::push_back"
        );
        assert_eq!(strip_args("a::f::<u32>"), "a::f");
        assert_eq!(strip_args("std::operator<< <int>"), "std::operator<<");
    }
}
