//! multirail: navette's bandwidth over two tcp links used together, beside
//! each link alone, measured in the same run.
//!
//! `scripts/netns-rails` makes two network namespaces (one per rank) joined
//! by two veth pairs, each end rate-limited with a tc tbf qdisc: link 1 at
//! 2 Gbit/s, link 2 at 1 Gbit/s ([`RATES`]). The namespaces are made once
//! for all rounds, under a name of this process ([`namespace_name`]), and
//! always removed ([`Namespaces`] removes them when dropped: at the end, on
//! an error or a panic). Each round runs `navette bench pingpong` on two
//! ranks of `navette run -n 2`, each put in its namespace by `netns-rails
//! rank-exec` (which sets `NAVETTE_TCP_LINKS`), once per [`Setup`]: both
//! links with `NAVETTE_STRATEGY=split`, both with the default strategy
//! (aggregate), link 1 alone, link 2 alone. No traffic leaves the two
//! namespaces.
//!
//! Without root, `ip` or `tc`, or when the system refuses a namespace
//! (netns-rails exits with [`REFUSED`]), the pattern is skipped as not
//! available.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use super::{Context, Outcome, Pattern};
use crate::args::Transport;
use crate::record::{Record, Skip, SkipKind, implementation as imp};
use crate::runner::{Output, Runner};
use crate::tools::navette;

const PATTERN: Pattern = Pattern::Multirail;

/// Sizes measured when `--sizes` is not given: 64 MiB, large enough that
/// the links, not the latency, set the time.
pub const DEFAULT_SIZES: &str = "64M";

/// The rates given to tc, link 1 then link 2, as tc writes them.
pub const RATES: [&str; 2] = ["2gbit", "1gbit"];

/// netns-rails's exit code when the system refuses to create a namespace
/// (not root, or a sandbox without the privilege).
pub const REFUSED: i32 = 77;

/// The strategy of the first setup, by `NAVETTE_STRATEGY`.
pub const SPLIT: &str = "split";

/// The strategy when `NAVETTE_STRATEGY` is not set: the engine's default.
pub use navette_cli::bench::document::DEFAULT_STRATEGY as AGGREGATE;

/// One measurement of each round: which links, which strategy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Setup {
    /// The `rails` of its rows: `1+2`, `1`, `2`.
    pub rails: &'static str,
    /// netns-rails's `--use`: the links, comma-separated.
    pub links: &'static str,
    /// `NAVETTE_STRATEGY`, or `None` for the engine's default (the
    /// variable is removed from the environment).
    pub strategy: Option<&'static str>,
}

/// The setups of a round, in order.
pub const SETUPS: [Setup; 4] = [
    Setup {
        rails: "1+2",
        links: "1,2",
        strategy: Some(SPLIT),
    },
    Setup {
        rails: "1+2",
        links: "1,2",
        strategy: None,
    },
    Setup {
        rails: "1",
        links: "1",
        strategy: None,
    },
    Setup {
        rails: "2",
        links: "2",
        strategy: None,
    },
];

impl Setup {
    /// The `strategy` of its rows.
    pub fn strategy_name(self) -> &'static str {
        self.strategy.unwrap_or(AGGREGATE)
    }

    /// The tool name in raw output files: `navette-rails1+2-split`.
    pub fn tool(self) -> String {
        format!(
            "{}-rails{}-{}",
            imp::NAVETTE,
            self.rails,
            self.strategy_name()
        )
    }

    /// How it is named in tables and messages: `1+2 split`.
    pub fn label(self) -> String {
        format!("{} {}", self.rails, self.strategy_name())
    }

    /// Whether `record` is one of its rows.
    pub fn holds(self, record: &Record) -> bool {
        record.pattern == PATTERN.name()
            && record.implementation == imp::NAVETTE
            && record.rails.as_deref() == Some(self.rails)
            && record.strategy.as_deref() == Some(self.strategy_name())
    }

    /// `record` (a pingpong row of `navette bench`) as a row of this setup.
    pub fn row(self, record: &Record) -> Record {
        Record {
            rails: Some(self.rails.to_owned()),
            strategy: Some(self.strategy_name().to_owned()),
            ..Record::new(
                PATTERN.name(),
                &record.transport,
                imp::NAVETTE,
                record.size,
                record.latency_us,
                record.bandwidth_mbps,
            )
        }
    }
}

