//! Which bootstrap the environment calls for: the embedded launcher's, a
//! launcher Navette cannot talk to yet, or none (a singleton).
//!
//! Everything here reads variables through a function, so that tests pass
//! a table instead of changing the process environment.

use std::fmt;
use std::path::PathBuf;

use crate::secret::from_hex;
use crate::{BootstrapError, JOB_KEY_LEN, env};

/// What the environment says about how this process was started.
#[derive(Debug)]
#[non_exhaustive]
pub enum Detected {
    /// Started by `navette run`: connect to its bootstrap server.
    Launcher(LauncherEnv),
    /// Started alone: rank 0 of 1.
    Singleton,
}

/// The variables `navette run` sets for each rank, parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct LauncherEnv {
    /// The bootstrap server's Unix socket.
    pub socket: PathBuf,
    /// This process's rank.
    pub rank: u32,
    /// The number of ranks.
    pub size: u32,
    /// The job id.
    pub job_id: u64,
    /// The job key.
    pub job_key: [u8; JOB_KEY_LEN],
}

impl fmt::Debug for LauncherEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LauncherEnv")
            .field("socket", &self.socket)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("job_id", &format_args!("{:016x}", self.job_id))
            .field("job_key", &"<redacted>")
            .finish()
    }
}

/// The hint given when a foreign launcher is detected.
const USE_NAVETTE_RUN: &str = "start the ranks with `navette run -n N prog` instead; \
     PMIx support (mpirun, srun) is future work";

/// Reads the environment through `var` and decides which bootstrap to use.
///
/// If any `NAVETTE_*` variable of [`env`](mod@crate::env) is set, all must be, well
/// formed. Otherwise, a foreign multi-process launcher (Slurm, Open MPI,
/// an MPICH/Hydra PMI, a PMIx server) is an
/// [`BootstrapError::Unsupported`] error rather than a silent singleton,
/// since each rank would believe it is alone. Otherwise the process is a
/// singleton.
pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Detected, BootstrapError> {
    let navette = [
        env::BOOTSTRAP,
        env::RANK,
        env::SIZE,
        env::JOB_ID,
        env::JOB_KEY,
    ];
    if navette.iter().any(|name| var(name).is_some()) {
        return launcher_env(&var).map(Detected::Launcher);
    }
    if let Some(launcher) = foreign_launcher(&var) {
        return Err(BootstrapError::Unsupported {
            launcher,
            hint: USE_NAVETTE_RUN,
        });
    }
    Ok(Detected::Singleton)
}

fn launcher_env(var: &impl Fn(&str) -> Option<String>) -> Result<LauncherEnv, BootstrapError> {
    let get = |name: &'static str| {
        var(name).ok_or_else(|| BootstrapError::BadEnvironment {
            name,
            problem: "not set, although other NAVETTE_ variables are".into(),
        })
    };
    let bad =
        |name: &'static str, problem: String| BootstrapError::BadEnvironment { name, problem };
    let socket = get(env::BOOTSTRAP)?;
    if socket.is_empty() {
        return Err(bad(env::BOOTSTRAP, "empty".into()));
    }
    let size: u32 = parse_number(env::SIZE, &get(env::SIZE)?)?;
    if size == 0 {
        return Err(bad(env::SIZE, "must be at least 1".into()));
    }
    let rank: u32 = parse_number(env::RANK, &get(env::RANK)?)?;
    if rank >= size {
        return Err(bad(
            env::RANK,
            format!("{rank} is not below the size {size}"),
        ));
    }
    let job_id = get(env::JOB_ID)?;
    let job_id = u64::from_str_radix(job_id.trim(), 16).map_err(|e| {
        bad(
            env::JOB_ID,
            format!("{job_id:?} is not a 64-bit hexadecimal id: {e}"),
        )
    })?;
    let job_key =
        from_hex::<JOB_KEY_LEN>(get(env::JOB_KEY)?.trim()).map_err(|e| bad(env::JOB_KEY, e))?;
    Ok(LauncherEnv {
        socket: socket.into(),
        rank,
        size,
        job_id,
        job_key,
    })
}

fn parse_number(name: &'static str, text: &str) -> Result<u32, BootstrapError> {
    text.trim()
        .parse()
        .map_err(|e| BootstrapError::BadEnvironment {
            name,
            problem: format!("{text:?} is not a number: {e}"),
        })
}

