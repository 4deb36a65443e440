//! When requests were made, for the ages that reports show.
//!
//! Request ids grow with time, so the engine notes a mark (a request id and
//! the time it was made) only when its clock has moved by a resolution
//! since the last mark: a request was made at or after the time of the last
//! mark at or below its id, and less than a resolution after it. A map of
//! every live request to its birth would cost two hash operations per
//! request on the message path; the marks cost a comparison.
//!
//! The marks are bounded: when they fill up, those older than every
//! pending request go (no report will ask their ages). Only if many are
//! left (a request pending for long) does the resolution grow, the marks
//! it makes needless going too, every age staying within it.

use std::collections::VecDeque;
use std::time::Duration;

use crate::ReqId;

/// The birth times of requests, to within [`Births::resolution`].
#[derive(Debug)]
pub(super) struct Births {
    /// `(first request made at or after the time, time)`, both increasing.
    marks: VecDeque<(ReqId, Duration)>,
    resolution: Duration,
}

impl Default for Births {
    fn default() -> Self {
        Self {
            marks: VecDeque::new(),
            resolution: Self::FIRST_RESOLUTION,
        }
    }
}

impl Births {
    /// The resolution before the marks first fill up.
    const FIRST_RESOLUTION: Duration = Duration::from_millis(1);
    /// Most marks kept.
    const MOST_MARKS: usize = 1024;

    /// Notes that `req`, an id above all noted before, was made at `now`.
    /// Call [`Self::make_room`] first when [`Self::is_full`].
    pub(super) fn note(&mut self, req: ReqId, now: Duration) {
        if let Some(&(_, last)) = self.marks.back()
            && now < last.saturating_add(self.resolution)
        {
            return;
        }
        self.marks.push_back((req, now));
        if self.marks.len() > Self::MOST_MARKS {
            self.coarsen();
        }
    }

    /// Whether the marks are full: [`Self::make_room`] before noting.
    pub(super) fn is_full(&self) -> bool {
        self.marks.len() >= Self::MOST_MARKS
    }

    /// Drops the marks before the one that covers `oldest_pending` (the
    /// oldest request a report may ask about; `None` when none is
    /// pending), then coarsens if too many are left.
    pub(super) fn make_room(&mut self, oldest_pending: Option<ReqId>) {
        let covering = match oldest_pending {
            Some(req) => self.marks.partition_point(|&(first, _)| first <= req),
            None => self.marks.len(),
        };
        // The last mark stays: it covers the requests made after it.
        let drop = covering
            .saturating_sub(1)
            .min(self.marks.len().saturating_sub(1));
        self.marks.drain(..drop);
        self.coarsen();
    }

    /// When `req` was made, to within the resolution (none if it was made
    /// before the first mark, which only a request made before any time
    /// was given can be).
    pub(super) fn born(&self, req: ReqId) -> Option<Duration> {
        let after = self.marks.partition_point(|&(first, _)| first <= req);
        after.checked_sub(1).map(|i| self.marks[i].1)
    }

    /// How far from the truth [`Self::born`] may be.
    #[cfg(test)]
    fn resolution(&self) -> Duration {
        self.resolution
    }

    /// Makes the resolution four times coarser, and drops the marks it
    /// makes needless, until at most half the marks are left. A mark
    /// goes when every request it covers (made less than the old
    /// resolution after it) is within the new resolution of the mark kept
    /// before it, which then covers them.
    fn coarsen(&mut self) {
        while self.marks.len() > Self::MOST_MARKS / 2 {
            let old = self.resolution;
            let new = old.saturating_mul(4);
            self.resolution = new;
            let mut kept: Option<Duration> = None;
            self.marks.retain(|&(_, time)| match kept {
                Some(at) if time.saturating_add(old) <= at.saturating_add(new) => false,
                _ => {
                    kept = Some(time);
                    true
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// 100 000 requests, one every 700 µs: a long busy run.
    fn every_700_us() -> Vec<(ReqId, Duration)> {
        (0..100_000u64)
            .map(|i| (ReqId(i + 1), Duration::from_micros(i * 700)))
            .collect()
    }

    #[test]
    fn a_birth_is_known_to_within_the_resolution() {
        let mut births = Births::default();
        let made = [(1, ms(0)), (2, ms(0)), (3, ms(2)), (4, ms(2)), (9, ms(7))];
        for &(req, at) in &made {
            births.note(ReqId(req), at);
        }
        for &(req, at) in &made {
            let born = births.born(ReqId(req)).expect("noted");
            assert!(born <= at && at < born + births.resolution(), "{req}");
        }
        // Ids between noted ones were made between their times.
        assert_eq!(births.born(ReqId(6)), Some(ms(2)));
        assert_eq!(births.born(ReqId(0)), None);
    }

    #[test]
    fn marks_stay_bounded_and_ages_within_the_coarser_resolution() {
        let mut births = Births::default();
        let made = every_700_us();
        for &(req, at) in &made {
            births.note(req, at);
        }
        assert!(births.marks.len() <= Births::MOST_MARKS);
        assert!(births.resolution() > Births::FIRST_RESOLUTION);
        for &(req, at) in made.iter().step_by(997) {
            let born = births.born(req).expect("noted");
            assert!(born <= at, "{req} born after it was made");
            assert!(at < born + births.resolution(), "{req} off by more");
        }
    }

    #[test]
    fn marks_older_than_every_pending_request_go_first() {
        let mut births = Births::default();
        let made = every_700_us();
        // Requests complete soon after they are made: the oldest pending
        // one is at most 100 requests old.
        for &(req, at) in &made {
            if births.is_full() {
                births.make_room(Some(ReqId(req.0.saturating_sub(100).max(1))));
            }
            births.note(req, at);
        }
        assert!(births.marks.len() <= Births::MOST_MARKS);
        assert_eq!(births.resolution(), Births::FIRST_RESOLUTION);
        for &(req, at) in &made[made.len() - 100..] {
            let born = births.born(req).expect("noted");
            assert!(born <= at && at < born + births.resolution(), "{req}");
        }
        // With nothing pending, only the last mark stays.
        births.make_room(None);
        assert_eq!(births.marks.len(), 1);
        let (last, at) = made[made.len() - 1];
        assert!(births.born(last).is_some_and(|born| born <= at));
    }
}
