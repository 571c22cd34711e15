//! Formatting the renderers share: the percentiles reports print, durations
//! and times of day as people read them, long names shortened for a
//! column, BCC's log2 table, the `--cpu` split in JSON, and argument values.
//! It renders no report of its own and uses none of the renderers.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::counts::{CpuSplit, Unit, CPU_PARTS};

/// The percentiles reports print, with their names.
pub const PERCENTILES: [(f64, &str); 4] =
    [(50.0, "p50"), (90.0, "p90"), (99.0, "p99"), (99.9, "p99.9")];

/// `1.23 ms`, `400.3 us`, `12 ns`.
pub fn human(ns: f64) -> String {
    if ns >= 1e9 {
        format!("{:.2} s", ns / 1e9)
    } else if ns >= 1e6 {
        format!("{:.2} ms", ns / 1e6)
    } else if ns >= 1e3 {
        format!("{:.1} us", ns / 1e3)
    } else {
        format!("{ns:.0} ns")
    }
}

/// Local wall-clock time as HH:MM:SS.
pub fn clock(t: SystemTime) -> String {
    let secs = t
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as libc::time_t)
        .unwrap_or(0);
    // SAFETY: localtime_r writes only into the tm we pass; tm is plain data
    // for which all-zero bytes are a valid value.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    let ok = unsafe { !libc::localtime_r(&secs, &mut tm).is_null() };
    if !ok {
        return "??:??:??".into();
    }
    format!("{:02}:{:02}:{:02}", tm.tm_hour, tm.tm_min, tm.tm_sec)
}

/// Local time of day with microseconds: HH:MM:SS.uuuuuu.
pub fn clock_us(t: SystemTime) -> String {
    let us = t
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_micros());
    format!("{}.{us:06}", clock(t))
}

/// The line saying how much probe time was subtracted from each call, and
/// how many calls were shorter than that; None when nothing was.
pub fn probe_time_note(probe_ns: u64, under: u64) -> Option<String> {
    probe_time_note_of(probe_ns, "", under)
}

/// [`probe_time_note`] with `parts` (what the probe time is made of, in
/// parentheses, or "") after the time.
pub fn probe_time_note_of(probe_ns: u64, parts: &str, under: u64) -> Option<String> {
    if probe_ns == 0 {
        return None;
    }
    let mut s = format!(
        "probe time subtracted from each call: ~{:.2} us{parts}",
        probe_ns as f64 / 1000.0
    );
    if under > 0 {
        s.push_str(&format!(
            " ({under} call{} shorter than that, read as 0: the correction is larger than the measured time)",
            if under == 1 { " was" } else { "s were" }
        ));
    }
    Some(s)
}

/// Shortens a long demangled name for a column: template arguments go
/// first (`basic_string<…>`), then parameters (`f(…)`).
pub fn compact(name: &str, max: usize) -> String {
    fn strip(s: &str, open: char, close: char) -> String {
        let mut out = String::with_capacity(s.len());
        let mut depth = 0usize;
        for c in s.chars() {
            if c == open {
                if depth == 0 {
                    out.push(open);
                    out.push('…');
                }
                depth += 1;
            } else if c == close && depth > 0 {
                depth -= 1;
                if depth == 0 {
                    out.push(close);
                }
            } else if depth == 0 {
                out.push(c);
            }
        }
        out
    }
    if name.chars().count() <= max {
        return name.to_string();
    }
    let shorter = strip(name, '<', '>');
    if shorter.chars().count() <= max {
        return shorter;
    }
    strip(&shorter, '(', ')')
}

/// BCC's `print_log2_hist`, row for row: `vals[i]` counts values in
/// [2^i, 2^(i+1)) (slot 0 holds 0 and 1). Prints nothing when every slot
/// is empty; says whether it printed a table.
pub fn print_log2_hist(vals: &[u64], val_type: &str, w: &mut impl Write) -> io::Result<bool> {
    let Some(idx_max) = vals.iter().rposition(|&v| v > 0) else {
        return Ok(false);
    };
    let val_max = vals.iter().copied().max().unwrap_or(0);
    // BCC numbers its slots from 1 (its slot 0 holds only zero) and turns
    // to wide columns past its slot 32.
    let narrow = idx_max < 32;
    let (pad, label_w, width, stars) = if narrow {
        (5, 19, 10, 40)
    } else {
        (15, 29, 20, 20)
    };
    writeln!(
        w,
        "{:pad$}{:<label_w$} : count     distribution",
        "", val_type
    )?;
    for (i, &val) in vals.iter().enumerate().take(idx_max + 1) {
        let high = (1u128 << (i + 1)) - 1;
        let mut low = (1u128 << (i + 1)) >> 1;
        if low == high {
            low -= 1;
        }
        // floor(stars * val / val_max) stars, never more than `stars`.
        let n = (val.min(val_max) as u128 * stars as u128 / val_max as u128) as usize;
        writeln!(
            w,
            "{low:>width$} -> {high:<width$} : {val:<8} |{}{}|",
            "*".repeat(n),
            " ".repeat(stars - n)
        )?;
    }
    Ok(true)
}