/// Why the namespaces could not be had: the whole pattern is skipped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SetupError {
    /// Asked over shm.
    #[error("multirail runs over tcp links between network namespaces")]
    NotTcp,
    /// Not root.
    #[error("network namespaces need root (running as uid {0})")]
    NotRoot(u32),
    /// `ip` or `tc` is not in `PATH`.
    #[error("{0} not found in PATH (install iproute2)")]
    Missing(&'static str),
    /// The script is not where it was said to be.
    #[error("{0}: not found (give its path with --netns-rails)")]
    NoScript(String),
    /// A program could not be started.
    #[error("could not run {what}: {source}")]
    Run {
        /// The command.
        what: String,
        /// What went wrong.
        source: std::io::Error,
    },
    /// `ip netns list` failed.
    #[error("ip netns list: {0}")]
    List(String),
    /// The namespaces exist already (not ours: left alone).
    #[error(
        "namespaces {0}-0 or {0}-1 exist already, left by an earlier run? \
         (scripts/netns-rails down {0})"
    )]
    Exists(String),
    /// netns-rails exited with [`REFUSED`].
    #[error("{0}")]
    Refused(String),
    /// netns-rails failed otherwise.
    #[error("netns-rails up failed: {0}")]
    Failed(String),
}

impl SetupError {
    /// Expected (the system cannot do it here) or a failure.
    pub fn kind(&self) -> SkipKind {
        match self {
            Self::NotTcp | Self::NotRoot(_) | Self::Missing(_) | Self::Refused(_) => {
                SkipKind::Unavailable
            }
            Self::NoScript(_)
            | Self::Run { .. }
            | Self::List(_)
            | Self::Exists(_)
            | Self::Failed(_) => SkipKind::Failed,
        }
    }
}

/// The namespaces' name for process `pid`: `nvcmp` and the pid, at most
/// 12 characters (netns-rails's limit).
pub fn namespace_name(pid: u32) -> String {
    format!("nvcmp{}", pid % 10_000_000)
}

