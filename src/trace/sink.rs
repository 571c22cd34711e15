//! Where reports go, behind one interface (bpftrace's `src/output/`): the
//! run loop hands each finished report, record and read of the counters to
//! a [`Sink`] chosen once, and each output takes what it writes. Text,
//! JSON and folded stacks go to standard output or the file of `-o`; the
//! flame graph of `--svg` is drawn when tracing ends; `--hlog` logs each
//! interval; `--prometheus`/`--textfile` add up the whole run.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};

use super::assemble::{self, Contributor};
use super::nested;
use super::options::ReportOptions;
use crate::cli::Format;
use crate::export::Exporter;
use crate::plan::Plan;
use crate::report::budget::{self as budget_note, BudgetNote};
use crate::report::groups::KeyValue;
use crate::report::hlog::HlogWriter;
use crate::report::records::{self, Record};
use crate::report::{self, prom, tree, Counts, Report};

/// One report, as the run loop hands it to the sinks.
pub struct Snapshot<'a> {
    pub plan: &'a Plan,
    pub opts: &'a ReportOptions,
    /// The counts, by node id, gathered over `span`.
    pub counts: &'a [Counts],
    pub span: Duration,
    /// `tachy latency`: the report of the functions, groups named.
    pub flat: Option<&'a Report>,
    /// The processes that contributed, when the trace is scoped to several.
    pub who: Option<&'a [Contributor]>,
    /// False for a SIGUSR1 interim report, whose counts the next report
    /// includes again.
    pub interval: bool,
    /// `--max-overhead`: the estimated overhead and the sites shed.
    pub budget: Option<&'a BudgetNote>,
}

/// What one read of the kernel's counters brought.
pub struct Read<'a> {
    /// Fresh counts by node id.
    pub counts: &'a [Counts],
    /// `--by`, when a sink counts groups ([`Sink::counts_groups`]): the
    /// fresh groups as (function id, key values or None for the calls not
    /// grouped, counts).
    pub groups: Vec<(u32, Option<Vec<KeyValue>>, Counts)>,
    /// Records the ring buffer had no room for.
    pub lost: u64,
}

/// An output of `tachy latency` and `tachy nested`. Every call has a
/// default that does nothing, so an output says only what it takes.
pub trait Sink {
    /// The "Tracing ..." line, once the probes are attached.
    fn header(&mut self, _line: &str) -> Result<()> {
        Ok(())
    }
    /// Slow-call records, as they arrive.
    fn records(&mut self, _records: &[Record]) -> Result<()> {
        Ok(())
    }
    /// How many records were lost since the last report.
    fn records_lost(&mut self, _lost: u64) -> Result<()> {
        Ok(())
    }
    /// One report.
    fn report(&mut self, _snap: &Snapshot<'_>) -> Result<()> {
        Ok(())
    }
    /// Whether the sink wants the `--by` groups of each read, named.
    fn counts_groups(&self) -> bool {
        false
    }
    /// Whether the sink wants the counters read now.
    fn due(&self, _now: Instant) -> bool {
        false
    }
    /// One read of the counters (every report's, and those `due` asked).
    fn read(&mut self, _read: &Read<'_>) {}
    /// After each read: `last` when tracing ends.
    fn tick(&mut self, _plan: &Plan, _now: Instant, _last: bool) -> Result<()> {
        Ok(())
    }
    /// Tracing has ended and the last report is out.
    fn finish(&mut self, _plan: &Plan, _opts: &ReportOptions) -> Result<()> {
        Ok(())
    }
}

/// Several sinks as one, called in order.
#[derive(Default)]
pub struct Sinks(pub Vec<Box<dyn Sink>>);

impl Sink for Sinks {
    fn header(&mut self, line: &str) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.header(line))
    }
    fn records(&mut self, records: &[Record]) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.records(records))
    }
    fn records_lost(&mut self, lost: u64) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.records_lost(lost))
    }
    fn report(&mut self, snap: &Snapshot<'_>) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.report(snap))
    }
    fn counts_groups(&self) -> bool {
        self.0.iter().any(|s| s.counts_groups())
    }
    fn due(&self, now: Instant) -> bool {
        self.0.iter().any(|s| s.due(now))
    }
    fn read(&mut self, read: &Read<'_>) {
        self.0.iter_mut().for_each(|s| s.read(read))
    }
    fn tick(&mut self, plan: &Plan, now: Instant, last: bool) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.tick(plan, now, last))
    }
    fn finish(&mut self, plan: &Plan, opts: &ReportOptions) -> Result<()> {
        self.0.iter_mut().try_for_each(|s| s.finish(plan, opts))
    }
}

