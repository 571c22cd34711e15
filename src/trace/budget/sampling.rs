//! `--max-overhead`'s sampling schedule: a shed site the budget still has
//! some room for is timed in the first share of each [`PERIOD`] (its probes
//! attached for that slice, detached for the rest), and its counts are
//! scaled by its parent's calls over the run against those while it
//! counted, as `perf` scales a multiplexed counter. What to shed and when
//! is decided in `super`; this module only keeps the slices and the
//! scaling.

use std::time::{Duration, Instant};

use super::{Budget, State};
use crate::plan::Plan;
use crate::probe::{ProcessGone, Tracer};
use crate::report::Counts;

/// A sampled site is timed in the first share of each period of this.
/// While any site is sampled, the overhead is estimated once per period,
/// at its start, over the whole period before: a window shorter than a
/// period holds a slice of the sampled sites or none, and its estimate
/// swings with that (a window of 0.1 s that saw a whole slice read 922%
/// where the period cost 300%, and every sampled site was dropped).
pub(super) const PERIOD: Duration = Duration::from_secs(1);
/// What a sampled site costs beyond its share, in shares of the period:
/// its ends linger [`ENDS_LINGER`](super::ENDS_LINGER) after each slice, and the slice ends at
/// the run loop's turn after it is over (50 ms at most). Shares are
/// chosen with this tail; estimates measure the slice and add the linger.
pub(super) const SLICE_TAIL: f64 = 0.15;
/// The ends' linger after each slice, in shares of the period.
const LINGER_SHARE: f64 = 0.1;
/// The least share a site is sampled at: the run loop turns every 50 ms,
/// so a shorter slice would be mostly the loop's rounding. A site the
/// budget has less room for is dropped.
const MIN_SHARE: f64 = 0.05;

/// The share a shed site is sampled at, `share` rounded down to a whole
/// percent, or None (dropped) under [`MIN_SHARE`].
pub(super) fn sample_share(share: f64) -> Option<f64> {
    let whole = (share * 100.0).floor() / 100.0;
    (whole >= MIN_SHARE).then_some(whole)
}

/// The state of a site shed from `was` to be sampled at `share` (None:
/// dropped). A site attached now stays so until its slice says.
pub(super) fn shed_state(was: Option<State>, share: Option<f64>) -> State {
    match share {
        Some(share) => State::Sampled {
            share,
            on: was.is_some_and(|s| s.counting()),
        },
        None => State::Dropped,
    }
}

/// `c` scaled by `f` (> 1): counts and times, the histogram's buckets
/// so that they still add up to the count, and an indirect site's
/// callees so that they still add up to its calls; marked estimated.
fn scale_counts(c: &mut Counts, f: f64) {
    let s = |v: u64| (v as f64 * f).round() as u64;
    let whole = c.hist.buckets.iter().sum::<u64>() == c.count;
    // Each call through the site reached one callee, whether it returned
    // or was left by exception.
    let calls = c.callees.iter().map(|x| x.count).sum::<u64>() == c.count + c.unwound;
    c.count = s(c.count);
    c.total_ns = s(c.total_ns);
    c.unwound = s(c.unwound);
    c.filtered = s(c.filtered);
    c.overflow = s(c.overflow);
    c.indirect_tail = s(c.indirect_tail);
    c.hist_early = s(c.hist_early);
    c.under = s(c.under);
    c.arg_filtered = c.arg_filtered.map(s);
    scale_buckets(&mut c.hist.buckets, f, whole.then_some(c.count));
    let mut per: Vec<u64> = c.callees.iter().map(|x| x.count).collect();
    scale_buckets(&mut per, f, calls.then_some(c.count + c.unwound));
    for (x, n) in c.callees.iter_mut().zip(per) {
        x.count = n;
    }
    c.estimated = true;
    if let Some(cpu) = c.cpu.as_mut() {
        cpu.oncpu_ns = s(cpu.oncpu_ns);
        cpu.blocked_ns = s(cpu.blocked_ns);
        cpu.runq_ns = s(cpu.runq_ns);
        for h in cpu.hist.iter_mut().flatten() {
            scale_buckets(h, f, None);
        }
    }
}