/// What a launcher's variables say about the job's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Nothing from this launcher.
    Absent,
    /// This launcher started one process only.
    Single,
    /// This launcher started several processes (or we cannot tell).
    Several,
}

fn number(var: &impl Fn(&str) -> Option<String>, name: &str) -> Option<u64> {
    var(name).and_then(|v| v.trim().parse().ok())
}

/// `Several` if `size > 1` or `rank > 0`, `Single` if the size says 1,
/// `Several` if only a rank is known (the size could be anything).
fn verdict(size: Option<u64>, rank_set: bool, rank: Option<u64>) -> Verdict {
    match (size, rank) {
        (Some(s), _) if s > 1 => Verdict::Several,
        (_, Some(r)) if r > 0 => Verdict::Several,
        (Some(_), _) => Verdict::Single,
        (None, _) if rank_set => Verdict::Several,
        (None, _) => Verdict::Absent,
    }
}

fn foreign_launcher(var: &impl Fn(&str) -> Option<String>) -> Option<&'static str> {
    // Slurm: SLURM_PROCID is set by srun for each task; an sbatch script
    // alone has SLURM_NTASKS but is not a task of a step.
    let slurm = if var("SLURM_PROCID").is_some() {
        let tasks = number(var, "SLURM_STEP_NUM_TASKS").or_else(|| number(var, "SLURM_NTASKS"));
        verdict(tasks.or(Some(1)), true, number(var, "SLURM_PROCID"))
    } else {
        Verdict::Absent
    };
    let ompi = verdict(
        number(var, "OMPI_COMM_WORLD_SIZE"),
        var("OMPI_COMM_WORLD_RANK").is_some(),
        number(var, "OMPI_COMM_WORLD_RANK"),
    );
    // MPICH's Hydra, Intel MPI and other PMI-1/PMI-2 launchers.
    let pmi = verdict(
        number(var, "PMI_SIZE"),
        var("PMI_RANK").is_some() || var("PMI_FD").is_some(),
        number(var, "PMI_RANK"),
    );
    let found = [
        (slurm, "Slurm (srun)"),
        (ompi, "Open MPI (mpirun)"),
        (pmi, "a PMI launcher (MPICH/Hydra mpiexec)"),
    ];
    if let Some((_, name)) = found.iter().find(|(v, _)| *v == Verdict::Several) {
        return Some(name);
    }
    // A PMIx server publishes no size in the environment: unless one of
    // the launchers above said the job has one process, assume several.
    let single = found.iter().any(|(v, _)| *v == Verdict::Single);
    if var("PMIX_RANK").is_some() && !single {
        return Some("a PMIx launcher");
    }
    None
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn detect(vars: &[(&str, &str)]) -> Result<Detected, BootstrapError> {
        let table: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        from_vars(|name| table.get(name).cloned())
    }

    const KEY: &str = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";

    const NOT_HEX_KEY: &str = "g0112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

    fn navette_vars() -> Vec<(&'static str, &'static str)> {
        vec![
            (env::BOOTSTRAP, "/tmp/x/bootstrap.sock"),
            (env::RANK, "2"),
            (env::SIZE, "4"),
            (env::JOB_ID, "00000000deadbeef"),
            (env::JOB_KEY, KEY),
        ]
    }

    fn unsupported(vars: &[(&str, &str)]) -> &'static str {
        match detect(vars) {
            Err(BootstrapError::Unsupported { launcher, hint }) => {
                assert!(hint.contains("navette run"));
                launcher
            }
            other => panic!("{vars:?} gave {other:?}"),
        }
    }

    fn bad_variable(vars: &[(&str, &str)]) -> &'static str {
        match detect(vars) {
            Err(BootstrapError::BadEnvironment { name, .. }) => name,
            other => panic!("{vars:?} gave {other:?}"),
        }
    }

    #[test]
    fn nothing_set_is_a_singleton() {
        assert!(matches!(detect(&[]), Ok(Detected::Singleton)));
        assert!(matches!(
            detect(&[("HOME", "/root")]),
            Ok(Detected::Singleton)
        ));
    }

    #[test]
    fn navette_variables_are_parsed() {
        let Ok(Detected::Launcher(e)) = detect(&navette_vars()) else {
            panic!("the launcher's variables are recognized");
        };
        assert_eq!((e.rank, e.size, e.job_id), (2, 4, 0xdead_beef));
        assert_eq!(e.job_key[0], 0x00);
        assert_eq!(e.job_key[31], 0xff);
        assert_eq!(e.socket, PathBuf::from("/tmp/x/bootstrap.sock"));
        assert!(!format!("{e:?}").contains("8899"), "the key is not printed");
    }

    #[test]
    fn navette_variables_take_precedence_over_foreign_ones() {
        let mut vars = navette_vars();
        vars.push(("SLURM_PROCID", "1"));
        vars.push(("SLURM_NTASKS", "8"));
        assert!(matches!(detect(&vars), Ok(Detected::Launcher(_))));
    }

    #[test]
    fn each_bad_navette_variable_is_named() {
        for name in [
            env::BOOTSTRAP,
            env::RANK,
            env::SIZE,
            env::JOB_ID,
            env::JOB_KEY,
        ] {
            let vars: Vec<_> = navette_vars()
                .into_iter()
                .filter(|(k, _)| *k != name)
                .collect();
            assert_eq!(bad_variable(&vars), name, "without {name}");
        }
        let with = |name: &str, value: &'static str| {
            let mut vars = navette_vars();
            vars.iter_mut().find(|(k, _)| *k == name).unwrap().1 = value;
            vars
        };
        assert_eq!(bad_variable(&with(env::RANK, "4")), env::RANK);
        assert_eq!(bad_variable(&with(env::RANK, "-1")), env::RANK);
        assert_eq!(bad_variable(&with(env::SIZE, "0")), env::SIZE);
        assert_eq!(bad_variable(&with(env::SIZE, "many")), env::SIZE);
        assert_eq!(bad_variable(&with(env::JOB_ID, "xyz")), env::JOB_ID);
        assert_eq!(
            bad_variable(&with(env::JOB_ID, "1234567890abcdef0")),
            env::JOB_ID
        );
        assert_eq!(bad_variable(&with(env::JOB_KEY, "0011")), env::JOB_KEY);
        assert_eq!(bad_variable(&with(env::JOB_KEY, NOT_HEX_KEY)), env::JOB_KEY);
        assert_eq!(bad_variable(&with(env::BOOTSTRAP, "")), env::BOOTSTRAP);
        // A lone NAVETTE_RANK is an error, not a singleton.
        assert_eq!(bad_variable(&[(env::RANK, "0")]), env::BOOTSTRAP);
    }

    #[test]
    fn foreign_launchers_are_refused_with_a_hint() {
        assert!(unsupported(&[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "4")]).contains("Slurm"));
        assert!(unsupported(&[("SLURM_PROCID", "3")]).contains("Slurm"));
        assert!(
            unsupported(&[
                ("SLURM_PROCID", "0"),
                ("SLURM_NTASKS", "1"),
                ("SLURM_STEP_NUM_TASKS", "2")
            ])
            .contains("Slurm")
        );
        assert!(unsupported(&[("OMPI_COMM_WORLD_SIZE", "2")]).contains("Open MPI"));
        assert!(unsupported(&[("PMI_SIZE", "4"), ("PMI_RANK", "0")]).contains("PMI"));
        assert!(unsupported(&[("PMI_RANK", "0")]).contains("PMI"));
        assert!(unsupported(&[("PMI_FD", "5")]).contains("PMI"));
        assert!(unsupported(&[("PMIX_RANK", "0"), ("PMIX_NAMESPACE", "x")]).contains("PMIx"));
    }

    #[test]
    fn single_process_launches_are_singletons() {
        for vars in [
            &[("SLURM_NTASKS", "4")][..], // an sbatch script, not an srun task
            &[("SLURM_PROCID", "0"), ("SLURM_NTASKS", "1")],
            &[
                ("OMPI_COMM_WORLD_SIZE", "1"),
                ("OMPI_COMM_WORLD_RANK", "0"),
                ("PMIX_RANK", "0"),
            ],
            &[("PMI_SIZE", "1"), ("PMI_RANK", "0"), ("PMI_FD", "4")],
        ] {
            assert!(matches!(detect(vars), Ok(Detected::Singleton)), "{vars:?}");
        }
    }
}