/// `--cpu --hist`: a log2 table of each part per call.
pub fn render_split_hist(hist: &[Vec<u64>; 3], unit: Unit, w: &mut impl Write) -> io::Result<()> {
    for ((name, _), slots) in CPU_PARTS.iter().zip(hist) {
        writeln!(w, "\n{name}, per call:")?;
        if !print_log2_hist(slots, unit.word(), w)? {
            writeln!(w, "(no calls)")?;
        }
    }
    Ok(())
}

/// `--cpu`: each part in ns and its share of the calls' time; with
/// `--hist`, the log2 slots of each part per call.
pub fn cpu_json(split: &CpuSplit) -> Value {
    let parts = split.parts();
    let sum: u64 = parts.iter().sum();
    let mut m = Map::new();
    for ((_, key), ns) in CPU_PARTS.iter().zip(parts) {
        m.insert(format!("{key}_ns"), json!(ns));
        let share = (sum > 0).then(|| ns as f64 / sum as f64);
        m.insert(format!("{key}_share"), json!(share));
    }
    if let Some(hist) = &split.hist {
        let mut h = Map::new();
        for ((_, key), slots) in CPU_PARTS.iter().zip(hist) {
            h.insert(key.to_string(), json!(slots));
        }
        m.insert("log2_buckets".into(), Value::Object(h));
    }
    Value::Object(m)
}

/// An argument's value, as its type reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArgValue {
    Signed(i64),
    Unsigned(u64),
    /// An address: hex in text.
    Pointer(u64),
    /// A whole register of unknown type (see [`arg_text`]).
    Register(u64),
}

impl ArgValue {
    /// `v`, the register's 64 bits, read as an integer of `size` bytes.
    pub fn int(v: u64, size: u8, signed: bool) -> ArgValue {
        let bits = u32::from(size.clamp(1, 8)) * 8;
        let low = if bits == 64 {
            v
        } else {
            v & ((1u64 << bits) - 1)
        };
        if !signed {
            return ArgValue::Unsigned(low);
        }
        let shift = 64 - bits;
        ArgValue::Signed(((low << shift) as i64) >> shift)
    }

    pub fn text(self) -> String {
        match self {
            ArgValue::Signed(v) => v.to_string(),
            ArgValue::Unsigned(v) => v.to_string(),
            ArgValue::Pointer(v) => format!("{v:#x}"),
            ArgValue::Register(v) => arg_text(v),
        }
    }

    pub fn json(self) -> Value {
        match self {
            ArgValue::Signed(v) => json!(v),
            ArgValue::Unsigned(v) | ArgValue::Pointer(v) | ArgValue::Register(v) => json!(v),
        }
    }
}

/// A value a call returned, as its function's return type reads.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum RetValue {
    /// An integer or an address (hex in text).
    Int(ArgValue),
    Bool(bool),
    /// An enum's value, with its enumerator's name where DWARF gives one.
    Enum {
        value: i64,
        name: Option<String>,
    },
    /// A system call's result: a negative one is an errno, named.
    Errno(i64),
}

impl RetValue {
    /// `-1`, `0x7f..`, `true`, `READY`, `-11 (EAGAIN)`.
    pub fn text(&self) -> String {
        match self {
            RetValue::Int(v) => v.text(),
            RetValue::Bool(b) => b.to_string(),
            RetValue::Enum { name: Some(n), .. } => n.clone(),
            RetValue::Enum { value, name: None } => value.to_string(),
            RetValue::Errno(v) => match self.name() {
                Some(n) => format!("{v} ({n})"),
                None => v.to_string(),
            },
        }
    }

    /// The value as a JSON number (a bool as a bool).
    pub fn json(&self) -> Value {
        match self {
            RetValue::Int(v) => v.json(),
            RetValue::Bool(b) => json!(b),
            RetValue::Enum { value, .. } | RetValue::Errno(value) => json!(value),
        }
    }