/// `buckets` scaled by `f`, to add up to `total` when given: the
/// remainders go to the buckets that lost the most to rounding down.
fn scale_buckets(buckets: &mut [u64], f: f64, total: Option<u64>) {
    let exact: Vec<f64> = buckets.iter().map(|&b| b as f64 * f).collect();
    let Some(total) = total else {
        for (b, e) in buckets.iter_mut().zip(&exact) {
            *b = e.round() as u64;
        }
        return;
    };
    for (b, e) in buckets.iter_mut().zip(&exact) {
        *b = e.floor() as u64;
    }
    let mut left = total.saturating_sub(buckets.iter().sum());
    let mut order: Vec<usize> = (0..buckets.len()).filter(|&i| exact[i] > 0.0).collect();
    order.sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    for i in order.into_iter().cycle().take(left as usize * 2) {
        if left == 0 {
            break;
        }
        buckets[i] += 1;
        left -= 1;
    }
}

/// What the calls a site counted in its slice of a period stand for in
/// the whole period's cost: `seen` is its parent's calls while it was
/// sampled (enabled) and while it counted (running); its ends' linger
/// after the slice is hit at the rate of the slice.
pub(super) fn period_weight(share: f64, seen: (u64, u64)) -> f64 {
    match seen {
        (0, _) | (_, 0) => 1.0,
        (enabled, running) => {
            // A slice cut short by a late loop is taken as half its share
            // at least.
            let part = (running as f64 / enabled as f64).max(share / 2.0);
            ((part + LINGER_SHARE) / part).min(1.0 / part)
        }
    }
}

impl Budget {
    /// The sampled sites to attach (true) or detach now: their slice of
    /// the period has begun or is over. All slices start with the period,
    /// so a site sampled with the site above it at the same share is
    /// timed while that one is.
    pub(super) fn flips(&self, now: Instant) -> Vec<(u32, bool)> {
        let p = PERIOD.as_secs_f64();
        let phase = now.saturating_duration_since(self.start).as_secs_f64() % p / p;
        self.state
            .iter()
            .filter_map(|(&slot, st)| match *st {
                State::Sampled { share, on } => {
                    let want = phase < share;
                    (want != on).then_some((slot, want))
                }
                _ => None,
            })
            .collect()
    }

    /// Attaches the sampled sites whose slice of the period has begun and
    /// detaches those whose slice is over.
    pub(super) fn toggle(&mut self, plan: &Plan, now: Instant, tracer: &mut Tracer) {
        let flips = self.flips(now);
        for &(slot, on) in &flips {
            if let Some(State::Sampled { share, .. }) = self.state.get(&slot).copied() {
                self.state.insert(slot, State::Sampled { share, on });
            }
        }
        let off: Vec<u32> = flips.iter().filter(|f| !f.1).map(|f| f.0).collect();
        for &slot in &off {
            tracer.stop_site(plan, slot);
        }
        for slot in off {
            self.detach(tracer, slot, now);
        }
        let on: Vec<u32> = flips.iter().filter(|f| f.1).map(|f| f.0).collect();
        // A process that has exited takes no probes (libbpf would say so
        // for each).
        if !on.is_empty() && !self.clock.alive() {
            return;
        }
        // Every probe first, then the nodes: a site ended by the next
        // one's call opens no frame before that call's probe is in.
        let mut ready = Vec::new();
        for slot in on {
            // Its ends may still linger from its last slice: they stay.
            self.ends_due.retain(|&(_, s)| s != slot);
            match self.attach_probes(plan, tracer, slot) {
                Ok(()) => ready.push(slot),
                Err(e) => self.sampling_failed(slot, e),
            }
        }
        for slot in ready {
            match tracer.time_site(plan, slot) {
                Ok(()) => {
                    self.arming.insert(slot);
                }
                Err(e) => self.sampling_failed(slot, e),
            }
        }
    }