/// The effective uid in the text of `/proc/self/status`.
pub fn effective_uid(status: &str) -> Option<u32> {
    status
        .lines()
        .find_map(|line| line.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .and_then(|id| id.parse().ok())
}

/// The namespaces listed by `ip netns list` (`NAME (id: 0)` per line).
pub fn namespace_names(list: &str) -> Vec<&str> {
    list.lines()
        .filter_map(|line| line.split_whitespace().next())
        .collect()
}

/// Where `program` is in `path` (a `PATH` value), if anywhere.
pub fn find_in_path(program: &str, path: &OsStr) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::env::split_paths(path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            candidate
                .metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// What `netns-rails up` said: success, refused ([`REFUSED`]: not
/// available here) or failed, with its reason.
pub fn up_result(output: &Output) -> Result<(), SetupError> {
    if output.success() {
        return Ok(());
    }
    let said = script_said(output);
    match output.status.and_then(|s| s.code()) {
        Some(REFUSED) => Err(SetupError::Refused(said)),
        _ => Err(SetupError::Failed(said)),
    }
}

/// netns-rails's own messages (`netns-rails: …`), else the usual reason.
fn script_said(output: &Output) -> String {
    let lines: Vec<&str> = output
        .stderr
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("netns-rails:"))
        .collect();
    if lines.is_empty() {
        output.failure()
    } else {
        lines.join("; ")
    }
}

/// The two namespaces of a run: removed by [`down`](Self::down), or when
/// dropped (on an error or a panic) if not yet.
#[derive(Debug)]
pub struct Namespaces {
    script: PathBuf,
    name: String,
    armed: bool,
}

impl Namespaces {
    /// Checks what is needed, then makes the namespaces `name`-0 and
    /// `name`-1 with netns-rails (the command and its output are kept by
    /// `runner`).
    pub fn up(runner: &mut Runner, script: &Path, name: &str) -> Result<Self, SetupError> {
        if let Some(uid) = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| effective_uid(&status))
            && uid != 0
        {
            return Err(SetupError::NotRoot(uid));
        }
        let path = std::env::var_os("PATH").unwrap_or_default();
        for program in ["ip", "tc"] {
            if find_in_path(program, &path).is_none() {
                return Err(SetupError::Missing(program));
            }
        }
        if !script.is_file() {
            return Err(SetupError::NoScript(script.display().to_string()));
        }
        let list = Command::new("ip")
            .args(["netns", "list"])
            .stdin(Stdio::null())
            .output()
            .map_err(|source| SetupError::Run {
                what: "ip netns list".into(),
                source,
            })?;
        if !list.status.success() {
            let said = String::from_utf8_lossy(&list.stderr).trim().to_owned();
            return Err(SetupError::List(said));
        }
        let list = String::from_utf8_lossy(&list.stdout);
        let ours = [format!("{name}-0"), format!("{name}-1")];
        if namespace_names(&list)
            .iter()
            .any(|n| ours.iter().any(|o| o == n))
        {
            return Err(SetupError::Exists(name.to_owned()));
        }
        // Whatever `up` makes from here on is ours: armed before it runs,
        // so that a time-out or a failure half-way still removes it.
        let mut namespaces = Self {
            script: script.to_owned(),
            name: name.to_owned(),
            armed: true,
        };
        let mut command = Command::new(script);
        command.args(["up", name, "--rates", &RATES.join(",")]);
        let output = runner
            .run(&format!("{}-tcp-netns-up", PATTERN.name()), &mut command)
            .map_err(|source| SetupError::Run {
                what: format!("{} up", script.display()),
                source,
            })?;
        if let Err(e) = up_result(&output) {
            // Refused: the first namespace could not even be made.
            if matches!(e, SetupError::Refused(_)) {
                namespaces.armed = false;
            }
            return Err(e);
        }
        Ok(namespaces)
    }

    /// The name given to netns-rails.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn down_command(&self) -> Command {
        let mut command = Command::new(&self.script);
        command.args(["down", &self.name]);
        command
    }

    /// Removes the namespaces (the command and its output are kept by
    /// `runner`).
    pub fn down(mut self, runner: &mut Runner) -> Result<(), String> {
        self.armed = false;
        let mut command = self.down_command();
        let output = runner
            .run(&format!("{}-tcp-netns-down", PATTERN.name()), &mut command)
            .map_err(|e| format!("{} down {}: {e}", self.script.display(), self.name))?;
        if output.success() {
            Ok(())
        } else {
            Err(format!(
                "{} down {}: {}",
                self.script.display(),
                self.name,
                script_said(&output)
            ))
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let done = self
            .down_command()
            .stdin(Stdio::null())
            .output()
            .map_err(|e| e.to_string())
            .and_then(|o| {
                if o.status.success() {
                    Ok(())
                } else {
                    Err(String::from_utf8_lossy(&o.stderr).trim().to_owned())
                }
            });
        if let Err(e) = done {
            eprintln!(
                "compare: warning: could not remove namespaces {0}-0 and {0}-1 ({e}): \
                 run {1} down {0}",
                self.name,
                self.script.display()
            );
        }
    }
}

/// The command of one setup: `navette run -n 2` of `netns-rails
/// rank-exec NAME --use LINKS -- navette bench pingpong --sizes … --json
/// FILE`, over tcp, with `NAVETTE_STRATEGY` set or removed.
pub fn command(
    navette: &Path,
    script: &Path,
    name: &str,
    setup: Setup,
    sizes: &[usize],
    iterations: Option<u32>,
    json: &Path,
) -> Command {
    let sizes: Vec<String> = sizes.iter().map(usize::to_string).collect();
    let mut command = Command::new(navette);
    command.env(
        navette_cli::bench::command::DRIVER_VAR,
        Transport::Tcp.name(),
    );
    match setup.strategy {
        Some(strategy) => command.env(::navette::STRATEGY_VAR, strategy),
        None => command.env_remove(::navette::STRATEGY_VAR),
    };
    command
        .args(["run", "-n", "2", "--no-prefix", "--"])
        .arg(script)
        .args(["rank-exec", name, "--use", setup.links, "--"])
        .arg(navette)
        .args(["bench", "pingpong", "--sizes", &sizes.join(",")])
        .arg("--json")
        .arg(json);
    if let Some(n) = iterations {
        command.args(["--iterations", &n.to_string()]);
    }
    command
}