    /// An enumerator's or an errno's name.
    pub fn name(&self) -> Option<String> {
        match self {
            RetValue::Enum { name, .. } => name.clone(),
            RetValue::Errno(v) if *v < 0 => errno_name(v.unsigned_abs()).map(str::to_string),
            _ => None,
        }
    }

    /// Its JSON object: the value, its name where it has one, an address
    /// in hex too.
    pub fn json_object(&self) -> Value {
        let mut v = json!({ "value": self.json() });
        if let Some(n) = self.name() {
            v["name"] = json!(n);
        }
        if let RetValue::Int(ArgValue::Pointer(p)) = self {
            v["hex"] = json!(format!("{p:#x}"));
        }
        v
    }
}

/// The name of Linux errno `e` (x86-64 and arm64 number them alike).
pub fn errno_name(e: u64) -> Option<&'static str> {
    const NAMES: [&str; 134] = [
        "",
        "EPERM",
        "ENOENT",
        "ESRCH",
        "EINTR",
        "EIO",
        "ENXIO",
        "E2BIG",
        "ENOEXEC",
        "EBADF",
        "ECHILD",
        "EAGAIN",
        "ENOMEM",
        "EACCES",
        "EFAULT",
        "ENOTBLK",
        "EBUSY",
        "EEXIST",
        "EXDEV",
        "ENODEV",
        "ENOTDIR",
        "EISDIR",
        "EINVAL",
        "ENFILE",
        "EMFILE",
        "ENOTTY",
        "ETXTBSY",
        "EFBIG",
        "ENOSPC",
        "ESPIPE",
        "EROFS",
        "EMLINK",
        "EPIPE",
        "EDOM",
        "ERANGE",
        "EDEADLK",
        "ENAMETOOLONG",
        "ENOLCK",
        "ENOSYS",
        "ENOTEMPTY",
        "ELOOP",
        "",
        "ENOMSG",
        "EIDRM",
        "ECHRNG",
        "EL2NSYNC",
        "EL3HLT",
        "EL3RST",
        "ELNRNG",
        "EUNATCH",
        "ENOCSI",
        "EL2HLT",
        "EBADE",
        "EBADR",
        "EXFULL",
        "ENOANO",
        "EBADRQC",
        "EBADSLT",
        "",
        "EBFONT",
        "ENOSTR",
        "ENODATA",
        "ETIME",
        "ENOSR",
        "ENONET",
        "ENOPKG",
        "EREMOTE",
        "ENOLINK",
        "EADV",
        "ESRMNT",
        "ECOMM",
        "EPROTO",
        "EMULTIHOP",
        "EDOTDOT",
        "EBADMSG",
        "EOVERFLOW",
        "ENOTUNIQ",
        "EBADFD",
        "EREMCHG",
        "ELIBACC",
        "ELIBBAD",
        "ELIBSCN",
        "ELIBMAX",
        "ELIBEXEC",
        "EILSEQ",
        "ERESTART",
        "ESTRPIPE",
        "EUSERS",
        "ENOTSOCK",
        "EDESTADDRREQ",
        "EMSGSIZE",
        "EPROTOTYPE",
        "ENOPROTOOPT",
        "EPROTONOSUPPORT",
        "ESOCKTNOSUPPORT",
        "EOPNOTSUPP",
        "EPFNOSUPPORT",
        "EAFNOSUPPORT",
        "EADDRINUSE",
        "EADDRNOTAVAIL",
        "ENETDOWN",
        "ENETUNREACH",
        "ENETRESET",
        "ECONNABORTED",
        "ECONNRESET",
        "ENOBUFS",
        "EISCONN",
        "ENOTCONN",
        "ESHUTDOWN",
        "ETOOMANYREFS",
        "ETIMEDOUT",
        "ECONNREFUSED",
        "EHOSTDOWN",
        "EHOSTUNREACH",
        "EALREADY",
        "EINPROGRESS",
        "ESTALE",
        "EUCLEAN",
        "ENOTNAM",
        "ENAVAIL",
        "EISNAM",
        "EREMOTEIO",
        "EDQUOT",
        "ENOMEDIUM",
        "EMEDIUMTYPE",
        "ECANCELED",
        "ENOKEY",
        "EKEYEXPIRED",
        "EKEYREVOKED",
        "EKEYREJECTED",
        "EOWNERDEAD",
        "ENOTRECOVERABLE",
        "ERFKILL",
        "EHWPOISON",
    ];
    match e {
        512 => Some("ERESTARTSYS"),
        513 => Some("ERESTARTNOINTR"),
        514 => Some("ERESTARTNOHAND"),
        516 => Some("ERESTART_RESTARTBLOCK"),
        _ => NAMES
            .get(usize::try_from(e).ok()?)
            .copied()
            .filter(|n| !n.is_empty()),
    }
}

