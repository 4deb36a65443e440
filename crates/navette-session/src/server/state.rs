//! The bootstrap server's shared state: admitted processes, connected
//! ranks, the key-value store and the fence generations. No I/O here; the
//! connection threads lock it, and wait on the server's condition
//! variable for the changes it reports.

use std::collections::HashMap;

use crate::protocol::Reply;

/// Most bytes of keys and values one rank may store.
pub(crate) const MAX_STORED_PER_RANK: usize = 16 << 20;

/// Whether a connecting process may claim a rank.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admission {
    /// Yes.
    Admitted,
    /// Not known (yet): wait while admissions are open.
    Unknown,
    /// No, for this reason.
    Refused(String),
}

/// Where a rank entering a fence stands.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Fence {
    /// Answer now.
    Decided(Reply),
    /// Wait for the generation to change, then [`State::check_fence`].
    Wait(u64),
}

/// See the module documentation.
#[derive(Debug)]
pub(crate) struct State {
    size: u32,
    /// Process id → the ranks it (and its descendants) may claim.
    admitted: HashMap<u32, Vec<u32>>,
    pub(crate) admissions_open: bool,
    connected: Vec<bool>,
    departed: Vec<bool>,
    values: HashMap<(u32, String), Vec<u8>>,
    stored: Vec<usize>,
    generation: u64,
    arrived: Vec<bool>,
    arrived_count: u32,
    pub(crate) shutting_down: bool,
}

impl State {
    pub(crate) fn new(size: u32) -> Self {
        let n = size as usize;
        Self {
            size,
            admitted: HashMap::new(),
            admissions_open: true,
            connected: vec![false; n],
            departed: vec![false; n],
            values: HashMap::new(),
            stored: vec![0; n],
            generation: 0,
            arrived: vec![false; n],
            arrived_count: 0,
            shutting_down: false,
        }
    }

    /// Lets process `pid` and its descendants claim `rank`.
    pub(crate) fn admit(&mut self, rank: u32, pid: u32) {
        self.admitted.entry(pid).or_default().push(rank);
    }

    /// May the process whose ancestry is `lineage` (itself first, then its
    /// parent, …) claim `rank`? The nearest admitted ancestor decides.
    pub(crate) fn admission(&self, lineage: &[u32], rank: u32) -> Admission {
        if rank >= self.size {
            return Admission::Refused(format!("rank {rank} is not below the size {}", self.size));
        }
        for pid in lineage {
            if let Some(ranks) = self.admitted.get(pid) {
                return if ranks.contains(&rank) {
                    Admission::Admitted
                } else {
                    Admission::Refused(format!(
                        "process {pid} was started as rank {ranks:?}, not rank {rank}"
                    ))
                };
            }
        }
        Admission::Unknown
    }

    /// Marks `rank` connected; each rank connects once.
    pub(crate) fn connect(&mut self, rank: u32) -> Result<(), String> {
        let r = rank as usize;
        if self.departed[r] {
            return Err(format!("rank {rank} has left the job"));
        }
        if self.connected[r] {
            return Err(format!("rank {rank} has already connected"));
        }
        self.connected[r] = true;
        Ok(())
    }

    /// `rank`'s connection closed, or its process ended (ranks out of
    /// range are ignored).
    pub(crate) fn depart(&mut self, rank: u32) {
        let r = rank as usize;
        if r >= self.departed.len() {
            return;
        }
        self.connected[r] = false;
        self.departed[r] = true;
    }

    pub(crate) fn put(&mut self, rank: u32, key: String, value: Vec<u8>) -> Reply {
        let r = rank as usize;
        let old = self
            .values
            .get(&(rank, key.clone()))
            .map_or(0, |v| key.len() + v.len());
        let new = self.stored[r] - old + key.len() + value.len();
        if new > MAX_STORED_PER_RANK {
            return Reply::Failed(format!(
                "rank {rank} would store {new} bytes, more than the limit of {MAX_STORED_PER_RANK}"
            ));
        }
        self.stored[r] = new;
        self.values.insert((rank, key), value);
        Reply::Done
    }

    pub(crate) fn get(&self, rank: u32, key: &str) -> Reply {
        if rank >= self.size {
            return Reply::Failed(format!("rank {rank} is not below the size {}", self.size));
        }
        match self.values.get(&(rank, key.to_owned())) {
            Some(value) => Reply::Value(value.clone()),
            None => Reply::Missing,
        }
    }

