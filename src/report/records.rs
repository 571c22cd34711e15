//! Slow-call records of `--record-slower-than`: one per call, printed as
//! it arrives from the kernel, as a line of text or one JSON object per
//! line. Plain data in, bytes out; the session turns the kernel's records
//! into these.
//!
//! Text, one line per call (the time is that of the call's end, local):
//!
//! ```text
//! 14:02:11.204518 pid 4242 tid 4250 (worker-3) db::Table::scan  7.31 ms  on-CPU 420.0 us  blocked 6.80 ms  runnable 90.0 us  args range=0x7ffd5e2c1a40 limit=1500
//!     load_page at table.cc:88  6.90 ms  2 calls
//! ```
//!
//! The indented lines (`tachy nested` only) are the call sites of that one
//! call, in tree order, indented by level. The arguments are the
//! function's first integer and pointer parameters by their DWARF names
//! (integers in decimal as their type reads, pointers in hex), or `arg0`,
//! `arg1`, `arg2` (the first three argument registers) where no DWARF
//! names them; `name=?` is a value that cannot be read at the entry
//! probe (JSON: `"value": null`). `ret=` is the value the call returned,
//! as its return type reads (an enum by name, a system call's errno named:
//! `ret=-11 (EAGAIN)`), where it is known. JSON, one object per line:
//! `{"type": "record", "time": <unix seconds, float>, "pid", "tid", "comm",
//! "function", "duration_ns", "cpu": {"oncpu_ns", "blocked_ns",
//! "runnable_ns"} (with --cpu), "args": [{"name", "value"}], "ret" (the
//! value, where known) and "ret_name" (an enumerator's or errno's), "sites":
//! [{"name", "location", "level", "count", "total_ns"}] (tachy nested),
//! "more_sites", "stack": {"method", "frames": [{"function", "location",
//! "inlined"}]} (--stack)}`. With `--stack` the line is followed by
//! `    stack (frame pointers):` (or `stack copy`) and one line per caller,
//! the nearest first, out to `main`: `      step_b at stacks.c:57`, a
//! function inlined at the call marked `[inlined]`. Before each report a `{"type": "records_lost", "lost":
//! N}` object says how many records the ring buffer had no room for.

use std::io::{self, Write};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Map, Value};

use super::fmt::{clock_us, human, ArgValue, RetValue};

/// One call that took at least the threshold.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Wall-clock time of the call's end.
    pub time: SystemTime,
    pub pid: u32,
    pub tid: u32,
    /// The thread's name at the call's end.
    pub comm: String,
    /// As the report names it.
    pub function: String,
    pub duration_ns: u64,
    /// `--cpu`: on-CPU, blocked and runnable ns (they add up to the
    /// duration).
    pub cpu: Option<[u64; 3]>,
    /// The call's arguments, as the function's DWARF names them (else
    /// `arg0`...), in order.
    pub args: Vec<Arg>,
    /// The value it returned, where the exit knows it and the function
    /// returns one.
    pub ret: Option<RetValue>,
    /// `tachy nested`: what each call site took in this call. `None` where
    /// the call's sites cannot be told apart from those of the traced call
    /// it runs in (a traced function called inside another traced one).
    pub sites: Option<Vec<RecordSite>>,
    /// Sites of the call beyond those the kernel sends.
    pub more_sites: u32,
    /// `--stack`: the call's callers.
    pub stack: Option<Stack>,
}

/// A recorded call's user stack (`--stack`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stack {
    /// How it was taken: `frame pointers` or `stack copy`.
    pub method: &'static str,
    /// The callers, the nearest first, out to `main`.
    pub frames: Vec<StackFrame>,
}

/// One frame of a stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct StackFrame {
    /// The function's demangled name (or `object+0xoffset`).
    pub function: String,
    /// `file.c:12` of the call, where DWARF says.
    pub location: Option<String>,
    /// A function inlined into the frame after it: the call's code is its.
    pub inlined: bool,
}

impl StackFrame {
    /// `step_b at stacks.c:57`, `helper [inlined] at util.h:9`.
    pub fn text(&self) -> String {
        let mut s = self.function.clone();
        if self.inlined {
            s.push_str(" [inlined]");
        }
        if let Some(l) = &self.location {
            s.push_str(" at ");
            s.push_str(l);
        }
        s
    }
}