    /// Sampled `slot` could not be attached again: it is dropped (said
    /// unless the process has just exited).
    pub(super) fn sampling_failed(&mut self, slot: u32, e: anyhow::Error) {
        if e.downcast_ref::<ProcessGone>().is_none() {
            eprintln!("tachy: a sampled call site is no longer timed: {e:#}");
        }
        self.state.insert(slot, State::Dropped);
    }

    /// Scales the counts of the call sites sampled since the last report
    /// by the calls of their parent while they were timed or sampled
    /// against those while they were counted (as `perf` scales a
    /// multiplexed counter by time; by time here, a site's slices would
    /// weigh less than their share, its probes slowing its parent while
    /// it is attached). The parent's self time, its total less its
    /// sites', then estimates what it would be with every site timed.
    /// Starts the next window when `reset` (an interval's report). The
    /// traced functions' own counts are never scaled.
    pub fn scale(&mut self, plan: &Plan, counts: &mut [Counts], reset: bool) {
        let items = plan.items.len();
        for (i, &(enabled, running)) in self.window.iter().enumerate() {
            if running >= enabled || running == 0 {
                continue;
            }
            if let Some(c) = counts.get_mut(items + i) {
                scale_counts(c, enabled as f64 / running as f64);
            }
        }
        if reset {
            self.window.iter_mut().for_each(|w| *w = (0, 0));
        }
    }

    /// Whether any site is sampled.
    pub(super) fn any_sampled(&self) -> bool {
        self.state
            .values()
            .any(|s| matches!(s, State::Sampled { .. }))
    }

    /// The sampling period `now` is in, counted from the start.
    pub(super) fn period_of(&self, now: Instant) -> u64 {
        (now.saturating_duration_since(self.start).as_nanos() / PERIOD.as_nanos()) as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaled_buckets_add_up_to_the_scaled_count() {
        let mut b = vec![3, 0, 5, 1];
        scale_buckets(&mut b, 1.0 / 0.3, Some(30));
        assert_eq!(b.iter().sum::<u64>(), 30);
        assert_eq!(b[1], 0);
        assert!(b[2] >= 16 && b[2] <= 17, "{b:?}");
        // Shares are whole percents, none under the least.
        assert_eq!(sample_share(0.456), Some(0.45));
        assert_eq!(sample_share(0.049), None);
    }

    /// A sampled indirect site's callees are scaled with its count, and
    /// still add up to its calls (those left by exception too), however
    /// each rounds; all of it is marked estimated.
    #[test]
    fn scaled_callees_add_up_to_the_scaled_calls() {
        use crate::report::Callee;
        let callee = |name: &str, count| Callee {
            name: name.into(),
            count,
            ..Default::default()
        };
        let mut c = Counts {
            count: 9,
            unwound: 1,
            callees: vec![callee("slow_b", 7), callee("fast_a", 3)],
            ..Default::default()
        };
        scale_counts(&mut c, 1.0 / 0.45);
        assert!(c.estimated);
        assert_eq!((c.count, c.unwound), (20, 2));
        let per: Vec<u64> = c.callees.iter().map(|x| x.count).collect();
        // 15.56 and 6.67: rounded each, 16 and 7 would make 23.
        assert_eq!(per, [15, 7]);
        assert_eq!(per.iter().sum::<u64>(), c.count + c.unwound);
        // Callees that did not add up (a callee not read) are each
        // rounded.
        let mut c = Counts {
            count: 10,
            callees: vec![callee("slow_b", 7), callee("fast_a", 2)],
            ..Default::default()
        };
        scale_counts(&mut c, 1.0 / 0.45);
        let per: Vec<u64> = c.callees.iter().map(|x| x.count).collect();
        assert_eq!((c.count, per), (22, vec![16, 4]));
    }
}
