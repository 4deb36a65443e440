//! The bootstrap of a process started alone: rank 0 of 1.

use crate::local::LocalBootstrap;
use crate::secret::random_job;
use crate::{Bootstrap, BootstrapError, JOB_KEY_LEN};

/// Rank 0 of a job of one, with a fresh random job id and key; put, get
/// and fence work on a store of its own.
#[derive(Clone, Debug)]
pub struct Singleton(LocalBootstrap);

impl Singleton {
    /// A new singleton job.
    pub fn new() -> Result<Self, BootstrapError> {
        let (job_id, job_key) = random_job()?;
        let rank = LocalBootstrap::job(1, job_id, job_key)
            .pop()
            .expect("a job of one has one rank");
        Ok(Self(rank))
    }
}

impl Bootstrap for Singleton {
    fn rank(&self) -> u32 {
        self.0.rank()
    }

    fn size(&self) -> u32 {
        self.0.size()
    }

    fn job_id(&self) -> u64 {
        self.0.job_id()
    }

    fn job_key(&self) -> &[u8; JOB_KEY_LEN] {
        self.0.job_key()
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        self.0.put(key, value)
    }

    fn fence(&self) -> Result<(), BootstrapError> {
        self.0.fence()
    }

    fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        self.0.get(rank, key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_singleton_is_rank_0_of_1_and_sees_its_own_values() {
        let s = Singleton::new().unwrap();
        assert_eq!((s.rank(), s.size()), (0, 1));
        s.put("k", b"v").unwrap();
        s.fence().unwrap();
        assert_eq!(s.get(0, "k").unwrap(), b"v");
        assert!(matches!(s.get(0, "x"), Err(BootstrapError::Missing { .. })));
    }
}