/// The rows of `setup` in navette's pingpong rows, for `sizes`; an error if
/// navette ran over another transport than tcp.
pub fn rows(setup: Setup, records: &[Record], sizes: &[usize]) -> Result<Vec<Record>, String> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.implementation == imp::NAVETTE && r.pattern == Pattern::Pingpong.name())
        .collect();
    if let Some(other) = mine.iter().find(|r| r.transport != Transport::Tcp.name()) {
        return Err(format!(
            "navette ran over {}, not tcp: its rows are not used",
            other.transport
        ));
    }
    Ok(mine
        .into_iter()
        .filter(|r| sizes.contains(&r.size))
        .map(|r| setup.row(r))
        .collect())
}

/// Runs `rounds` rounds of every setup between namespaces made once; the
/// best of the rounds for each row.
pub(super) fn run(ctx: &mut Context<'_>, rounds: u32) -> Outcome {
    let mut outcome = Outcome::default();
    if ctx.transport != Transport::Tcp {
        skip_pattern(ctx, &mut outcome, &SetupError::NotTcp);
        return outcome;
    }
    if let Some(reason) = ctx.programs.navette_unbuilt.clone() {
        for setup in SETUPS {
            let sizes = ctx.sizes.to_vec();
            skip_setup(
                ctx,
                &mut outcome,
                setup,
                SkipKind::Failed,
                sizes,
                reason.clone(),
            );
        }
        return outcome;
    }
    let name = namespace_name(std::process::id());
    let script = ctx.programs.netns_rails.clone();
    let namespaces = match Namespaces::up(ctx.runner, &script, &name) {
        Ok(namespaces) => namespaces,
        Err(e) => {
            skip_pattern(ctx, &mut outcome, &e);
            return outcome;
        }
    };
    outcome.note(links_note(namespaces.name()));
    outcome.note(
        "bandwidth = size / one-way time of navette bench pingpong (one message in flight); \
         sum = link 1 alone + link 2 alone, each the best of the rounds of this run"
            .into(),
    );
    for round in 1..=rounds {
        ctx.round = (rounds > 1).then_some(round);
        let mut this = Outcome::default();
        for setup in SETUPS {
            measure(ctx, namespaces.name(), setup, &mut this);
        }
        outcome.keep_best(this);
    }
    ctx.round = None;
    if let Err(e) = namespaces.down(ctx.runner) {
        eprintln!("compare: warning: {e}");
        outcome.note(format!("the namespaces were not removed: {e}"));
    }
    outcome
}

/// Where the links are and what limits them.
pub fn links_note(name: &str) -> String {
    format!(
        "links: veth pairs between network namespaces {name}-0 and {name}-1 \
         (scripts/netns-rails), both ends rate-limited with tc tbf: link 1 {}, link 2 {}; \
         each rank's NAVETTE_TCP_LINKS lists its addresses with these rates",
        RATES[0], RATES[1]
    )
}

/// Skips every row of the pattern for `why`.
fn skip_pattern(ctx: &Context<'_>, outcome: &mut Outcome, why: &SetupError) {
    outcome.skip(
        ctx,
        PATTERN,
        imp::NAVETTE,
        why.kind(),
        ctx.sizes.to_vec(),
        why.to_string(),
    );
}

