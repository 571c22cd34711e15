//! `tachy list`: the functions a pattern matches, how each would be
//! probed, and with `--sites` its call sites; system calls and kernel
//! functions by name.

use std::io::Write;

use anyhow::{Context, Result};

use crate::callsites;
use crate::cli::ListSettings;
use crate::kernel;
use crate::plan::{self, HitPrices, ItemKind, Plan};
use crate::report::list as listing;
use crate::resolve::{self, Objects, Scope};
use crate::symbols::Function;
use crate::target;

/// Lists what the patterns of `a` match; 1 when one of several matched
/// nothing.
pub fn list(a: ListSettings) -> Result<i32> {
    let scope = match a.pid {
        Some(pid) => Scope::Process(target::process_maps(pid)?),
        // A bare name: a kernel function, if the kernel has one.
        None => Scope::Files,
    };
    let mut out = std::io::stdout().lock();
    let prices = crate::calibrate::cached_prices();
    let mut calls: Vec<(String, u32)> = Vec::new();
    for spec in a.specs.iter().filter(|s| s.is_syscall()) {
        for (name, nr) in kernel::match_syscalls(spec.pattern.as_str())? {
            if !calls.iter().any(|(_, n)| *n == nr) {
                calls.push((name.to_string(), nr));
            }
        }
    }
    if !calls.is_empty() {
        listing::render_syscalls(&calls, &mut out)?;
    }
    if a.specs.iter().all(|s| s.is_syscall()) {
        return Ok(0);
    }
    // Never freed, as in `latency`.
    let mut objects = std::mem::ManuallyDrop::new(Objects::default());
    // Each pattern on its own: what matched is listed, then what did not
    // is said, and the exit status is 1.
    let mut resolved = resolve::Resolution::default();
    let mut misses: Vec<anyhow::Error> = Vec::new();
    for spec in a.specs.iter().filter(|s| !s.is_syscall()) {
        let one = if spec.is_kernel() {
            // Listing is not tracing: no limit on how many.
            kernel::match_kernel_functions(spec.pattern.as_str()).map(|names| {
                let mut r = resolve::Resolution::default();
                r.kernel.push((spec.pattern.as_str().to_string(), names));
                r
            })
        } else {
            resolve::resolve(std::slice::from_ref(spec), &scope, &mut objects)
        };
        match one {
            Ok(r) => resolved.add(r),
            Err(e) if a.specs.len() > 1 => misses.push(e),
            Err(e) => return Err(e),
        }
    }
    let kernel: Vec<String> = resolved.kernel.into_iter().flat_map(|(_, n)| n).collect();
    listing::render_kernel(&kernel, &mut out)?;
    for r in &resolved.user {
        listing::render_object(&r.obj.display, &r.obj.describe_source(r.source), &mut out)?;
        for f in &r.funcs {
            let sites = match a.sites {
                true => {
                    let decoded = plan::decode_function(&r.obj, f)?;
                    Some(
                        callsites::sites(&decoded, &r.obj)
                            .into_iter()
                            .map(|st| listing::ListedSite {
                                addr: st.addr,
                                kind: st.kind.as_str().to_string(),
                                location: st.location,
                                name: st.name,
                            })
                            .collect(),
                    )
                }
                false => None,
            };
            let listed = listing::ListedFunc {
                name: f.display_name(),
                lang: f.names.lang.as_str().to_string(),
                addr: f.addr,
                size: f.size,
                probes: probing(r, f, prices.as_ref()),
                sites,
                ifunc: f.ifunc.as_ref().map(|i| i.describe()),
            };
            listing::render_func(&listed, &mut out)?;
        }
        for inst in &r.inlined {
            listing::render_func(&instance(r, inst, prices.as_ref()), &mut out)?;
        }
    }
    if misses.is_empty() {
        return Ok(0);
    }
    out.flush()
        .context("cannot write the list to standard output")?;
    for e in &misses {
        eprintln!("tachy: {e:#}");
    }
    Ok(1)
}

/// An inlined instance as listed: how `tachy latency` would time it,
/// planned alone, or why it cannot.
fn instance(
    r: &resolve::Resolved,
    inst: &crate::symbols::elf::inlined::Instance,
    prices: Option<&HitPrices>,
) -> listing::ListedFunc {
    let mut p = Plan::default();
    let enclosing = r
        .obj
        .symbols()
        .ok()
        .and_then(|i| i.function_containing(inst.entry));
    let (name, lang) = match &enclosing {
        Some(f) => (
            plan::inlined::instance_name(inst, f),
            f.names.lang.as_str().to_string(),
        ),
        None => (format!("{} [inlined]", inst.name), "c".to_string()),
    };
    let probes = match p.add_inlined(&r.obj, inst, r.source, false) {
        Ok(Ok(id)) => {
            p.finish();
            let item = &p.items[id as usize];
            let probes = match &item.kind {
                ItemKind::Function(t) => {
                    let prices = prices.filter(|_| p.foreign.is_none());
                    match p.call_price(id, prices) {
                        Some(price) => {
                            Ok(format!("{}  price per call: {price}", t.describe_probes()))
                        }
                        None => Ok(t.describe_probes()),
                    }
                }
                _ => Err("not a function of the object".into()),
            };
            probes
        }
        Ok(Err(why)) => Err(why),
        Err(e) => Err(format!("{e:#}")),
    };
    listing::ListedFunc {
        name,
        lang,
        addr: inst.entry,
        size: inst.ranges.iter().map(|(s, e)| e - s).sum(),
        probes,
        sites: None,
        ifunc: None,
    }
}

/// How `tachy latency` would probe `f`, planned alone, in the plan's words,
/// and what a call costs in probe hits (priced where this machine's prices
/// are known and the code is of this machine).
fn probing(
    r: &resolve::Resolved,
    f: &Function,
    prices: Option<&HitPrices>,
) -> std::result::Result<String, String> {
    let mut p = Plan::default();
    let id = p
        .add_function(&r.obj, f, r.source)
        .map_err(|e| format!("{e:#}"))?;
    p.finish();
    let ItemKind::Function(t) = &p.items[id as usize].kind else {
        return Err("not a function of the object".into());
    };
    let prices = prices.filter(|_| p.foreign.is_none());
    Ok(match p.call_price(id, prices) {
        Some(price) => format!("{}  price per call: {price}", t.describe_probes()),
        None => t.describe_probes(),
    })
}