/// The output the format chose, and `--hlog`'s, opened before any probe
/// is attached: a report file that cannot be written must not cost a run.
pub fn open(
    format: Format,
    path: Option<&PathBuf>,
    hlog: Option<&PathBuf>,
    opts: &ReportOptions,
    ids: usize,
) -> Result<Sinks> {
    let file = match path {
        Some(p) => {
            let f = std::fs::File::create(p)
                .with_context(|| format!("cannot write {}", p.display()))?;
            Some((p.clone(), std::io::BufWriter::new(f)))
        }
        None => None,
    };
    let dest = Dest { file };
    let mut sinks: Vec<Box<dyn Sink>> = Vec::new();
    // The interval log is written before the report of the same interval.
    if let Some(p) = hlog {
        let f =
            std::fs::File::create(p).with_context(|| format!("cannot write {}", p.display()))?;
        let now = SystemTime::now();
        let log = HlogWriter::new(std::io::BufWriter::new(f), now, opts.unit)
            .with_context(|| format!("cannot write {}", p.display()))?;
        sinks.push(Box::new(HlogOutput {
            path: p.clone(),
            log,
            since: now,
        }));
    }
    sinks.push(match format {
        Format::Text => Box::new(TextOutput {
            dest,
            folded: false,
        }),
        Format::Json => Box::new(JsonOutput { dest }),
        Format::Folded => Box::new(TextOutput { dest, folded: true }),
        Format::Svg => Box::new(SvgOutput {
            dest,
            whole: vec![Counts::default(); ids],
        }),
    });
    Ok(Sinks(sinks))
}

/// Standard output, or the file of `-o`.
struct Dest {
    file: Option<(PathBuf, std::io::BufWriter<std::fs::File>)>,
}

impl Dest {
    /// The "Tracing ..." line: with a text report on standard output, on
    /// standard error beside anything else.
    fn header(&mut self, line: &str, text: bool) -> Result<()> {
        if text && self.file.is_none() {
            let mut out = std::io::stdout().lock();
            writeln!(out, "{line}")
                .and_then(|_| out.flush())
                .context("cannot write the report to standard output")?;
        } else {
            eprintln!("{line}");
        }
        Ok(())
    }

    /// Writes records with `draw` (to standard output when `stdout`).
    fn records(
        &mut self,
        stdout: bool,
        draw: impl Fn(&mut dyn Write) -> std::io::Result<()>,
    ) -> Result<()> {
        match &mut self.file {
            Some((path, f)) if !stdout => {
                draw(f)
                    .and_then(|_| f.flush())
                    .with_context(|| format!("cannot write the records to {}", path.display()))?;
            }
            _ => {
                let mut out = std::io::stdout().lock();
                draw(&mut out)
                    .and_then(|_| out.flush())
                    .context("cannot write the records to standard output")?;
            }
        }
        Ok(())
    }

    /// Writes a report with `draw`.
    fn report(&mut self, draw: impl FnOnce(&mut dyn Write) -> std::io::Result<()>) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .map(|(p, f)| (p.as_path(), f as &mut dyn Write));
        report::draw_to(file, draw)
    }
}

/// Records as lines of text.
fn text_records(records: &[Record], mut w: &mut dyn Write) -> std::io::Result<()> {
    records
        .iter()
        .try_for_each(|r| records::render_text(r, &mut w))
}

/// funclatency's table or the nested tree as text, or (`tachy nested
/// --folded`) the tree as folded stacks weighted by self time; records as
/// lines of text either way.
struct TextOutput {
    dest: Dest,
    folded: bool,
}

