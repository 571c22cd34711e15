//! A traced Go function: an entry probe, a probe on each `ret`, and one on
//! the prologue's call to `runtime.morestack`; never a uretprobe. Frames are
//! kept per goroutine on the BPF side (see `ProbeKind::Go`).

use anyhow::{bail, Context, Result};

use super::function::{choose_entry, entry_of, ExitMode, ExitSummary};
use super::{GoProbe, Plan, ProbeKind};
use crate::callsites::{Site, SiteKind};
use crate::disasm::Target;
use crate::symbols::{ElfObject, Function, Pattern, SymSource};

/// Why a Go function never gets a uretprobe, as tachy says it when
/// `--uretprobe` is given.
pub const NOT_URETPROBE: &str = "a uretprobe replaces the return address on the stack, and the Go runtime, which walks and copies goroutine stacks as they grow, kills the program when it meets one it does not know";

/// Function of the Go runtime where a goroutine ends (after it returned,
/// or called `runtime.Goexit`).
const GOEXIT: &str = "runtime.goexit1";

impl Plan {
    /// Adds a Go function as item `id`: its entry, its `ret`s and its calls
    /// to `runtime.morestack`, and once per object the end of goroutines.
    pub(super) fn add_go_function(
        &mut self,
        obj: &ElfObject,
        object: usize,
        f: &Function,
        source: SymSource,
    ) -> Result<u32> {
        let id = self.items.len() as u32;
        let go = obj
            .go()
            .with_context(|| format!("{} is not a Go binary", obj.display.display()))?;
        if let Err(why) = go.g_in_r14() {
            bail!(
                "cannot time the Go function {} of {}: {why}",
                f.display_name(),
                obj.display.display()
            );
        }
        let decoded = super::decode_function(obj, f)?;
        let index = obj.symbols()?;
        let named = |a: u64| index.name_starting_at(a).is_some();
        let entry = entry_of(obj, f, &decoded, &named)?;
        // Go code leaves a function only by `ret`: its one jump out is the
        // jump back to the entry after morestack.
        if let Some(t) = decoded
            .tails
            .iter()
            .find(|t| !matches!(t.target, Target::Direct(a) if a == f.addr))
        {
            bail!(
                "{} leaves by a jump at +{:#x}, which tachy does not follow in Go code",
                f.display_name(),
                t.addr - f.addr
            );
        }
        let go_probe = |kind, sp_adjust| ProbeKind::Go {
            id,
            kind,
            sp_adjust,
        };
        self.push(
            obj,
            object,
            entry.addr,
            go_probe(GoProbe::Entry, entry.sp_offset),
        )?;
        for &r in &decoded.rets {
            self.push(obj, object, r, go_probe(GoProbe::Ret, 0))?;
        }
        // The prologue calls morestack with SP as at the entry.
        for c in &decoded.calls {
            if let Target::Direct(a) = c.target {
                if index
                    .name_starting_at(a)
                    .is_some_and(|n| n.starts_with("runtime.morestack"))
                {
                    self.push(obj, object, c.addr, go_probe(GoProbe::Morestack, 0))?;
                }
            }
        }
        self.add_goexit(obj, object)?;
        // Where runtime.g keeps its stack bounds and goid: one layout for
        // every Go function of the plan (one Go runtime per process).
        let layout = obj
            .go_layout()
            .with_context(|| format!("{} is not a Go binary", obj.display.display()))?;
        match self.go_layout {
            None => self.go_layout = Some(layout),
            Some(l) if (l.stack_lo, l.stack_hi, l.goid) != (layout.stack_lo, layout.stack_hi, layout.goid) => bail!(
                "{} lays out runtime.g unlike the Go binary traced before it; trace one Go binary at a time",
                obj.display.display()
            ),
            Some(_) => {}
        }
        let exits = ExitSummary {
            why_rets: Some(layout.describe(go.version.as_deref())),
            internal_jumps: decoded.internal_jumps.len(),
            unchecked_jumps: decoded.checked_jumps.len(),
            ..ExitSummary::new(ExitMode::Go, decoded.rets.len())
        };
        self.push_function_item(obj, object, f, source, entry, exits);
        Ok(id)
    }

