//! A bootstrap for ranks that are threads of one process (tests, examples).

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Barrier, Mutex};

use crate::{Bootstrap, BootstrapError, JOB_KEY_LEN};

struct Shared {
    size: u32,
    job_id: u64,
    job_key: [u8; JOB_KEY_LEN],
    values: Mutex<HashMap<(u32, String), Vec<u8>>>,
    barrier: Barrier,
}

impl fmt::Debug for Shared {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Shared")
            .field("size", &self.size)
            .field("job_id", &self.job_id)
            .field("job_key", &"<redacted>")
            .finish_non_exhaustive()
    }
}

/// One rank's handle on an in-process bootstrap; [`LocalBootstrap::job`]
/// makes one per rank.
#[derive(Clone, Debug)]
pub struct LocalBootstrap {
    rank: u32,
    shared: Arc<Shared>,
}

impl LocalBootstrap {
    /// Handles for the `size` ranks of one job.
    pub fn job(size: u32, job_id: u64, job_key: [u8; JOB_KEY_LEN]) -> Vec<Self> {
        let shared = Arc::new(Shared {
            size,
            job_id,
            job_key,
            values: Mutex::new(HashMap::new()),
            barrier: Barrier::new(size as usize),
        });
        (0..size)
            .map(|rank| Self {
                rank,
                shared: Arc::clone(&shared),
            })
            .collect()
    }
}

impl Bootstrap for LocalBootstrap {
    fn rank(&self) -> u32 {
        self.rank
    }

    fn size(&self) -> u32 {
        self.shared.size
    }

    fn job_id(&self) -> u64 {
        self.shared.job_id
    }

    fn job_key(&self) -> &[u8; JOB_KEY_LEN] {
        &self.shared.job_key
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), BootstrapError> {
        self.shared
            .values
            .lock()
            .map_err(|_| BootstrapError::Server("a rank panicked".into()))?
            .insert((self.rank, key.to_owned()), value.to_vec());
        Ok(())
    }

    fn fence(&self) -> Result<(), BootstrapError> {
        self.shared.barrier.wait();
        Ok(())
    }

    fn get(&self, rank: u32, key: &str) -> Result<Vec<u8>, BootstrapError> {
        self.shared
            .values
            .lock()
            .map_err(|_| BootstrapError::Server("a rank panicked".into()))?
            .get(&(rank, key.to_owned()))
            .cloned()
            .ok_or_else(|| BootstrapError::Missing {
                rank,
                key: key.to_owned(),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_put_before_a_fence_are_seen_after_it() {
        let ranks = LocalBootstrap::job(3, 7, [1; JOB_KEY_LEN]);
        std::thread::scope(|s| {
            for b in &ranks {
                s.spawn(move || {
                    b.put("addr", &[b.rank() as u8]).unwrap();
                    b.fence().unwrap();
                    for r in 0..3 {
                        assert_eq!(b.get(r, "addr").unwrap(), [r as u8]);
                    }
                    assert!(matches!(
                        b.get(0, "nope"),
                        Err(BootstrapError::Missing { .. })
                    ));
                });
            }
        });
    }
}
