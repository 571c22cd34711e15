//! Function patterns as users write them: `ns::Class::read`, `ns::Class::read(int)`,
//! `ns::Class::*`, `crate::module::func`, `malloc`, or a raw mangled name.
//!
//! Both the pattern and each demangled name are brought to one canonical
//! form before they are compared, so that a name matches the way people
//! type it, not only the way a demangler prints it:
//!
//! - spaces only between two identifier characters (`f(int, char const *)`
//!   is `f(int,char const*)`), `const T&` is `T const&`;
//! - inline namespaces (`std::__cxx11::`, `std::__1::`) are left out;
//! - default template arguments (`std::allocator<T>`, `std::char_traits<T>`,
//!   `std::less<T>`, …) are left out, and what remains of the standard
//!   typedefs is spelled as the typedef (`std::string`, `std::istream`, …);
//! - `size_t`, `uint64_t`, `unsigned` and friends are the builtin types the
//!   demangler prints;
//! - `[abi:cxx11]` tags are left out unless the pattern spells one;
//! - a pattern without template arguments also matches names with them
//!   (`std::vector::push_back`, Rust's `app::f` for `app::f::<u32>`);
//! - Rust's `<Type as Trait>::method` is also `Type::method` and
//!   `Trait::method`, and v0's `<Type>::method` is `Type::method`.
//!
//! A pattern matches a name whole or from any top-level `::` on.
//! [`Pattern::may_match`] answers on the raw (mangled) bytes whether a
//! symbol can match at all, so that only candidates are demangled.

use super::canon::{canon, TYPEDEFS};
use super::demangle::{Lang, Names};
use super::glob::glob_match;
use super::syntax::{find_top, is_word, rust_forms, split_params, strip_args, tails};

/// A parsed function pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pattern {
    text: String,
    /// The pattern in canonical form, as names are compared with it.
    canon: String,
    with_params: bool,
    /// The pattern names template arguments: names are compared with theirs.
    with_args: bool,
    /// The pattern spells an `[abi:…]` tag: names keep theirs.
    with_abi: bool,
    glob: bool,
    /// Identifiers every raw name of a match contains.
    words: Vec<Word>,
    /// The words every raw name of a match holds as they are, longest
    /// first: the prefilter's first, cheapest test.
    needles: Vec<Needle>,
}

/// A substring searched in every symbol name, prepared once.
#[derive(Clone, Debug)]
struct Needle(memchr::memmem::Finder<'static>);

impl PartialEq for Needle {
    fn eq(&self, other: &Needle) -> bool {
        self.0.needle() == other.0.needle()
    }
}

impl Eq for Needle {}

/// An identifier of the pattern's name, as the prefilter looks for it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Word {
    text: String,
    /// A whole identifier (not next to a glob character): mangled names
    /// hold it with its length in front (`4llvm5APInt4udiv`).
    whole: bool,
}

/// Text from the command line as messages quote it: whole up to 80
/// characters, else its first 60 and its length.
pub fn quoted(text: &str) -> String {
    const WHOLE: usize = 80;
    const START: usize = 60;
    if text.chars().count() <= WHOLE {
        return format!("{text:?}");
    }
    let start: String = text.chars().take(START).collect();
    format!("{start:?}… ({} bytes)", text.len())
}

impl Pattern {
    /// The pattern as messages quote it (see [`quoted`]).
    pub fn quoted(&self) -> String {
        quoted(&self.text)
    }

