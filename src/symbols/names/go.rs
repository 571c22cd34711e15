//! Go names as Go prints them: Go does not mangle, so a symbol is its
//! name, and the instances of a generic function print as `main.Map[...]`.
//! Where a pattern may match a Go name from (a package path boundary, a
//! selector), and whether it does.

use super::glob::glob_match;

/// A Go name as Go prints it in a traceback: the type arguments of a
/// generic instance become `...` (`main.Map[go.shape.int_0]` is
/// `main.Map[...]`). Other names are unchanged.
pub fn printed(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    let mut depth = 0u32;
    for c in raw.chars() {
        match c {
            '[' => {
                if depth == 0 {
                    out.push_str("[...]");
                }
                depth += 1;
            }
            ']' if depth > 0 => depth -= 1,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
    }
    out
}

/// A Go name without the type arguments of generic instances
/// (`main.Map[go.shape.int_0]` is `main.Map`).
pub fn without_type_args(raw: &str) -> String {
    printed(raw).replace("[...]", "")
}

/// Where a Go name may be matched from: the whole name and the part after
/// each `/` of the package path (`http.(*conn).serve` of
/// `net/http.(*conn).serve`); with `selectors`, also the part after the
/// package and after each later `.` outside brackets and parentheses
/// (`(*Server).handle` and `handle` of `main.(*Server).handle`).
pub fn tails(name: &str, selectors: bool) -> impl Iterator<Item = &str> {
    let mut starts = vec![0];
    let mut depth = 0i32;
    let pkg_end = name.rfind('/').map_or(0, |i| i + 1);
    for (i, c) in name.char_indices() {
        match c {
            '[' | '(' => depth += 1,
            ']' | ')' => depth -= 1,
            '/' if depth == 0 && i + 1 < name.len() => starts.push(i + 1),
            '.' if selectors && depth == 0 && i >= pkg_end && i + 1 < name.len() => {
                starts.push(i + 1)
            }
            _ => {}
        }
    }
    starts.into_iter().map(move |s| &name[s..])
}

/// Whether `pat` (spaces removed) names the Go function `raw`: its name,
/// the name as Go prints it, or without type arguments, whole or from a
/// package path boundary on; a pattern without glob characters also from
/// a selector on (`handle`, `(*Server).handle`). `*` and `?` glob, except
/// in `(*`, the pointer receiver of a method.
pub fn matches(pat: &str, raw: &str) -> bool {
    let pat: String = pat.chars().filter(|c| !c.is_whitespace()).collect();
    let literal = |s: &str| s.replace("(*", "(\u{1}");
    let glob = pat.replace("(*", "").contains(['*', '?']);
    let p = literal(&pat);
    let forms = [raw.to_string(), printed(raw), without_type_args(raw)];
    forms.iter().any(|form| {
        tails(form, !glob).any(|tail| {
            let t = literal(tail);
            if glob {
                glob_match(&p, &t)
            } else {
                p == t
            }
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_generic_instances_as_go_does() {
        assert_eq!(printed("main.Map[go.shape.int_0]"), "main.Map[...]");
        assert_eq!(
            printed("main.(*List[go.shape.string_0]).Push"),
            "main.(*List[...]).Push"
        );
        assert_eq!(printed("main.(*Server).handle"), "main.(*Server).handle");
        assert_eq!(without_type_args("main.Map[go.shape.int_0]"), "main.Map");
    }

    #[test]
    fn matches_go_names() {
        let raw = "main.(*Server).handle";
        assert!(matches("main.(*Server).handle", raw));
        assert!(matches("(*Server).handle", raw));
        assert!(matches("handle", raw));
        assert!(matches("main.(*Server).*", raw));
        assert!(matches("main.*", raw));
        assert!(!matches("main.(*Server).handl", raw));
        assert!(!matches("main.(Server).handle", raw));
        let g = "main.Map[go.shape.int_0]";
        for p in ["main.Map", "main.Map[...]", g, "Map", "main.Map*"] {
            assert!(matches(p, g), "{p}");
        }
        assert!(!matches("main.Map[go.shape.string_0]", g));
        assert!(matches("http.(*conn).serve", "net/http.(*conn).serve"));
        assert!(matches("net/http.*", "net/http.(*conn).serve"));
        assert!(matches("main.main.func1", "main.main.func1"));
        assert!(matches("main.*.func*", "main.main.func1"));
        assert!(!matches("main.main", "main.main.func1"));
        // A glob names whole names: `main.*` is package main.
        assert!(!matches("main.*", "runtime.main.func1"));
        assert!(matches("func1", "runtime.main.func1"));
    }
}