    /// A probe where the goroutines of `obj` end, once per object: frames
    /// they left open were left by `runtime.Goexit` or a panic.
    fn add_goexit(&mut self, obj: &ElfObject, object: usize) -> Result<()> {
        if self.probes.iter().any(|p| {
            p.object == object
                && matches!(
                    p.kind,
                    ProbeKind::Go {
                        kind: GoProbe::Goexit,
                        ..
                    }
                )
        }) {
            return Ok(());
        }
        let index = obj.symbols()?;
        let Some(g) = index
            .find(&Pattern::parse(GOEXIT)?)
            .into_iter()
            .find(|g| g.raw == GOEXIT)
        else {
            // Frames left open by a goroutine that ends are then counted
            // when another goroutine reuses its g.
            return Ok(());
        };
        let decoded = super::decode_function(obj, &g)?;
        let named = |a: u64| index.name_starting_at(a).is_some();
        if let Some(e) = choose_entry(&decoded, &named) {
            self.push(
                obj,
                object,
                e.addr,
                ProbeKind::Go {
                    id: 0,
                    kind: GoProbe::Goexit,
                    sp_adjust: e.sp_offset,
                },
            )?;
        }
        Ok(())
    }
}

/// Whether a call site of Go code belongs to the stack-check prologue: the
/// call to `runtime.morestack` (the function starts again from its entry
/// once the stack has grown) and the jump back to the entry after it. Go
/// code has no other jump out of a function.
pub(super) fn prologue_site(site: &Site) -> bool {
    site.kind == SiteKind::Tail
        || site
            .callee_raw
            .as_deref()
            .is_some_and(|n| n.starts_with("runtime.morestack"))
}

/// Whether a function of the Go runtime that Go code calls never returns
/// to its caller: it panics, throws, or ends the goroutine. A call site of
/// one opens a frame that only a recovery or the goroutine's end closes,
/// as left by panic.
pub(super) fn never_returns(shown: &str) -> bool {
    const PREFIXES: [&str; 6] = [
        "runtime.gopanic",
        "runtime.panic",
        "runtime.goPanic",
        "runtime.throw",
        "runtime.fatal",
        "runtime.Goexit",
    ];
    PREFIXES.iter().any(|p| shown.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(kind: SiteKind, callee: Option<&str>) -> Site {
        Site {
            addr: 0x1000,
            ret: (kind != SiteKind::Tail).then_some(0x1005),
            kind,
            callee: Some(0x2000),
            callee_raw: callee.map(String::from),
            name: callee.unwrap_or("*indirect").to_string(),
            location: None,
        }
    }

    /// The stack check's call and jump back are not sites; calls in the
    /// body, direct or not, are.
    #[test]
    fn the_prologue_is_not_a_call_site() {
        assert!(prologue_site(&site(
            SiteKind::Call,
            Some("runtime.morestack_noctxt.abi0")
        )));
        assert!(prologue_site(&site(
            SiteKind::Call,
            Some("runtime.morestack")
        )));
        assert!(prologue_site(&site(SiteKind::Tail, Some("main.work"))));
        assert!(!prologue_site(&site(SiteKind::Call, Some("main.spin"))));
        assert!(!prologue_site(&site(SiteKind::Indirect, None)));
    }

    #[test]
    fn panics_and_throws_never_return() {
        for n in [
            "runtime.gopanic",
            "runtime.panicIndex",
            "runtime.panicdivide",
            "runtime.throw",
            "runtime.fatalpanic",
            "runtime.Goexit",
        ] {
            assert!(never_returns(n), "{n}");
        }
        for n in ["runtime.deferreturn", "main.mayPanic", "runtime.mcall"] {
            assert!(!never_returns(n), "{n}");
        }
    }
}