impl Sink for TextOutput {
    fn header(&mut self, line: &str) -> Result<()> {
        self.dest.header(line, !self.folded)
    }
    fn records(&mut self, records: &[Record]) -> Result<()> {
        self.dest.records(false, |w| text_records(records, w))
    }
    fn records_lost(&mut self, lost: u64) -> Result<()> {
        self.dest
            .records(false, |mut w| records::render_lost_text(lost, &mut w))
    }
    fn report(&mut self, snap: &Snapshot<'_>) -> Result<()> {
        let folded = self.folded;
        self.dest.report(|mut w| match (&snap.opts.tree, snap.who) {
            (Some(t), _) if folded => {
                let report = nested::tree_report(snap.plan, snap.opts, t, snap.counts);
                tree::render_folded(&report, &mut w)
            }
            (None, _) if folded => match snap.flat {
                Some(report) => crate::report::groups::render_folded(report, &mut w),
                None => Ok(()),
            },
            (_, Some(who)) if !folded => {
                text_report(snap, &mut w)?;
                writeln!(w, "{}", assemble::contributors_line(who))
            }
            _ => text_report(snap, w),
        })
    }
}

/// The report as text, after an empty line.
fn text_report(snap: &Snapshot<'_>, mut w: &mut dyn Write) -> std::io::Result<()> {
    match (&snap.opts.tree, snap.flat) {
        (Some(t), flat) => {
            let report = nested::tree_report(snap.plan, snap.opts, t, snap.counts);
            writeln!(w)?;
            tree::render_text(&report, &mut w)?;
            // --by: the traced function's groups, under its tree.
            for g in flat.iter().flat_map(|r| &r.funcs).flat_map(|f| &f.groups) {
                crate::report::groups::render_text(g, report.unit, &mut w)?;
            }
        }
        (None, Some(report)) => {
            writeln!(w)?;
            report::text::render(report, &mut w)?;
        }
        (None, None) => return Ok(()),
    }
    match snap.budget {
        Some(b) => budget_note::render_text(b, w),
        None => Ok(()),
    }
}

/// One JSON object per report and per record, one a line.
struct JsonOutput {
    dest: Dest,
}

impl Sink for JsonOutput {
    fn header(&mut self, line: &str) -> Result<()> {
        self.dest.header(line, false)
    }
    fn records(&mut self, records: &[Record]) -> Result<()> {
        self.dest.records(false, |mut w| {
            records
                .iter()
                .try_for_each(|r| records::render_json(r, &mut w))
        })
    }
    fn records_lost(&mut self, lost: u64) -> Result<()> {
        self.dest
            .records(false, |mut w| records::render_lost_json(lost, &mut w))
    }
    fn report(&mut self, snap: &Snapshot<'_>) -> Result<()> {
        let value = match (&snap.opts.tree, snap.flat) {
            (Some(t), flat) => {
                let report = nested::tree_report(snap.plan, snap.opts, t, snap.counts);
                let mut v = tree::json_value(&report);
                // --by: each traced function's groups, in its root.
                let funcs = flat.iter().flat_map(|r| &r.funcs);
                for (k, f) in funcs.enumerate() {
                    if let (Some(g), Some(root)) = (&f.groups, v["roots"].get_mut(k)) {
                        crate::report::groups::json_fields(g, report.unit, root);
                    }
                }
                v
            }
            (None, Some(report)) => report::json::value(report),
            (None, None) => return Ok(()),
        };
        let mut value = match snap.who {
            Some(who) => assemble::with_contributors(value, who),
            None => value,
        };
        if let Some(b) = snap.budget {
            value["overhead"] = budget_note::json_value(b);
        }
        self.dest.report(|w| {
            serde_json::to_writer(&mut *w, &value)?;
            writeln!(w)
        })
    }
}

/// `--svg`: the flame graph of the whole run, drawn when tracing ends;
/// records go to standard output meanwhile.
struct SvgOutput {
    dest: Dest,
    /// The counts of the whole run.
    whole: Vec<Counts>,
}

impl Sink for SvgOutput {
    fn header(&mut self, line: &str) -> Result<()> {
        self.dest.header(line, false)
    }
    fn records(&mut self, records: &[Record]) -> Result<()> {
        self.dest.records(true, |w| text_records(records, w))
    }
    fn records_lost(&mut self, lost: u64) -> Result<()> {
        self.dest
            .records(true, |mut w| records::render_lost_text(lost, &mut w))
    }
    fn report(&mut self, snap: &Snapshot<'_>) -> Result<()> {
        if snap.interval {
            for (w, c) in self.whole.iter_mut().zip(snap.counts) {
                w.merge(c);
            }
        }
        Ok(())
    }
    fn finish(&mut self, plan: &Plan, opts: &ReportOptions) -> Result<()> {
        let (Some((path, f)), Some(t)) = (&mut self.dest.file, &opts.tree) else {
            return Ok(());
        };
        let report = nested::tree_report(plan, opts, t, &self.whole);
        tree::render_svg(&report, f)
            .and_then(|_| f.flush())
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!("tachy: flame graph written to {}", path.display());
        Ok(())
    }
}