    /// `rank` enters the current fence.
    pub(crate) fn enter_fence(&mut self, rank: u32) -> Fence {
        let r = rank as usize;
        if self.arrived[r] {
            return Fence::Decided(Reply::Failed(format!(
                "rank {rank} is already in this fence"
            )));
        }
        if let Some(reply) = self.broken_fence() {
            return Fence::Decided(reply);
        }
        self.arrived[r] = true;
        self.arrived_count += 1;
        if self.arrived_count == self.size {
            self.generation += 1;
            self.arrived.fill(false);
            self.arrived_count = 0;
            return Fence::Decided(Reply::Done);
        }
        Fence::Wait(self.generation)
    }

    /// Rechecks a fence `rank` entered in `generation` after a change:
    /// `Some(reply)` once decided.
    pub(crate) fn check_fence(&mut self, rank: u32, generation: u64) -> Option<Reply> {
        if self.generation != generation {
            return Some(Reply::Done);
        }
        let reply = if self.shutting_down {
            Some(Reply::Failed("the launcher is shutting down".into()))
        } else {
            self.broken_fence()
        };
        if reply.is_some() {
            self.arrived[rank as usize] = false;
            self.arrived_count -= 1;
        }
        reply
    }

    /// A fence cannot complete once a rank that has not entered it has
    /// closed its connection.
    fn broken_fence(&self) -> Option<Reply> {
        (0..self.size as usize)
            .find(|&r| self.departed[r] && !self.arrived[r])
            .map(|r| Reply::Failed(format!("rank {r} left the job before this fence")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admission_follows_the_nearest_admitted_ancestor() {
        let mut s = State::new(2);
        s.admit(0, 100);
        s.admit(1, 200);
        assert_eq!(s.admission(&[100, 1], 0), Admission::Admitted);
        assert_eq!(s.admission(&[150, 100, 1], 0), Admission::Admitted);
        assert!(matches!(s.admission(&[100, 1], 1), Admission::Refused(_)));
        assert!(matches!(s.admission(&[100], 2), Admission::Refused(_)));
        assert_eq!(s.admission(&[300, 1], 0), Admission::Unknown);
    }

    #[test]
    fn a_rank_connects_once() {
        let mut s = State::new(2);
        assert!(s.connect(0).is_ok());
        assert_eq!(s.connect(0), Err("rank 0 has already connected".into()));
        s.depart(0);
        assert_eq!(s.connect(0), Err("rank 0 has left the job".into()));
        // A rank whose process ended before it connected has left too.
        s.depart(1);
        assert_eq!(s.connect(1), Err("rank 1 has left the job".into()));
        s.depart(7);
    }

    #[test]
    fn fences_count_per_generation() {
        let mut s = State::new(2);
        let Fence::Wait(generation) = s.enter_fence(0) else {
            panic!("one of two ranks waits");
        };
        assert_eq!(s.check_fence(0, generation), None);
        assert_eq!(s.enter_fence(1), Fence::Decided(Reply::Done));
        assert_eq!(s.check_fence(0, generation), Some(Reply::Done));
        // The next generation starts empty.
        assert_eq!(s.enter_fence(1), Fence::Wait(generation + 1));
        assert!(matches!(s.enter_fence(1), Fence::Decided(Reply::Failed(_))));
    }

    #[test]
    fn a_departed_rank_breaks_the_fence() {
        let mut s = State::new(3);
        s.connect(2).unwrap();
        let Fence::Wait(generation) = s.enter_fence(0) else {
            panic!("one of three ranks waits");
        };
        s.depart(2);
        assert!(matches!(
            s.check_fence(0, generation),
            Some(Reply::Failed(_))
        ));
        assert!(matches!(s.enter_fence(1), Fence::Decided(Reply::Failed(_))));
    }

    #[test]
    fn stores_are_bounded_per_rank() {
        let mut s = State::new(1);
        let value = vec![0; 64 << 10];
        let mut i = 0;
        while s.put(0, format!("k{i}"), value.clone()) == Reply::Done {
            i += 1;
        }
        assert!(i * (64 << 10) <= MAX_STORED_PER_RANK);
        // Overwriting reuses the budget.
        assert_eq!(s.put(0, "k0".into(), value), Reply::Done);
        assert_eq!(s.get(0, "k0"), Reply::Value(vec![0; 64 << 10]));
        assert_eq!(s.get(0, "nope"), Reply::Missing);
    }
}