/// Skips the rows of `setup` at `sizes`.
fn skip_setup(
    ctx: &Context<'_>,
    outcome: &mut Outcome,
    setup: Setup,
    kind: SkipKind,
    sizes: Vec<usize>,
    reason: String,
) {
    eprintln!("compare: navette {} skipped: {reason}", setup.label());
    outcome.skipped.push(Skip {
        pattern: PATTERN.name().to_owned(),
        transport: ctx.transport.name().to_owned(),
        implementation: imp::NAVETTE.to_owned(),
        segments: None,
        threads: None,
        rails: Some(setup.rails.to_owned()),
        strategy: Some(setup.strategy_name().to_owned()),
        kind,
        sizes,
        reason,
    });
}

/// One setup, once.
fn measure(ctx: &mut Context<'_>, name: &str, setup: Setup, outcome: &mut Outcome) {
    let raw = ctx.raw_name(PATTERN, &setup.tool());
    let json = ctx.runner.raw_dir().join(format!("{raw}.json"));
    let _ = std::fs::remove_file(&json);
    let mut command = command(
        &ctx.programs.navette,
        &ctx.programs.netns_rails,
        name,
        setup,
        ctx.sizes,
        ctx.iterations,
        &json,
    );
    let all = ctx.sizes.to_vec();
    let output = match ctx.runner.run(&raw, &mut command) {
        Ok(output) => output,
        Err(e) => {
            let reason = format!("could not run: {e}");
            skip_setup(ctx, outcome, setup, SkipKind::Failed, all, reason);
            return;
        }
    };
    let failure = (!output.success()).then(|| output.failure());
    let rows = match std::fs::read_to_string(&json) {
        Ok(text) => navette::parse(&text)
            .map_err(|e| format!("{}: {e}", json.display()))
            .and_then(|records| rows(setup, &records, ctx.sizes)),
        Err(e) => Err(format!("{}: {e}", json.display())),
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            let reason = failure.unwrap_or(e);
            skip_setup(ctx, outcome, setup, SkipKind::Failed, all, reason);
            return;
        }
    };
    let missing: Vec<usize> = all
        .into_iter()
        .filter(|size| !rows.iter().any(|r| r.size == *size))
        .collect();
    outcome.records.extend(rows);
    if !missing.is_empty() {
        let reason = failure.unwrap_or_else(|| "its output has no figure for these sizes".into());
        skip_setup(ctx, outcome, setup, SkipKind::Failed, missing, reason);
    }
}

/// One size's figures, as the table gives them (MB/s).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Summary {
    /// The message size.
    pub size: usize,
    /// Link 1 alone.
    pub link1: Option<f64>,
    /// Link 2 alone.
    pub link2: Option<f64>,
    /// Both links, split.
    pub split: Option<f64>,
    /// Both links, aggregate.
    pub aggregate: Option<f64>,
}

impl Summary {
    /// Link 1 alone + link 2 alone, when both were measured.
    pub fn sum(&self) -> Option<f64> {
        Some(self.link1? + self.link2?)
    }

    /// split / sum.
    pub fn split_ratio(&self) -> Option<f64> {
        ratio(self.split?, self.sum()?)
    }

    /// aggregate / sum.
    pub fn aggregate_ratio(&self) -> Option<f64> {
        ratio(self.aggregate?, self.sum()?)
    }
}

/// `part / whole`, if `whole` is a positive number.
fn ratio(part: f64, whole: f64) -> Option<f64> {
    (whole > 0.0 && whole.is_finite() && part.is_finite()).then(|| part / whole)
}