    pub fn parse(text: &str) -> anyhow::Result<Pattern> {
        let text = text.trim();
        if text.is_empty() {
            anyhow::bail!("empty function name");
        }
        if text.len() > 4096 {
            anyhow::bail!("function pattern is longer than 4096 bytes");
        }
        if text.chars().any(|c| c.is_control()) {
            anyhow::bail!(
                "function pattern {} contains control characters",
                quoted(text)
            );
        }
        let with_abi = text.contains("[abi:");
        let canon = canon(text, with_abi, true);
        let (name, params) = split_params(&canon);
        let glob = text.contains(['*', '?']);
        let words = words_of(name);
        // `std` may stand abbreviated (`St`); every other word is in a
        // matching raw name letter for letter, whatever else the test of
        // `may_match` asks of it.
        let mut plain: Vec<&str> = words
            .iter()
            .map(|w| w.text.as_str())
            .filter(|w| *w != "std")
            .collect();
        plain.sort_by_key(|w| std::cmp::Reverse(w.len()));
        let needles = plain
            .into_iter()
            .map(|w| Needle(memchr::memmem::Finder::new(w).into_owned()))
            .collect();
        Ok(Pattern {
            text: text.to_string(),
            words,
            needles,
            with_params: params.is_some(),
            with_args: find_top(name, |b| b == b'<').is_some(),
            with_abi,
            glob,
            canon,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The pattern in canonical form.
    pub(in crate::symbols) fn canonical(&self) -> &str {
        &self.canon
    }

    /// Whether the pattern names template arguments.
    pub(in crate::symbols) fn with_args(&self) -> bool {
        self.with_args
    }

    /// The longest identifier every raw name that [`may_match`](Self::may_match)s
    /// holds letter for letter, unless the name holds the pattern's text
    /// itself; None when the pattern has no such identifier.
    pub(in crate::symbols) fn needle(&self) -> Option<&memchr::memmem::Finder<'static>> {
        self.needles.first().map(|n| &n.0)
    }

    /// Whether a symbol with this raw (mangled) name may match: false only
    /// when [`matches`](Self::matches) is false for it whatever it
    /// demangles to. Costs a few substring searches, no demangling:
    /// identifiers of the pattern appear in Itanium and Rust names with
    /// their length in front (`llvm::APInt::udiv` is in
    /// `_ZN4llvm5APInt4udivERKS0_`), and in C names as they are.
    pub fn may_match(&self, raw: &str) -> bool {
        if !self
            .needles
            .iter()
            .all(|n| n.0.find(raw.as_bytes()).is_some())
        {
            return raw.contains(self.text.as_str());
        }
        if raw.contains(self.text.as_str()) {
            return true;
        }
        let mangled = raw.starts_with("_Z") || raw.starts_with("_R");
        // Rust legacy names escape paths inside a component
        // (`_$LT$app..Db$u20$as$u20$app..Get$GT$`): no length in front.
        let escaped = || raw.contains('$') || raw.contains("..");
        self.words.iter().all(|w| {
            if !w.whole || !mangled {
                return raw.contains(w.text.as_str());
            }
            let prefixed = if w.text == "std" {
                // `std::` is `St`, or one of the abbreviations `Sa` (allocator),
                // `Sb` (basic_string), `Ss`, `Si`, `So`, `Sd`, or `Dn`
                // (std::nullptr_t); Rust's std crate is `3std`.
                raw.contains("3std")
                    || ["St", "Sa", "Sb", "Ss", "Si", "So", "Sd", "Dn"]
                        .iter()
                        .any(|s| raw.contains(s))
            } else {
                // Rust v0 puts `_` between the length and an identifier that
                // starts with `_`.
                with_length(raw, &w.text, "")
                    || (w.text.starts_with('_') && with_length(raw, &w.text, "_"))
            };
            prefixed || (escaped() && raw.contains(w.text.as_str()))
        })
    }

    /// Whether a symbol matches: its raw name exactly, or its demangled name
    /// (with parameters if the pattern has them), whole or from any `::`
    /// boundary on, so `Store::lookup` finds `shop::Store::lookup`.
    pub fn matches(&self, raw: &str, names: &Names) -> bool {
        if raw == self.text || names.stem == self.text {
            return true;
        }
        if names.lang == Lang::Go {
            return super::go::matches(&self.text, raw);
        }
        // The pattern's identifiers are in the demangled name as they are:
        // most names fail here, before any canonical form is made.
        if !self
            .words
            .iter()
            .all(|w| names.full.contains(w.text.as_str()))
        {
            return false;
        }
        self.subjects(names)
            .iter()
            .any(|s| tails(s).any(|tail| self.hit(tail)))
    }

    fn hit(&self, tail: &str) -> bool {
        if self.glob {
            glob_match(&self.canon, tail)
        } else {
            self.canon == tail
        }
    }

    /// The canonical forms of a name this pattern is compared with.
    fn subjects(&self, names: &Names) -> Vec<String> {
        let mut out = Vec::new();
        let full = canon(&names.full, self.with_abi, true);
        self.forms_of(&full, names.lang, &mut out);
        // `std::basic_string<char>::size` is `std::string::size` and stays
        // `std::basic_string*` for a glob.
        if names.full.contains("std::") {
            let spelled = canon(&names.full, self.with_abi, false);
            if spelled != full {
                self.forms_of(&spelled, names.lang, &mut out);
            }
        }
        out
    }

    /// The forms of one canonical name: with and without template
    /// arguments, Rust's other paths, and its parameters if the pattern
    /// has them.
    fn forms_of(&self, full: &str, lang: Lang, out: &mut Vec<String>) {
        let (name, params) = split_params(full);
        let params = if self.with_params {
            match params {
                Some(p) => p,
                // C names and Rust paths have no parameters to compare.
                None => return,
            }
        } else {
            ""
        };
        let mut forms = vec![name.to_string()];
        if lang == Lang::Rust {
            forms.extend(rust_forms(name));
        }
        if !self.with_args {
            let bare: Vec<String> = forms
                .iter()
                .map(|f| strip_args(f))
                .filter(|b| !forms.contains(b))
                .collect();
            forms.extend(bare);
        }
        for mut f in forms {
            f.push_str(params);
            out.push(f);
        }
    }
}

/// Whether `raw` holds `word` with its length and `sep` in front.
fn with_length(raw: &str, word: &str, sep: &str) -> bool {
    let n = word.len().to_string();
    let mut at = 0;
    while let Some(i) = raw[at..].find(word) {
        let start = at + i;
        if let Some(head) = raw[..start].strip_suffix(sep) {
            if head.ends_with(n.as_str()) {
                return true;
            }
        }
        at = start + 1;
    }
    false
}

/// Words that demanglers print but mangled names do not hold as such:
/// keywords, builtin types, the standard names Itanium abbreviates
/// (`Ss`, `Si`, `Sa`, …) and the phrases for special names
/// (`{lambda()#1}`, `(anonymous namespace)`, `{closure#0}`, thunks, guard
/// variables). The prefilter never looks for them, nor for the typedefs
/// of the canonical form ([`TYPEDEFS`], `w`-prefixed too), which are not
/// repeated here.
const PRINTED_WORDS: &[&str] = &[
    // C and C++ types, keywords and operators
    "void",
    "bool",
    "char",
    "wchar_t",
    "char8_t",
    "char16_t",
    "char32_t",
    "short",
    "int",
    "long",
    "signed",
    "unsigned",
    "float",
    "double",
    "__int128",
    "__float128",
    "_Float",
    "_BitInt",
    "_Accum",
    "_Fract",
    "_Sat",
    "decimal32",
    "decimal64",
    "decimal128",
    "auto",
    "const",
    "volatile",
    "restrict",
    "decltype",
    "sizeof",
    "alignof",
    "typeid",
    "noexcept",
    "throw",
    "operator",
    "new",
    "delete",
    "const_cast",
    "static_cast",
    "dynamic_cast",
    "reinterpret_cast",
    "nullptr",
    "nullptr_t",
    "true",
    "false",
    "this",
    "class",
    "struct",
    "union",
    "enum",
    "typename",
    "template",
    "complex",
    "imaginary",
    "__vector",
    // special names
    "std",
    "abi",
    "anonymous",
    "namespace",
    "lambda",
    "unnamed",
    "type",
    "vtable",
    "vtt",
    "VTT",
    "typeinfo",
    "name",
    "for",
    "construction",
    "guard",
    "variable",
    "thunk",
    "virtual",
    "override",
    "offset",
    "non",
    "to",
    "covariant",
    "return",
    "transaction",
    "clone",
    "reference",
    "temporary",
    "TLS",
    "init",
    "function",
    "wrapper",
    "string",
    "literal",
    "block",
    "invoke",
    "global",
    "constructors",
    "destructors",
    "keyed",
    "java",
    "resource",
    "parm",
    "in",
    "at",
    "invocation",
    "x",
    // standard names Itanium abbreviates (the canonical typedefs, `string`
    // to `wregex`, are canon's TYPEDEFS, read beside this list)
    "allocator",
    "basic_string",
    "char_traits",
    "basic_istream",
    "basic_ostream",
    "basic_iostream",
    "u8string",
    "u16string",
    "u32string",
    "size_t",
    "ssize_t",
    "ptrdiff_t",
    // Rust types, keywords and special names
    "i8",
    "i16",
    "i32",
    "i64",
    "i128",
    "isize",
    "u8",
    "u16",
    "u32",
    "u64",
    "u128",
    "usize",
    "f16",
    "f32",
    "f64",
    "f128",
    "str",
    "dyn",
    "mut",
    "unsafe",
    "extern",
    "fn",
    "as",
    "impl",
    "closure",
    "shim",
    "reify",
    "static",
    "C",
    "_",
];

/// The identifiers of a canonical pattern name that a raw name must hold.
fn words_of(name: &str) -> Vec<Word> {
    let chars: Vec<(usize, char)> = name.char_indices().collect();
    let mut out: Vec<Word> = Vec::new();
    let mut k = 0;
    while k < chars.len() {
        if !is_word(chars[k].1) {
            k += 1;
            continue;
        }
        let start = k;
        while k < chars.len() && is_word(chars[k].1) {
            k += 1;
        }
        let from = chars[start].0;
        let to = chars.get(k).map_or(name.len(), |c| c.0);
        let text = &name[from..to];
        let before = start.checked_sub(1).map(|i| chars[i].1);
        let after = chars.get(k).map(|c| c.1);
        let whole = matches!(before, None | Some(':' | '<' | ',' | '(' | ' '))
            && matches!(
                after,
                None | Some(':' | '<' | '>' | ',' | '(' | ')' | ' ' | '[')
            );
        // The typedefs of the canonical form (`std::wistream`) too.
        let typedef = |w: &str| TYPEDEFS.contains(&w.strip_prefix('w').unwrap_or(w));
        let printed = if whole {
            PRINTED_WORDS.contains(&text) || typedef(text)
        } else {
            PRINTED_WORDS.iter().any(|p| p.contains(text))
                || TYPEDEFS.iter().any(|t| format!("w{t}").contains(text))
        };
        // `std` is looked for by its abbreviations (see `may_match`).
        let std = whole && text == "std";
        if !std && (printed || !text.is_ascii() || text.starts_with(|c: char| c.is_ascii_digit())) {
            continue;
        }
        if !out.iter().any(|w| w.text == text && w.whole == whole) {
            out.push(Word {
                text: text.to_string(),
                whole,
            });
        }
    }
    // The longest first: the rarest, so most raw names fail early.
    out.sort_by_key(|w| std::cmp::Reverse(w.text.len()));
    out
}

#[cfg(test)]
mod tests {
    use super::super::demangle::demangle;
    use super::*;

    fn m(pat: &str, raw: &str) -> bool {
        let p = Pattern::parse(pat).unwrap();
        let hit = p.matches(raw, &demangle(raw));
        // The prefilter never rejects what matches.
        assert!(
            !hit || p.may_match(raw),
            "{pat:?} matches {raw} but may_match says no"
        );
        hit
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
    fn globs_after_std() {
        // std::terminate()
        assert!(m("std::terminate*", "_ZSt9terminatev"));
        assert!(m("std::terminate", "_ZSt9terminatev"));
        assert!(m("std::*", "_ZSt9terminatev"));
        assert!(m("std::*", "_ZNSi3getEv"));
        assert!(m("std::*", "_ZNKSs7compareERKSs"));
        assert!(m(
            "std::*",
            "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7compareERKS4_"
        ));
        assert!(!m("std::*", "_ZN4shop5Store6lookupEi"));
        // std::vector<int, std::allocator<int> >::push_back(int const&)
        let push = "_ZNSt6vectorIiSaIiEE9push_backERKi";
        assert!(m("std::vector*", push));
        assert!(m("std::vector<*", push));
        assert!(m("std::vector<int>::push_back", push));
        assert!(m("std::vector::push_back", push));
        assert!(m("std::vector<int>::push_back(const int&)", push));
        assert!(m("std::vector<int>::push_back(int const &)", push));
        assert!(!m("std::vector<long>::push_back", push));
        // The inline namespaces of libstdc++ and libc++.
        let cmp = "_ZNKSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEE7compareERKS4_";
        assert!(m("std::string::compare", cmp));
        assert!(m("std::basic_string*", cmp));
        assert!(m("std::__cxx11::basic_string*", cmp));
        assert!(m("std::string::compare(std::string const&) const", cmp));
        assert!(m("std::string::compare(const std::string&) const", cmp));
        let libcxx = "_ZNKSt3__112basic_stringIcNS_11char_traitsIcEENS_9allocatorIcEEE4sizeEv";
        assert!(m("std::string::size", libcxx));
        assert!(m("std::basic_string<char>::size", libcxx));
        assert!(m(
            "std::chrono::system_clock::now",
            "_ZNSt6chrono3_V212system_clock3nowEv"
        ));
    }

    #[test]
    fn operators() {
        assert!(m("operator new", "_Znwm"));
        assert!(m("operator new(unsigned long)", "_Znwm"));
        assert!(m("operator new(size_t)", "_Znwm"));
        assert!(m("operator new(std::size_t)", "_Znwm"));
        assert!(!m("operator new", "_Znam"));
        assert!(m("operator new[]", "_Znam"));
        assert!(m("operator delete", "_ZdlPvm"));
        assert!(m("operator delete(void*, unsigned long)", "_ZdlPvm"));
        assert!(m("operator delete(void *, size_t)", "_ZdlPvm"));
        assert!(m("operator delete*", "_ZdaPv"));
        assert!(m("foo::operator<", "_ZN3fooltEi"));
        assert!(!m("foo::operator<", "_ZN3foolsEi"));
        assert!(m("foo::operator<<(int)", "_ZN3foolsEi"));
        assert!(m("foo::operator()", "_ZNK3fooclEv"));
        assert!(m("foo::operator()() const", "_ZNK3fooclEv"));
        // std::operator<< <std::char_traits<char> >(std::basic_ostream<…>&, char const*)
        let shl = "_ZStlsISt11char_traitsIcEERSt13basic_ostreamIcT_ES5_PKc";
        assert!(m("std::operator<<", shl));
        assert!(m("std::operator<<(std::ostream&, const char*)", shl));
        assert!(m("operator<<(std::ostream &, char const *)", shl));
    }

    #[test]
    fn parameters_as_people_write_them() {
        let load_is = "_ZN4YAML4LoadERSi";
        let load_str = "_ZN4YAML4LoadERKNSt7__cxx1112basic_stringIcSt11char_traitsIcESaIcEEE";
        assert!(m("YAML::Load(std::istream&)", load_is));
        assert!(m("YAML::Load(std::basic_istream<char>&)", load_is));
        assert!(m(
            "YAML::Load(std::basic_istream<char, std::char_traits<char> >&)",
            load_is
        ));
        assert!(!m("YAML::Load(std::istream&)", load_str));
        assert!(m("YAML::Load(std::string const&)", load_str));
        assert!(m("YAML::Load(const std::string&)", load_str));
        assert!(m("YAML::Load(const std::string &)", load_str));
        assert!(m("YAML::Load( std::string  const & )", load_str));
        assert!(!m("YAML::Load(std::string&)", load_str));
        assert!(m("Load(const std::string&)", load_str));
        // `std::basic_istream<char, …>::get()` as `std::istream::get`
        assert!(m("std::istream::get", "_ZNSi3getEv"));
        assert!(m("std::istream::get()", "_ZNSi3getEv"));
        // std::basic_string_view<char, std::char_traits<char> >::find(char const*, unsigned long) const
        let find = "_ZNKSt17basic_string_viewIcSt11char_traitsIcEE4findEPKcm";
        assert!(m("std::string_view::find(const char*, size_t) const", find));
        assert!(m(
            "std::string_view::find(char const*, std::size_t) const",
            find
        ));
        assert!(m("std::string_view::find", find));
        // map<int, int>::operator[](int const&)
        let index = "_ZNSt3mapIiiSt4lessIiESaISt4pairIKiiEEEixERS3_";
        assert!(m("std::map<int, int>::operator[]", index));
        assert!(m("std::map<int,int>::operator[](const int&)", index));
        assert!(m("std::map::operator[]", index));
        // unsigned is unsigned int; long int is long
        assert!(m("f(unsigned)", "_Z1fj"));
        assert!(m("f(unsigned int)", "_Z1fj"));
        assert!(m("f(uint32_t)", "_Z1fj"));
        assert!(m("f(long int, unsigned long int)", "_Z1flm"));
        assert!(m("f(int64_t, uint64_t)", "_Z1flm"));
        assert!(m("f(signed char)", "_Z1fa"));
        assert!(!m("f(char)", "_Z1fa"));
    }

    #[test]
    fn rust_paths_as_backtraces_show_them() {
        // v0: <m::store::Db>::get, an inherent method
        let v0_get = "_RNvMNtCs1234_1m5storeNtB2_2Db3get";
        assert_eq!(demangle(v0_get).full, "<m::store::Db>::get");
        assert!(m("m::store::Db::get", v0_get));
        assert!(m("store::Db::get", v0_get));
        assert!(m("Db::get", v0_get));
        assert!(m("<m::store::Db>::get", v0_get));
        assert!(m("m::store::Db::*", v0_get));
        assert!(!m("m::store::Db::put", v0_get));
        // v0: <m::store::Db as m::store::Get>::get, a trait method
        let v0_trait = "_RNvXNtCs1234_1m5storeNtB2_2DbNtB2_3Get3get";
        assert_eq!(
            demangle(v0_trait).full,
            "<m::store::Db as m::store::Get>::get"
        );
        assert!(m("m::store::Get::get", v0_trait));
        assert!(m("m::store::Db::get", v0_trait));
        assert!(m("Get::get", v0_trait));
        assert!(m("<m::store::Db as m::store::Get>::get", v0_trait));
        // legacy: the same trait method
        let legacy_trait =
            "_ZN46_$LT$m..store..Db$u20$as$u20$m..store..Get$GT$3get17h0123456789abcdefE";
        assert_eq!(
            demangle(legacy_trait).full,
            "<m::store::Db as m::store::Get>::get"
        );
        assert!(m("m::store::Get::get", legacy_trait));
        assert!(m("m::store::Db::get", legacy_trait));
        assert!(m("Db::get", legacy_trait));
        // v0 closures as legacy shows them
        let closure = "_RNCNvCs1234_1m4main0B3_";
        assert_eq!(demangle(closure).full, "m::main::{closure#0}");
        assert!(m("m::main::{{closure}}", closure));
        assert!(m("m::main::{closure#0}", closure));
    }

    #[test]
    fn may_match_looks_for_identifiers_with_their_length() {
        let p = Pattern::parse("llvm::APInt::udiv").unwrap();
        assert!(p.may_match("_ZN4llvm5APInt4udivERKS0_"));
        assert!(!p.may_match("_ZN4llvm5APInt7udivremERKS0_S2_RS0_S3_"));
        assert!(!p.may_match("_ZN4llvm8APIntOps4udivEv"));
        let p = Pattern::parse("shop::Store::*").unwrap();
        assert!(p.may_match("_ZN4shop5Store6lookupEi"));
        assert!(!p.may_match("_ZN4shop6Stores6lookupEi"));
        // C names hold identifiers as they are.
        let p = Pattern::parse("slow_sum").unwrap();
        assert!(p.may_match("slow_sum"));
        assert!(!p.may_match("fast_path"));
        // Nothing to look for: everything may match.
        assert!(Pattern::parse("*").unwrap().may_match("anything"));
        assert!(Pattern::parse("operator new").unwrap().may_match("_Znwm"));
        // Rust v0 puts `_` before an identifier starting with `_`.
        let p = Pattern::parse("m::_private").unwrap();
        assert_eq!(demangle("_RNvCs1234_1m8__private").full, "m::_private");
        assert!(p.may_match("_RNvCs1234_1m8__private"));
    }

    #[test]
    fn rejects_bad_patterns() {
        assert!(Pattern::parse("  ").is_err());
        assert!(Pattern::parse("a\nb").is_err());
    }

    #[test]
    fn odd_text_neither_panics_nor_loops() {
        for s in [
            "<<<<",
            ">>>>",
            "((((",
            "))",
            "operator",
            "operator<",
            "a::operator",
            "é<ü>(ß)",
            "<a as",
            "f(const",
            "const ",
            "::",
            "std::basic_string<char",
            "{closure#",
            "unsigned unsigned",
            "long int int",
        ] {
            let p = Pattern::parse(s).unwrap();
            let _ = p.matches(s, &demangle(s));
            let _ = p.may_match(s);
        }
        let deep = format!("{}x{}", "<".repeat(2000), ">".repeat(2000));
        let _ = canon(&deep, false, true);
    }
}