/// A register value as a number where it looks like one (small, or a
/// small negative), in hex where it looks like an address.
pub fn arg_text(v: u64) -> String {
    let s = v as i64;
    if (-(1 << 20)..(1 << 20)).contains(&s) {
        s.to_string()
    } else {
        format!("{v:#x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BCC funclatency's sample in the IO Visor article (`funclatency -u
    /// do_sys_open`), as the article prints it: each line with its first
    /// five spaces lost. Counts 20, 125, 83, 18, 7, 2 in the slots from
    /// "0 -> 1" up.
    const ARTICLE: &str = "\
usecs               : count     distribution
    0 -> 1          : 20       |******                                  |
    2 -> 3          : 125      |****************************************|
    4 -> 7          : 83       |**************************              |
    8 -> 15         : 18       |*****                                   |
   16 -> 31         : 7        |**                                      |
   32 -> 63         : 2        |                                        |
";

    #[test]
    fn table_is_funclatencys() {
        let mut out = Vec::new();
        assert!(print_log2_hist(&[20, 125, 83, 18, 7, 2], "usecs", &mut out).unwrap());
        let out = String::from_utf8(out).unwrap();
        let shifted: String = out
            .lines()
            .map(|l| format!("{}\n", l.strip_prefix("     ").unwrap_or("?")))
            .collect();
        assert_eq!(shifted, ARTICLE);
        // BCC's format strings, applied by hand to the first rows.
        let mut lines = out.lines();
        assert_eq!(
            lines.next(),
            Some("     usecs               : count     distribution")
        );
        assert_eq!(
            lines.next(),
            Some("         0 -> 1          : 20       |******                                  |")
        );
    }

    /// Past BCC's slot 32 (durations of 2^32 units and more) the columns
    /// widen and the bars halve, as BCC's do.
    #[test]
    fn wide_table() {
        let mut vals = vec![0u64; 33];
        vals[31] = 4;
        let mut out = Vec::new();
        print_log2_hist(&vals, "nsecs", &mut out).unwrap();
        let narrow = String::from_utf8(out).unwrap();
        assert_eq!(
            narrow.lines().last(),
            Some("2147483648 -> 4294967295 : 4        |****************************************|")
        );
        vals[32] = 2;
        let mut out = Vec::new();
        print_log2_hist(&vals, "nsecs", &mut out).unwrap();
        let wide = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = wide.lines().collect();
        assert_eq!(
            lines[0],
            "               nsecs                         : count     distribution"
        );
        assert_eq!(
            lines[33],
            "          4294967296 -> 8589934591           : 2        |**********          |"
        );
    }

    #[test]
    fn empty_table_prints_nothing() {
        let mut out = Vec::new();
        assert!(!print_log2_hist(&[0, 0], "nsecs", &mut out).unwrap());
        assert!(out.is_empty());
    }

    #[test]
    fn arguments_read_as_numbers_or_addresses() {
        assert_eq!(arg_text(1500), "1500");
        assert_eq!(arg_text(0), "0");
        assert_eq!(arg_text(-1i64 as u64), "-1");
        assert_eq!(arg_text(0x7ffd_5e2c_1a40), "0x7ffd5e2c1a40");
        assert_eq!(arg_text(0x404000), "0x404000");
    }

    #[test]
    fn integers_read_as_their_type() {
        assert_eq!(ArgValue::int(0xffff_ffff, 4, true), ArgValue::Signed(-1));
        assert_eq!(
            ArgValue::int(0xdead_0000_0005, 4, true),
            ArgValue::Signed(5)
        );
        assert_eq!(ArgValue::int(u64::MAX, 1, false), ArgValue::Unsigned(255));
        assert_eq!(
            ArgValue::int(u64::MAX, 8, false),
            ArgValue::Unsigned(u64::MAX)
        );
        assert_eq!(ArgValue::int(u64::MAX, 8, true), ArgValue::Signed(-1));
        assert_eq!(ArgValue::Pointer(0).text(), "0x0");
    }

    #[test]
    fn compact_shortens_templates_then_parameters() {
        assert_eq!(compact("f(int)", 60), "f(int)");
        let long = "std::__cxx11::basic_string<char, std::char_traits<char>, std::allocator<char> >::_M_dispose()";
        assert_eq!(
            compact(long, 60),
            "std::__cxx11::basic_string<…>::_M_dispose()"
        );
        assert_eq!(
            compact(long, 20),
            "std::__cxx11::basic_string<…>::_M_dispose(…)"
        );
    }
}