/// One argument of a recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Arg {
    pub name: String,
    /// None where the value cannot be read at the entry probe.
    pub value: Option<ArgValue>,
}

/// A call site's time within one recorded call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordSite {
    pub name: String,
    pub location: Option<String>,
    /// 1: a site of the traced function; 2: of its callee; ...
    pub level: u32,
    pub count: u32,
    pub ns: u64,
}

pub fn render_text(r: &Record, w: &mut impl Write) -> io::Result<()> {
    write!(
        w,
        "{} pid {} tid {} ({}) {}  {}",
        clock_us(r.time),
        r.pid,
        r.tid,
        r.comm,
        r.function,
        human(r.duration_ns as f64)
    )?;
    if let Some([on, blocked, runq]) = r.cpu {
        write!(
            w,
            "  on-CPU {}  blocked {}  runnable {}",
            human(on as f64),
            human(blocked as f64),
            human(runq as f64)
        )?;
    }
    if !r.args.is_empty() {
        write!(w, "  args")?;
        for a in &r.args {
            match a.value {
                Some(v) => write!(w, " {}={}", a.name, v.text())?,
                None => write!(w, " {}=?", a.name)?,
            }
        }
    }
    if let Some(v) = &r.ret {
        write!(w, "  ret={}", v.text())?;
    }
    writeln!(w)?;
    if let Some(st) = &r.stack {
        writeln!(w, "    stack ({}):", st.method)?;
        for f in &st.frames {
            writeln!(w, "      {}", f.text())?;
        }
    }
    let Some(sites) = &r.sites else {
        return Ok(());
    };
    for s in sites {
        let indent = "  ".repeat(s.level.saturating_sub(1) as usize);
        write!(w, "    {indent}{}", s.name)?;
        if let Some(loc) = &s.location {
            write!(w, " at {loc}")?;
        }
        writeln!(
            w,
            "  {}  {} call{}",
            human(s.ns as f64),
            s.count,
            if s.count == 1 { "" } else { "s" }
        )?;
    }
    if r.more_sites > 0 {
        writeln!(w, "    and {} more sites", r.more_sites)?;
    }
    Ok(())
}

pub fn value(r: &Record) -> Value {
    let mut m = Map::new();
    let time = r.time.duration_since(UNIX_EPOCH).map_or(0.0, |d| {
        d.as_secs() as f64 + f64::from(d.subsec_micros()) / 1e6
    });
    m.insert("type".into(), json!("record"));
    m.insert("time".into(), json!(time));
    m.insert("pid".into(), json!(r.pid));
    m.insert("tid".into(), json!(r.tid));
    m.insert("comm".into(), json!(r.comm));
    m.insert("function".into(), json!(r.function));
    m.insert("duration_ns".into(), json!(r.duration_ns));
    if let Some([on, blocked, runq]) = r.cpu {
        m.insert(
            "cpu".into(),
            json!({"oncpu_ns": on, "blocked_ns": blocked, "runnable_ns": runq}),
        );
    }
    let args: Vec<Value> = r
        .args
        .iter()
        .map(|a| json!({"name": a.name, "value": a.value.map(ArgValue::json)}))
        .collect();
    m.insert("args".into(), Value::Array(args));
    if let Some(v) = &r.ret {
        m.insert("ret".into(), v.json());
        if let Some(n) = v.name() {
            m.insert("ret_name".into(), json!(n));
        }
    }
    if let Some(st) = &r.stack {
        let frames: Vec<Value> = st
            .frames
            .iter()
            .map(|f| json!({"function": f.function, "location": f.location, "inlined": f.inlined}))
            .collect();
        m.insert(
            "stack".into(),
            json!({"method": st.method, "frames": frames}),
        );
    }
    if let Some(sites) = &r.sites {
        let sites: Vec<Value> = sites
            .iter()
            .map(|s| {
                json!({
                    "name": s.name,
                    "location": s.location,
                    "level": s.level,
                    "count": s.count,
                    "total_ns": s.ns,
                })
            })
            .collect();
        m.insert("sites".into(), Value::Array(sites));
        m.insert("more_sites".into(), json!(r.more_sites));
    }
    Value::Object(m)
}