/// One [`Summary`] per size of the multirail rows of `records` over
/// `transport`, by ascending size.
pub fn summaries(records: &[Record], transport: &str) -> Vec<Summary> {
    let mine: Vec<&Record> = records
        .iter()
        .filter(|r| r.pattern == PATTERN.name() && r.transport == transport)
        .collect();
    let mut sizes: Vec<usize> = mine.iter().map(|r| r.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let bandwidth = |setup: Setup, size: usize| {
        mine.iter()
            .find(|r| r.size == size && setup.holds(r))
            .and_then(|r| r.bandwidth_mbps)
    };
    let [split, aggregate, link1, link2] = SETUPS;
    sizes
        .into_iter()
        .map(|size| Summary {
            size,
            link1: bandwidth(link1, size),
            link2: bandwidth(link2, size),
            split: bandwidth(split, size),
            aggregate: bandwidth(aggregate, size),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;

    use super::*;
    use crate::runner::describe;

    fn output(code: i32, stderr: &str) -> Output {
        Output {
            status: Some(ExitStatus::from_raw(code << 8)),
            stdout: String::new(),
            stderr: stderr.to_owned(),
        }
    }

    #[test]
    fn names_fit_netns_rails() {
        for pid in [1, 4242, 4_194_304, u32::MAX] {
            let name = namespace_name(pid);
            assert!(name.len() <= 12, "{name}");
            assert!(
                name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'),
                "{name}"
            );
            assert!(name.starts_with("nvcmp"), "{name}");
        }
        assert_eq!(namespace_name(4242), "nvcmp4242");
    }

    #[test]
    fn setups_rows_and_labels() {
        let labels: Vec<String> = SETUPS.iter().map(|s| s.label()).collect();
        assert_eq!(
            labels,
            ["1+2 split", "1+2 aggregate", "1 aggregate", "2 aggregate"]
        );
        assert_eq!(SETUPS[0].tool(), "navette-rails1+2-split");
        assert_eq!(SETUPS[3].tool(), "navette-rails2-aggregate");
        let pingpong = Record::new("pingpong", "tcp", "navette", 64 << 20, Some(1.0), Some(2.0));
        let row = SETUPS[1].row(&pingpong);
        assert_eq!(row.pattern, "multirail");
        assert_eq!(row.rails.as_deref(), Some("1+2"));
        assert_eq!(row.strategy.as_deref(), Some("aggregate"));
        assert_eq!((row.latency_us, row.bandwidth_mbps), (Some(1.0), Some(2.0)));
        assert!(SETUPS[1].holds(&row));
        assert!(!SETUPS[0].holds(&row), "another strategy");
        assert!(!SETUPS[2].holds(&row), "other links");
        let value = serde_json::to_value(&row).unwrap();
        assert_eq!(
            value,
            serde_json::json!({ "pattern": "multirail", "transport": "tcp", "impl": "navette",
                                "size": 67108864, "latency_us": 1.0, "bandwidth_mbps": 2.0,
                                "strategy": "aggregate", "rails": "1+2" })
        );
    }

    #[test]
    fn rows_from_navettes_document() {
        let records = vec![
            Record::new("pingpong", "tcp", "navette", 1024, Some(5.0), Some(200.0)),
            Record::new(
                "pingpong",
                "tcp",
                "navette",
                64 << 20,
                Some(9.0),
                Some(350.0),
            ),
            Record::new(
                "pingpong",
                "tcp",
                "raw-tcp",
                64 << 20,
                Some(8.0),
                Some(360.0),
            ),
        ];
        let rows = rows(SETUPS[0], &records, &[64 << 20]).unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].bandwidth_mbps, Some(350.0));
        assert_eq!(rows[0].strategy.as_deref(), Some("split"));
        let shm = [Record::new(
            "pingpong",
            "shm",
            "navette",
            8,
            Some(1.0),
            None,
        )];
        let err = super::rows(SETUPS[0], &shm, &[8]).unwrap_err();
        assert!(err.contains("over shm, not tcp"), "{err}");
    }

    #[test]
    fn command_lines() {
        let line = |setup, iterations| {
            describe(&command(
                Path::new("navette"),
                Path::new("scripts/netns-rails"),
                "nvcmp42",
                setup,
                &[64 << 20],
                iterations,
                Path::new("/o/raw/m.json"),
            ))
        };
        assert_eq!(
            line(SETUPS[0], None),
            "NAVETTE_DRIVER=tcp NAVETTE_STRATEGY=split navette run -n 2 --no-prefix -- \
             scripts/netns-rails rank-exec nvcmp42 --use 1,2 -- \
             navette bench pingpong --sizes 67108864 --json /o/raw/m.json"
        );
        let default = command(
            Path::new("navette"),
            Path::new("s"),
            "n",
            SETUPS[3],
            &[8],
            Some(6),
            Path::new("j"),
        );
        assert!(
            default
                .get_envs()
                .any(|(k, v)| k == "NAVETTE_STRATEGY" && v.is_none()),
            "the default strategy: NAVETTE_STRATEGY removed, not inherited"
        );
        assert_eq!(
            line(SETUPS[3], Some(6)),
            "NAVETTE_DRIVER=tcp navette run -n 2 --no-prefix -- \
             scripts/netns-rails rank-exec nvcmp42 --use 2 -- \
             navette bench pingpong --sizes 67108864 --json /o/raw/m.json --iterations 6"
        );
    }

    #[test]
    fn what_netns_rails_up_says() {
        assert!(up_result(&output(0, "")).is_ok());
        let refused = up_result(&output(
            77,
            "netns-rails: cannot create a network namespace: mount --make-shared /run/netns failed: Operation not permitted\n",
        ))
        .unwrap_err();
        assert!(matches!(refused, SetupError::Refused(_)), "{refused:?}");
        assert_eq!(refused.kind(), SkipKind::Unavailable);
        assert_eq!(
            refused.to_string(),
            "netns-rails: cannot create a network namespace: mount --make-shared \
             /run/netns failed: Operation not permitted"
        );
        let failed = up_result(&output(
            1,
            "RTNETLINK answers: File exists\nnetns-rails: nvcmp1-0 or nvcmp1-1 exists already\n",
        ))
        .unwrap_err();
        assert_eq!(failed.kind(), SkipKind::Failed);
        assert_eq!(
            failed.to_string(),
            "netns-rails up failed: netns-rails: nvcmp1-0 or nvcmp1-1 exists already"
        );
        let silent = up_result(&output(2, "")).unwrap_err();
        assert_eq!(
            silent.to_string(),
            "netns-rails up failed: exited with exit status: 2"
        );
        let killed = Output {
            status: None,
            stdout: String::new(),
            stderr: String::new(),
        };
        assert!(matches!(up_result(&killed), Err(SetupError::Failed(_))));
    }

    #[test]
    fn expected_skips() {
        assert_eq!(SetupError::NotTcp.kind(), SkipKind::Unavailable);
        assert_eq!(
            SetupError::NotTcp.to_string(),
            "multirail runs over tcp links between network namespaces"
        );
        assert_eq!(SetupError::NotRoot(1000).kind(), SkipKind::Unavailable);
        assert_eq!(SetupError::Missing("tc").kind(), SkipKind::Unavailable);
        assert_eq!(SetupError::Exists("n".into()).kind(), SkipKind::Failed);
    }

    #[test]
    fn system_facts() {
        let status =
            "Name:\tnavette-compare\nUmask:\t0022\nUid:\t1000\t0\t0\t0\nGid:\t0\t0\t0\t0\n";
        assert_eq!(
            effective_uid(status),
            Some(0),
            "the effective uid is the second"
        );
        assert_eq!(effective_uid("Uid:\t0\t1000\t0\t0\n"), Some(1000));
        assert_eq!(effective_uid("Name:\tx\n"), None);
        assert_eq!(
            namespace_names("nvcmp12-1 (id: 1)\nnvcmp12-0 (id: 0)\nplain\n\n"),
            ["nvcmp12-1", "nvcmp12-0", "plain"]
        );
        let dir = std::env::temp_dir().join(format!("navette-compare-path-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let tool = dir.join("tc");
        std::fs::write(&tool, "#!/bin/sh\n").unwrap();
        std::fs::write(dir.join("ip"), "not executable").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = std::env::join_paths(["/nonexistent-dir", dir.to_str().unwrap()]).unwrap();
        assert_eq!(find_in_path("tc", &path), Some(tool));
        assert_eq!(find_in_path("ip", &path), None, "not executable");
        assert_eq!(find_in_path("tc", OsStr::new("")), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn namespaces_are_removed_when_dropped() {
        let dir =
            std::env::temp_dir().join(format!("navette-compare-guard-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let script = dir.join("netns-rails");
        let log = dir.join("calls");
        std::fs::write(
            &script,
            format!("#!/bin/sh\necho \"$@\" >> {}\n", log.display()),
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        let guard = |armed| Namespaces {
            script: script.clone(),
            name: "nvcmp1".into(),
            armed,
        };
        let result = std::panic::catch_unwind(|| {
            let _namespaces = guard(true);
            panic!("a failure half-way");
        });
        assert!(result.is_err());
        drop(guard(false));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "down nvcmp1\n",
            "once on the panic, not when disarmed"
        );
        let raw = dir.join("raw");
        std::fs::create_dir_all(&raw).unwrap();
        let mut runner = Runner::new(&raw, std::time::Duration::from_secs(10)).unwrap();
        guard(true).down(&mut runner).unwrap();
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "down nvcmp1\ndown nvcmp1\n",
            "down, then nothing more when dropped"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sums_and_ratios() {
        let row = |setup: Setup, size, bw| {
            Setup::row(
                setup,
                &Record::new("pingpong", "tcp", "navette", size, Some(1.0), Some(bw)),
            )
        };
        let records = vec![
            row(SETUPS[2], 64 << 20, 240.0),
            row(SETUPS[3], 64 << 20, 120.0),
            row(SETUPS[0], 64 << 20, 342.0),
            row(SETUPS[1], 64 << 20, 324.0),
            row(SETUPS[0], 1 << 20, 100.0),
            Record::new(
                "pingpong",
                "tcp",
                "navette",
                64 << 20,
                Some(1.0),
                Some(999.0),
            ),
        ];
        let all = summaries(&records, "tcp");
        assert_eq!(all.len(), 2);
        assert_eq!(
            all[0],
            Summary {
                size: 1 << 20,
                split: Some(100.0),
                ..Summary::default()
            }
        );
        assert_eq!(all[0].sum(), None, "no link alone at 1M");
        assert_eq!(all[0].split_ratio(), None);
        let big = all[1];
        assert_eq!((big.link1, big.link2), (Some(240.0), Some(120.0)));
        assert_eq!(big.sum(), Some(360.0));
        assert_eq!(big.split_ratio(), Some(0.95));
        assert_eq!(big.aggregate_ratio(), Some(0.9));
        assert!(summaries(&records, "shm").is_empty());
        assert_eq!(ratio(1.0, 0.0), None);
    }

    #[test]
    fn rounds_keep_each_setup_apart() {
        let row = |setup: Setup, bw| {
            setup.row(&Record::new(
                "pingpong",
                "tcp",
                "navette",
                64,
                Some(1.0),
                Some(bw),
            ))
        };
        let skip = |setup: Setup| Skip {
            pattern: "multirail".into(),
            transport: "tcp".into(),
            implementation: "navette".into(),
            segments: None,
            threads: None,
            rails: Some(setup.rails.into()),
            strategy: Some(setup.strategy_name().into()),
            kind: SkipKind::Failed,
            sizes: vec![64],
            reason: "it failed".into(),
        };
        let mut kept = Outcome {
            records: vec![row(SETUPS[0], 300.0), row(SETUPS[2], 200.0)],
            skipped: vec![skip(SETUPS[1]), skip(SETUPS[3])],
            notes: Vec::new(),
        };
        kept.keep_best(Outcome {
            records: vec![
                row(SETUPS[0], 340.0),
                row(SETUPS[1], 320.0),
                row(SETUPS[2], 190.0),
            ],
            skipped: Vec::new(),
            notes: Vec::new(),
        });
        assert_eq!(
            kept.records,
            vec![
                row(SETUPS[0], 340.0),
                row(SETUPS[2], 200.0),
                row(SETUPS[1], 320.0)
            ],
            "split and aggregate on the same links are different rows"
        );
        assert_eq!(
            kept.skipped,
            vec![skip(SETUPS[3])],
            "1+2 aggregate came in round 2; link 2 never did"
        );
    }
}
