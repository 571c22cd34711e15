//! What `--max-overhead` did in a run: the overhead tachy estimated, the
//! call sites it shed to keep within the budget (when, why, dropped or
//! timed in a share of each second), and whether the traced functions'
//! own probes alone were over it, and the sites held back at the start
//! (timed from a later moment on, or not at all). Rendered as lines after
//! the text report and as the `overhead` object of a JSON report.

use std::io::{self, Write};

use serde_json::{json, Value};

/// The overhead budget of a run, as its reports say it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct BudgetNote {
    /// `--max-overhead`, in percent of the traced threads' time.
    pub max_pct: f64,
    /// What the probes added to the traced threads' time over the run so
    /// far, in percent (None: nothing was measured yet).
    pub estimated_pct: Option<f64>,
    /// The call sites shed, in the order they were.
    pub shed: Vec<ShedSite>,
    /// The traced functions' own probes alone were estimated over the
    /// budget (their estimate, in percent): they are never shed.
    pub bare_over: Option<f64>,
    /// The call sites held back at the start: timed from a later moment
    /// on (their counts are from then), or never.
    pub late: Vec<LateSite>,
}

/// A call site held back at the start, until an estimate showed room.
#[derive(Clone, Debug, PartialEq)]
pub struct LateSite {
    pub name: String,
    pub site: Option<String>,
    pub level: u32,
    /// Seconds into the run it was attached at (None: it never was).
    pub from_s: Option<f64>,
}

/// One call site shed to keep within the budget.
#[derive(Clone, Debug, PartialEq)]
pub struct ShedSite {
    /// The site's callee, and its `file:line` when known.
    pub name: String,
    pub site: Option<String>,
    /// Levels below the traced function.
    pub level: u32,
    /// Seconds into the run.
    pub at_s: f64,
    pub why: Why,
    /// None: dropped (not timed from then on); Some(share): timed in this
    /// share of each second, its counts scaled up by its inverse.
    pub sampled: Option<f64>,
}

/// Why a call site was shed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Why {
    /// The estimated overhead (percent) crossed the budget.
    Estimate(f64),
    /// The site it is under was shed: its probes time nothing without it.
    WithParent,
}

impl ShedSite {
    fn label(&self) -> String {
        match &self.site {
            Some(s) => format!("{}  {s}", self.name),
            None => self.name.clone(),
        }
    }
}

/// The lines after the text report.
pub fn render_text(n: &BudgetNote, w: &mut dyn Write) -> io::Result<()> {
    let est = match n.estimated_pct {
        Some(p) => format!("~{p:.1}%"),
        None => "not measured yet".into(),
    };
    writeln!(
        w,
        "overhead: {est} of the traced threads' time, estimated (--max-overhead {}%)",
        trim(n.max_pct)
    )?;
    if let Some(p) = n.bare_over {
        writeln!(
            w,
            "  the traced function's own probes alone cost ~{p:.1}%, over the budget: never shed, it is still timed"
        )?;
    }
    // Sites shed with the site they are under are counted, one line per
    // moment and action (a drop at depth 2 can take hundreds with it);
    // the JSON report names each.
    let mut under: Vec<(String, u64, usize)> = Vec::new();
    // Sites shed together by one estimate (a level of 20 leaves, say)
    // are one line past a few.
    let mut together: Vec<(String, String, Vec<&ShedSite>)> = Vec::new();
    for s in &n.shed {
        let what = shed_what(s.sampled);
        let why = match s.why {
            Why::WithParent => {
                let tenth = (s.at_s * 10.0).round() as u64;
                match under.iter_mut().find(|(w, t, _)| *w == what && *t == tenth) {
                    Some(u) => u.2 += 1,
                    None => under.push((what, tenth, 1)),
                }
                continue;
            }
            Why::Estimate(p) => format!("estimated {p:.1}% > {}%", trim(n.max_pct)),
        };
        match together.last_mut() {
            Some((w, y, g)) if *w == what && *y == why && g[0].at_s == s.at_s => g.push(s),
            _ => together.push((what, why, vec![s])),
        }
    }
    for (what, why, g) in together {
        let at = g[0].at_s;
        if g.len() <= 3 {
            for s in g {
                writeln!(w, "  {what} at {at:.1} s ({why}): {}", s.label())?;
            }
            continue;
        }
        let names: Vec<&str> = g.iter().map(|s| s.name.as_str()).collect();
        writeln!(
            w,
            "  {what} at {at:.1} s ({why}): {} call sites: {}",
            g.len(),
            names.join(", ")
        )?;
    }
    for (what, tenth, k) in under {
        writeln!(
            w,
            "  {what} at {:.1} s with the sites above them: {k} call site{} under them",
            tenth as f64 / 10.0,
            if k == 1 { "" } else { "s" }
        )?;
    }
    render_sampled(n, w)?;
    render_late(n, w)
}

