//! Near names: when a pattern matches nothing, the functions of an object
//! whose names are closest to it, compared as whole qualified paths in the
//! canonical form patterns are matched in (no `[abi:…]` tags, no parameter
//! lists unless the pattern has one, `std::string` for the long spelling).
//! Every name suggested matches as a pattern.

use std::collections::BTreeMap;

use super::elf::ElfObject;
use super::names::canon::canon;
use super::names::syntax::{rust_forms, split_params, strip_abi_tags, strip_args, tails};
use super::names::{demangle, Lang, Part, Pattern};

/// Up to `max` names in `obj` close to the pattern, best first.
pub fn suggest(obj: &ElfObject, pat: &Pattern, max: usize) -> Vec<String> {
    let Ok((syms, _)) = obj.function_symbols() else {
        return Vec::new();
    };
    let Some(want) = Wanted::of(pat) else {
        return Vec::new();
    };
    let mut scored: BTreeMap<(usize, String), ()> = BTreeMap::new();
    for s in syms.iter() {
        let names = demangle(s.name);
        if names.part != Part::Whole {
            continue;
        }
        // A cheap look at the last component first: most names are far.
        let last = last_component(&names.base);
        if !want.near_last(last) {
            continue;
        }
        let Some((score, shown)) = want.score(&names.full, names.lang) else {
            continue;
        };
        scored.insert((score, shown), ());
        if scored.len() > 4 * max {
            let worst = scored.keys().next_back().cloned();
            if let Some(w) = worst {
                scored.remove(&w);
            }
        }
    }
    let mut out: Vec<String> = Vec::new();
    for (_, name) in scored.into_keys() {
        if !out.contains(&name) && out.len() < max {
            out.push(name);
        }
    }
    out
}

/// The pattern as near names are measured against it.
struct Wanted {
    /// Canonical name without glob characters, lowercase.
    name: String,
    /// Its last component.
    last: String,
    /// How many components it has.
    comps: usize,
    /// Its canonical parameter list, if it has one.
    params: Option<String>,
    with_args: bool,
}

impl Wanted {
    fn of(pat: &Pattern) -> Option<Wanted> {
        let (name, params) = split_params(pat.canonical());
        let name = name.replace(['*', '?'], "").to_lowercase();
        let last = last_component(&name).to_string();
        if last.is_empty() {
            return None;
        }
        Some(Wanted {
            comps: tails(&name).count(),
            name,
            last,
            params: params.map(str::to_string),
            with_args: pat.with_args(),
        })
    }

    /// Whether a name's last component is close enough to be scored.
    fn near_last(&self, last: &str) -> bool {
        let last = strip_abi_tags(last).to_lowercase();
        let last = strip_args(&last);
        last == self.last
            || contains_most(&last, &self.last)
            || levenshtein(&last, &self.last) <= limit(&self.last)
    }

    /// Whether `name` (lowercase) is in the pattern's scope: the pattern's
    /// outermost component is one of its components. A qualified pattern's
    /// function of the same name elsewhere is near only there
    /// (`kv::Cache::read` for `kv::Store::read`, not `std::istream::get`
    /// for `leveldb::DBImpl::Get`).
    fn same_scope(&self, name: &str) -> bool {
        let outer = tails(&self.name).next().unwrap_or(&self.name);
        let outer = outer.split("::").next().unwrap_or(outer);
        name.split("::").any(|c| c == outer)
    }

    /// The score of a demangled name (lower is nearer) and the name to show,
    /// or None if it is not near.
    fn score(&self, full: &str, lang: Lang) -> Option<(usize, String)> {
        let canonical = canon(full, false, true);
        let (name, params) = split_params(&canonical);
        let mut forms = vec![name.to_string()];
        if lang == Lang::Rust {
            forms.extend(rust_forms(name));
        }
        if !self.with_args {
            let bare: Vec<String> = forms.iter().map(|f| strip_args(f)).collect();
            forms.extend(bare);
        }
        let mut best: Option<(usize, String)> = None;
        for form in &forms {
            let lower = form.to_lowercase();
            // The last as many components as the pattern has.
            let tail = tails(&lower).nth(tails(&lower).count().saturating_sub(self.comps));
            let tail = tail.unwrap_or(&lower);
            let d_tail = levenshtein(tail, &self.name);
            let last = strip_args(last_component(&lower));
            let d_last = levenshtein(&last, &self.last);
            let score = if d_tail <= limit(&self.name) {
                2 * d_tail
            } else if d_last == 0 && (self.comps == 1 || self.same_scope(&lower)) {
                // The same function in another scope.
                3 + d_tail.min(20)
            } else if self.comps > 1 {
                // A qualified pattern: near by its whole path, or the same
                // name elsewhere in its scope, not a like-named function of
                // anything.
                continue;
            } else if contains_most(&last, &self.last) {
                5 + d_last.min(20)
            } else if d_last <= limit(&self.last) {
                6 + d_last
            } else {
                continue;
            };
            if !matches!(&best, Some((b, _)) if score >= *b) {
                best = Some((score, form.clone()));
            }
        }
        let (mut score, mut shown) = best?;
        // With a parameter list: the same name, other overloads, shown
        // with theirs, nearest parameters first.
        if let (Some(want), Some(have)) = (&self.params, params) {
            score = 2 * score + levenshtein(have, want).min(50);
            shown.push_str(have);
        }
        Some((score, readable(&shown)))
    }
}