pub fn render_json(r: &Record, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *w, &value(r))?;
    writeln!(w)
}

/// The records the ring buffer had no room for since the last report.
pub fn render_lost_text(lost: u64, w: &mut impl Write) -> io::Result<()> {
    if lost > 0 {
        writeln!(
            w,
            "{lost} record{} lost: calls ended faster than tachy could read them",
            if lost == 1 { "" } else { "s" }
        )?;
    }
    Ok(())
}

pub fn render_lost_json(lost: u64, w: &mut impl Write) -> io::Result<()> {
    serde_json::to_writer(&mut *w, &json!({"type": "records_lost", "lost": lost}))?;
    writeln!(w)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::golden;
    use std::time::Duration;

    fn arg(name: &str, value: Option<ArgValue>) -> Arg {
        Arg {
            name: name.into(),
            value,
        }
    }

    fn sample() -> Vec<Record> {
        // 1_700_000_000.204518 s: the clock's microseconds are printed.
        let time = UNIX_EPOCH + Duration::from_nanos(1_700_000_000_204_518_900);
        let plain = Record {
            time,
            pid: 4242,
            tid: 4250,
            comm: "worker-3".into(),
            function: "db::Table::scan(db::Range const&)".into(),
            duration_ns: 7_310_000,
            cpu: None,
            args: vec![
                arg("this", Some(ArgValue::Pointer(0x7ffd_5e2c_1a40))),
                arg("limit", Some(ArgValue::int(1500, 4, true))),
                arg("delta", Some(ArgValue::int(0xffff_ffff, 4, true))),
                arg("flags", Some(ArgValue::int(u64::MAX, 2, false))),
                arg("gone", None),
            ],
            ret: None,
            sites: None,
            more_sites: 0,
            stack: None,
        };
        let cpu = Record {
            cpu: Some([420_000, 6_800_000, 90_000]),
            ..plain.clone()
        };
        let nested = Record {
            sites: Some(vec![
                RecordSite {
                    name: "db::Page::load(int)".into(),
                    location: Some("table.cc:88".into()),
                    level: 1,
                    count: 2,
                    ns: 6_900_000,
                },
                RecordSite {
                    name: "pread64@plt".into(),
                    location: Some("page.cc:12".into()),
                    level: 2,
                    count: 1,
                    ns: 6_700_000,
                },
                RecordSite {
                    name: "*indirect".into(),
                    location: None,
                    level: 1,
                    count: 1,
                    ns: 900,
                },
            ]),
            more_sites: 3,
            stack: None,
            ret: Some(RetValue::Enum {
                value: 2,
                name: Some("SCAN_PARTIAL".into()),
            }),
            ..plain.clone()
        };
        let syscall = Record {
            function: "syscall:read".into(),
            args: vec![
                arg("arg0", Some(ArgValue::Register(3))),
                arg("arg1", Some(ArgValue::Register(0x5612_0000_1000))),
                arg("arg2", Some(ArgValue::Register(-4i64 as u64))),
            ],
            ret: Some(RetValue::Errno(-11)),
            ..plain.clone()
        };
        vec![plain, cpu, nested, syscall]
    }

    #[test]
    fn golden_text() {
        let mut out = Vec::new();
        for r in sample() {
            render_text(&r, &mut out).unwrap();
        }
        render_lost_text(0, &mut out).unwrap();
        render_lost_text(17, &mut out).unwrap();
        // The time of day depends on the zone; the rest does not.
        let text = String::from_utf8(out).unwrap();
        let clock = clock_us(sample()[0].time);
        assert!(clock.ends_with(":20.204518"), "{clock}");
        let text = text.replace(&clock, "HH:MM:SS.204518");
        golden::check("src/report/golden", "records.txt", text.as_bytes());
    }

    #[test]
    fn golden_json() {
        let mut out = Vec::new();
        for r in sample() {
            render_json(&r, &mut out).unwrap();
        }
        render_lost_json(17, &mut out).unwrap();
        for line in String::from_utf8(out.clone()).unwrap().lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            assert!(v["type"].is_string());
        }
        golden::check("src/report/golden", "records.json", &out);
    }
}