/// How a site was shed: "dropped", or "sampled S% of each second".
fn shed_what(sampled: Option<f64>) -> String {
    match sampled {
        Some(share) => format!("sampled {}% of each second", trim((share * 100.0).round())),
        None => "dropped".into(),
    }
}

/// Where any site was sampled, what became of the shed sites last: how
/// many are sampled at each share (their counts scaled up by its
/// inverse) and how many were dropped.
fn render_sampled(n: &BudgetNote, w: &mut dyn Write) -> io::Result<()> {
    if n.shed.iter().all(|s| s.sampled.is_none()) {
        return Ok(());
    }
    let mut last: Vec<&ShedSite> = Vec::new();
    for s in &n.shed {
        last.retain(|l| (&l.name, &l.site, l.level) != (&s.name, &s.site, s.level));
        last.push(s);
    }
    let mut by: Vec<(String, usize)> = Vec::new();
    for s in &last {
        let what = shed_what(s.sampled);
        match by.iter_mut().find(|(w, _)| *w == what) {
            Some(b) => b.1 += 1,
            None => by.push((what, 1)),
        }
    }
    by.sort_by(|a, b| {
        (a.0 == "dropped")
            .cmp(&(b.0 == "dropped"))
            .then(b.0.cmp(&a.0))
    });
    let parts: Vec<String> = by
        .iter()
        .map(|(what, k)| {
            let s = if *k == 1 { "" } else { "s" };
            format!("{k} call site{s} {what}")
        })
        .collect();
    writeln!(
        w,
        "  at the end: {} (a sampled site's counts are scaled up by the inverse of its share)",
        parts.join(", ")
    )
}

/// The lines of the sites held back at the start: how many were attached
/// at each moment (counted from then on), and how many never were.
fn render_late(n: &BudgetNote, w: &mut dyn Write) -> io::Result<()> {
    let plural = |k: usize| if k == 1 { "" } else { "s" };
    let mut at: Vec<(u64, usize)> = Vec::new();
    let mut never = 0;
    for l in &n.late {
        match l.from_s {
            Some(s) => {
                let tenth = (s * 10.0).round() as u64;
                match at.iter_mut().find(|(t, _)| *t == tenth) {
                    Some(a) => a.1 += 1,
                    None => at.push((tenth, 1)),
                }
            }
            None => never += 1,
        }
    }
    for (tenth, k) in at {
        writeln!(
            w,
            "  timed from {:.1} s on, when an estimate showed room (their counts start then): {k} call site{} held back at the start",
            tenth as f64 / 10.0,
            plural(k)
        )?;
    }
    if never > 0 {
        writeln!(
            w,
            "  not timed: {never} call site{} held back at the start, never within the budget (--max-overhead 0 times them all)",
            plural(never)
        )?;
    }
    Ok(())
}

/// A percentage as given: no decimals when it has none.
fn trim(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v}")
    }
}