/// How far (in edits) a name of this length may be to count as near: one
/// edit in four characters, and one for the shortest (`foo` is not near
/// `fmt`, nor `main` near `asin`).
fn limit(s: &str) -> usize {
    (s.chars().count() / 4).max(1)
}

/// Whether one name holds the other and that one is at least half of it
/// (`read` in `pread64`, not `main` in `__libc_start_main`).
fn contains_most(a: &str, b: &str) -> bool {
    let (short, long) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    short.len() >= 3 && 2 * short.len() >= long.len() && long.contains(short)
}

/// A canonical name with a space after each comma, as people write it.
fn readable(s: &str) -> String {
    s.replace(',', ", ")
}

fn last_component(s: &str) -> &str {
    tails(s).last().unwrap_or(s)
}

/// Edits from `a` to `b`: insertions, deletions, substitutions and swaps
/// of two neighbours (`raed` is one edit from `read`).
fn levenshtein(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    if a.len() > 256 || b.len() > 256 {
        return usize::MAX;
    }
    let mut before: Vec<usize> = vec![0; b.len() + 1];
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for i in 1..=a.len() {
        cur[0] = i;
        for j in 1..=b.len() {
            let sub = prev[j - 1] + usize::from(a[i - 1] != b[j - 1]);
            cur[j] = sub.min(prev[j] + 1).min(cur[j - 1] + 1);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                cur[j] = cur[j].min(before[j - 2] + 1);
            }
        }
        std::mem::swap(&mut before, &mut prev);
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn near(pat: &str, full: &str, lang: Lang) -> Option<(usize, String)> {
        let w = Wanted::of(&Pattern::parse(pat).unwrap())?;
        w.score(full, lang)
    }

    #[test]
    fn levenshtein_distances() {
        assert_eq!(levenshtein("lookup", "lookup"), 0);
        assert_eq!(levenshtein("lookup", "lokup"), 1);
        assert_eq!(levenshtein("", "abc"), 3);
        assert_eq!(levenshtein("raed", "read"), 1);
        assert_eq!(levenshtein("ab", "ba"), 1);
    }

    /// Names that only share a few letters or a common last word are not
    /// near.
    #[test]
    fn far_names_are_not_suggested() {
        assert!(near("foo", "<&T as core::fmt::Debug>::fmt", Lang::Rust).is_none());
        assert!(near("main", "asin", Lang::C).is_none());
        assert!(near("main", "casin", Lang::C).is_none());
        assert!(near("main", "__libc_start_main", Lang::C).is_none());
        assert!(near("leveldb::DBImpl::Get", "std::istream::get()", Lang::Cpp).is_none());
        // Still near: a typo, a swap, the same method in the same scope.
        assert!(near("mian", "main", Lang::C).is_some());
        assert!(near("fo", "foo", Lang::C).is_some());
        assert!(near("leveldb::DBImpl::Get", "leveldb::DB::Get()", Lang::Cpp).is_some());
        assert!(near("read", "pread64", Lang::C).is_some());
    }

    #[test]
    fn whole_paths_without_abi_tags_or_parameters() {
        let w = Wanted::of(&Pattern::parse("kv::Store::raed").unwrap()).unwrap();
        assert!(w.near_last("read[abi:cxx11]"));
        let (score, shown) = near(
            "kv::Store::raed",
            "kv::Store::read[abi:cxx11](int)",
            Lang::Cpp,
        )
        .unwrap();
        assert_eq!(shown, "kv::Store::read");
        // A typo in the scope is near too; another class's read is farther.
        let (typo, _) = near("kv::Stroe::read", "kv::Store::read(int)", Lang::Cpp).unwrap();
        let (other, shown) = near("kv::Store::read", "kv::Cache::read(int)", Lang::Cpp).unwrap();
        assert_eq!(shown, "kv::Cache::read");
        assert!(score < other && typo < other, "{score} {typo} {other}");
        assert!(near("kv::Store::raed", "kv::Store::write(int)", Lang::Cpp).is_none());
    }

    #[test]
    fn near_names_are_shown_as_they_match() {
        let (_, shown) = near(
            "std::string::compar",
            "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::compare(char const*) const",
            Lang::Cpp,
        )
        .unwrap();
        assert_eq!(shown, "std::string::compare");
        let (_, shown) = near("m::store::Db::gte", "<m::store::Db>::get", Lang::Rust).unwrap();
        assert_eq!(shown, "m::store::Db::get");
        // With parameters: the overloads, with theirs.
        let (_, shown) = near(
            "shop::Store::lookup(long)",
            "shop::Store::lookup(int)",
            Lang::Cpp,
        )
        .unwrap();
        assert_eq!(shown, "shop::Store::lookup(int)");
    }
}
