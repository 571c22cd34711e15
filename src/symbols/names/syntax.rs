//! The syntax of C++ and Rust names as demanglers print them: bracket
//! depth, top-level separators, operator names, parameter lists, template
//! and generic arguments, ABI tags, and the other forms of a Rust path.

/// The other names of a Rust path: `<T as Trait>::f` is also `T::f` and
/// `Trait::f`, `<T>::f` (v0's inherent impls) is `T::f`, and v0's
/// `{closure#0}` is legacy's `{{closure}}`.
pub(in crate::symbols) fn rust_forms(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    if name.starts_with('<') {
        if let Some(close) = find_close(name) {
            let inner = &name[1..close];
            let rest = &name[close + 1..];
            if rest.starts_with("::") {
                match split_top(inner, " as ") {
                    Some((ty, tr)) => {
                        out.push(format!("{ty}{rest}"));
                        out.push(format!("{tr}{rest}"));
                    }
                    None => out.push(format!("{inner}{rest}")),
                }
            }
        }
    }
    if name.contains("{closure#") {
        for f in std::iter::once(name.to_string()).chain(out.clone()) {
            out.push(legacy_closures(&f));
        }
    }
    out
}

/// `{closure#N}` as legacy mangling shows it: `{{closure}}`.
fn legacy_closures(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find("{closure#") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "{closure#".len()..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if after[digits..].starts_with('}') {
            out.push_str("{{closure}}");
            rest = &after[digits + 1..];
        } else {
            out.push_str("{closure#");
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Splits `s` at the first top-level occurrence of `sep`.
fn split_top<'a>(s: &'a str, sep: &str) -> Option<(&'a str, &'a str)> {
    let mut found = None;
    walk(s, |i, depth| {
        if depth == 0 && s[i..].starts_with(sep) {
            found = Some(i);
        }
        found.is_some()
    });
    found.map(|i| (&s[..i], &s[i + sep.len()..]))
}

/// Identifier characters (ASCII and not: Rust and C++ allow others).
pub(super) fn is_word(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The end of an operator name starting at `i` (`operator<<`,
/// `operator()`, `operator new`), if `operator` starts there.
pub(super) fn operator_end(s: &str, i: usize) -> Option<usize> {
    const OPS: &[&str] = &[
        "<<=", ">>=", "<=>", "->*", "()", "[]", "<<", ">>", "<=", ">=", "==", "!=", "&&", "||",
        "++", "--", "+=", "-=", "*=", "/=", "%=", "&=", "|=", "^=", "->", "<", ">", "+", "-", "*",
        "/", "%", "^", "&", "|", "~", "!", "=", ",",
    ];
    let rest = s[i..].strip_prefix("operator")?;
    if s[..i].chars().next_back().is_some_and(is_word) {
        return None;
    }
    let end = i + "operator".len();
    match OPS.iter().find(|op| rest.starts_with(**op)) {
        Some(op) => Some(end + op.len()),
        None if rest.starts_with(is_word) => None,
        None => Some(end),
    }
}

/// Calls `f(i, depth)` for each character outside operator names, with
/// the bracket depth (`<>`, `()`, `[]`, `{}`) before it, until `f` returns
/// true. A `->` (Rust's `fn() -> T`) closes nothing.
pub(super) fn walk(s: &str, mut f: impl FnMut(usize, i32) -> bool) {
    let b = s.as_bytes();
    let mut depth = 0i32;
    let mut i = 0;
    while i < b.len() {
        if b[i] & 0xC0 == 0x80 {
            i += 1;
            continue;
        }
        if b[i] == b'o' {
            if let Some(end) = operator_end(s, i) {
                i = end;
                continue;
            }
        }
        if f(i, depth) {
            return;
        }
        match b[i] {
            b'<' | b'(' | b'[' | b'{' => depth += 1,
            b'>' if i > 0 && b[i - 1] == b'-' => {}
            b'>' | b')' | b']' | b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
}

/// The first top-level character index for which `pred` holds.
pub(super) fn find_top(s: &str, pred: impl Fn(u8) -> bool) -> Option<usize> {
    let mut at = None;
    walk(s, |i, depth| {
        if depth == 0 && pred(s.as_bytes()[i]) {
            at = Some(i);
        }
        at.is_some()
    });
    at
}

/// The index of the bracket closing the one `s` starts with.
pub(super) fn find_close(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let mut close = None;
    walk(s, |i, depth| {
        if i > 0 && depth == 1 && matches!(b[i], b'>' | b')' | b']' | b'}') && b[i - 1] != b'-' {
            close = Some(i);
        }
        close.is_some() || (i > 0 && depth == 0)
    });
    close
}

/// Splits a canonical name into the name and its parameter list with what
/// follows (`(int) const`), at the first top-level `(` that does not start
/// a component (`(anonymous namespace)::f`).
pub(in crate::symbols) fn split_params(s: &str) -> (&str, Option<&str>) {
    let b = s.as_bytes();
    let mut at = None;
    walk(s, |i, depth| {
        if depth == 0 && b[i] == b'(' && i > 0 && !s[..i].ends_with("::") {
            at = Some(i);
        }
        at.is_some()
    });
    match at {
        Some(i) => (&s[..i], Some(&s[i..])),
        None => (s, None),
    }
}

/// `s` and every suffix of it that starts after a top-level `::`.
pub(in crate::symbols) fn tails(s: &str) -> impl Iterator<Item = &str> {
    let mut starts = vec![0];
    let b = s.as_bytes();
    walk(s, |i, depth| {
        if depth == 0 && b[i] == b':' && b.get(i + 1) == Some(&b':') && starts.last() != Some(&i) {
            starts.push(i + 2);
        }
        false
    });
    starts.into_iter().map(move |k| &s[k..])
}

/// The name without template or generic arguments: `std::vector<int>::size`
/// is `std::vector::size`, `app::f::<u32>` is `app::f`.
pub(in crate::symbols) fn strip_args(s: &str) -> String {
    let b = s.as_bytes();
    let mut groups: Vec<(usize, usize)> = Vec::new();
    let mut open = None;
    walk(s, |i, depth| {
        match b[i] {
            b'<' if depth == 0 => open = Some(i),
            b'>' if depth == 1 && b[i - 1] != b'-' => {
                if let Some(o) = open.take() {
                    groups.push((o, i + 1));
                }
            }
            _ => {}
        }
        false
    });
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (from, to) in groups {
        let head = &s[last..from];
        let head = head.strip_suffix("::").unwrap_or(head);
        out.push_str(head.strip_suffix(' ').unwrap_or(head));
        last = to;
    }
    out.push_str(&s[last..]);
    out
}

/// Removes `[abi:…]` tags from a demangled name.
pub(in crate::symbols) fn strip_abi_tags(s: &str) -> String {
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