/// The `overhead` object of a JSON report.
pub fn json_value(n: &BudgetNote) -> Value {
    json!({
        "max_pct": n.max_pct,
        "estimated_pct": n.estimated_pct,
        "bare_over_pct": n.bare_over,
        "shed": n.shed.iter().map(|s| json!({
            "name": s.name,
            "site": s.site,
            "level": s.level,
            "at_s": s.at_s,
            "why": match s.why {
                Why::Estimate(_) => "estimate",
                Why::WithParent => "with_parent",
            },
            "estimated_pct": match s.why { Why::Estimate(p) => Some(p), _ => None },
            "action": if s.sampled.is_some() { "sampled" } else { "dropped" },
            "share": s.sampled,
        })).collect::<Vec<_>>(),
        "late": n.late.iter().map(|l| json!({
            "name": l.name,
            "site": l.site,
            "level": l.level,
            "from_s": l.from_s,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_names_each_shed_site_when_and_why() {
        let n = BudgetNote {
            max_pct: 10.0,
            estimated_pct: Some(8.25),
            shed: vec![
                ShedSite {
                    name: "leaf".into(),
                    site: Some("budget.c:40".into()),
                    level: 2,
                    at_s: 1.02,
                    why: Why::Estimate(312.44),
                    sampled: None,
                },
                ShedSite {
                    name: "mid".into(),
                    site: None,
                    level: 1,
                    at_s: 2.0,
                    why: Why::Estimate(12.0),
                    sampled: Some(0.25),
                },
                ShedSite {
                    name: "leaf2".into(),
                    site: Some("budget.c:52".into()),
                    level: 3,
                    at_s: 1.02,
                    why: Why::WithParent,
                    sampled: None,
                },
                ShedSite {
                    name: "leaf3".into(),
                    site: Some("budget.c:53".into()),
                    level: 3,
                    at_s: 1.02,
                    why: Why::WithParent,
                    sampled: None,
                },
            ],
            bare_over: None,
            late: vec![
                LateSite {
                    name: "deep".into(),
                    site: None,
                    level: 2,
                    from_s: Some(0.31),
                },
                LateSite {
                    name: "deeper".into(),
                    site: None,
                    level: 3,
                    from_s: None,
                },
            ],
        };
        let mut out = Vec::new();
        render_text(&n, &mut out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "overhead: ~8.2% of the traced threads' time, estimated (--max-overhead 10%)\n  dropped at 1.0 s (estimated 312.4% > 10%): leaf  budget.c:40\n  sampled 25% of each second at 2.0 s (estimated 12.0% > 10%): mid\n  dropped at 1.0 s with the sites above them: 2 call sites under them\n  at the end: 1 call site sampled 25% of each second, 3 call sites dropped (a sampled site's counts are scaled up by the inverse of its share)\n  timed from 0.3 s on, when an estimate showed room (their counts start then): 1 call site held back at the start\n  not timed: 1 call site held back at the start, never within the budget (--max-overhead 0 times them all)\n"
        );
        assert_eq!(v_late(&n), (Some(0.31), None));
        let v = json_value(&n);
        assert_eq!(v["shed"][0]["action"], "dropped");
        assert_eq!(v["shed"][1]["share"], 0.25);
        assert_eq!(v["shed"][3]["name"], "leaf3");
        assert_eq!(v["shed"][3]["why"], "with_parent");
        assert_eq!(v["max_pct"], 10.0);
    }

    #[test]
    fn sites_shed_together_are_one_line_past_three_and_the_end_is_summed_up() {
        let site = |name: &str, at_s: f64, sampled| ShedSite {
            name: name.into(),
            site: Some("b.c:9".into()),
            level: 2,
            at_s,
            why: Why::Estimate(120.0),
            sampled,
        };
        let mut shed: Vec<ShedSite> = (0..4)
            .map(|k| site(&format!("leaf{k}"), 0.1, Some(0.72)))
            .collect();
        shed.extend((0..4).map(|k| site(&format!("leaf{k}"), 2.0, Some(0.5))));
        shed.push(site("leaf3", 3.0, None));
        let n = BudgetNote {
            max_pct: 100.0,
            estimated_pct: Some(91.9),
            shed,
            ..Default::default()
        };
        let mut out = Vec::new();
        render_text(&n, &mut out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            String::from_utf8_lossy(&out),
            "overhead: ~91.9% of the traced threads' time, estimated (--max-overhead 100%)\n  sampled 72% of each second at 0.1 s (estimated 120.0% > 100%): 4 call sites: leaf0, leaf1, leaf2, leaf3\n  sampled 50% of each second at 2.0 s (estimated 120.0% > 100%): 4 call sites: leaf0, leaf1, leaf2, leaf3\n  dropped at 3.0 s (estimated 120.0% > 100%): leaf3  b.c:9\n  at the end: 3 call sites sampled 50% of each second, 1 call site dropped (a sampled site's counts are scaled up by the inverse of its share)\n"
        );
    }

    fn v_late(n: &BudgetNote) -> (Option<f64>, Option<f64>) {
        let v = json_value(n);
        (
            v["late"][0]["from_s"].as_f64(),
            v["late"][1]["from_s"].as_f64(),
        )
    }
}