/// `--hlog`: each interval's histograms in an HdrHistogram interval log.
struct HlogOutput {
    path: PathBuf,
    log: HlogWriter<std::io::BufWriter<std::fs::File>>,
    /// When the next interval began.
    since: SystemTime,
}

impl Sink for HlogOutput {
    fn header(&mut self, _line: &str) -> Result<()> {
        // The first interval begins now that the probes are attached.
        self.since = SystemTime::now();
        Ok(())
    }
    fn report(&mut self, snap: &Snapshot<'_>) -> Result<()> {
        if !snap.interval {
            return Ok(());
        }
        let report = assemble::hlog_report(snap.plan, snap.opts, snap.counts, snap.span);
        self.log
            .write(&report, self.since)
            .with_context(|| format!("cannot write {}", self.path.display()))?;
        self.since = report.time;
        Ok(())
    }
}

/// `--prometheus`, `--textfile`: everything since tracing began, published
/// on the exporter's schedule and when tracing ends.
pub struct MetricsOutput {
    exporter: Exporter,
    /// The user's labels.
    labels: Vec<(String, String)>,
    cumulative: Vec<Counts>,
    /// `--by`: the groups since tracing began.
    groups: Option<prom::GroupTally>,
    /// `--record-slower-than`: the records since tracing began.
    records: Option<prom::RecordCounts>,
}

impl MetricsOutput {
    /// Starts serving (or writing) zeros: a busy port or an unwritable
    /// textfile is found before any probe is attached.
    pub fn start(
        plan: &Plan,
        e: &crate::cli::ExportSettings,
        opts: &ReportOptions,
        recording: bool,
    ) -> Result<MetricsOutput> {
        let cumulative = vec![Counts::default(); plan.ids() as usize];
        let records = recording.then(|| prom::RecordCounts {
            labels: e.labels.clone(),
            ..Default::default()
        });
        let series = assemble::metric_series(plan, &e.labels, &cumulative, None);
        let initial = prom::render_openmetrics(&series, records.as_ref());
        let exporter = Exporter::start(e.listen, e.textfile.as_deref(), e.every, initial)?;
        let groups = (!opts.by.is_empty()).then(|| {
            prom::GroupTally::new(
                opts.by_names(),
                opts.top.unwrap_or(prom::DEFAULT_GROUP_SERIES),
            )
        });
        Ok(MetricsOutput {
            exporter,
            labels: e.labels.clone(),
            cumulative,
            groups,
            records,
        })
    }

    /// Where `/metrics` is served, if it is.
    pub fn address(&self) -> Option<std::net::SocketAddr> {
        self.exporter.address()
    }
}

impl Sink for MetricsOutput {
    fn records(&mut self, records: &[Record]) -> Result<()> {
        if let Some(m) = self.records.as_mut() {
            m.recorded += records.len() as u64;
        }
        Ok(())
    }
    fn counts_groups(&self) -> bool {
        self.groups.is_some()
    }
    fn due(&self, now: Instant) -> bool {
        self.exporter.due(now)
    }
    fn read(&mut self, read: &Read<'_>) {
        for (c, n) in self.cumulative.iter_mut().zip(read.counts) {
            c.merge(n);
        }
        if let Some(tally) = self.groups.as_mut() {
            tally.add(read.groups.clone());
        }
        if let Some(m) = self.records.as_mut() {
            m.lost += read.lost;
        }
    }
    fn tick(&mut self, plan: &Plan, now: Instant, last: bool) -> Result<()> {
        if !(self.exporter.due(now) || last) {
            return Ok(());
        }
        let series =
            assemble::metric_series(plan, &self.labels, &self.cumulative, self.groups.as_ref());
        let om = prom::render_openmetrics(&series, self.records.as_ref());
        self.exporter.publish(om, now, last)
    }
}
