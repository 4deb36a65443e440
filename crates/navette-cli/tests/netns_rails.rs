//! Multi-rail tcp between two network namespaces: `scripts/netns-rails`
//! joins them with two veth pairs on two subnets, rate-limited to 2 and
//! 1 Gbit/s, and `navette run` starts one rank in each with two links.
//! The ranks exchange messages up to 64 MiB both ways, every byte checked,
//! and each link must carry data both ways over its own network.
//!
//! Needs root, `ip` and `tc`: without them the test prints why and passes
//! without running (so does a system that refuses to create namespaces).
//! The namespaces are removed at the end, also when the test fails.
//!
//! The rank program is the `rails` example of this package: `cargo test -p
//! navette-cli` builds it, `cargo test --test netns_rails` alone does not
//! (a missing or outdated example fails the test and says how to build it).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{assert_success, example, text};

/// Seconds before `navette run` ends the job: a hang guard, not a
/// measurement.
const JOB_TIMEOUT: &str = "50";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/netns-rails")
}

/// Why this host cannot run the test, if it cannot.
fn cannot_run() -> Option<String> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().nth(1).map(str::to_owned));
    if uid.as_deref() != Some("0") {
        return Some("not root (network namespaces need it)".to_owned());
    }
    for tool in ["ip", "tc"] {
        let found = Command::new(tool)
            .arg("-V")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return Some(format!("`{tool}` not found (iproute2)"));
        }
    }
    None
}

/// The namespaces of one run; dropping it removes them, also while a
/// failed assertion unwinds.
struct Namespaces {
    name: String,
}

impl Namespaces {
    /// `Ok(None)`: the system refused to create a namespace.
    fn up(name: &str, rates: &str) -> Result<Option<Self>, String> {
        let out = Command::new(script())
            .args(["up", name, "--rates", rates])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| format!("cannot run {}: {e}", script().display()))?;
        match out.status.code() {
            Some(0) => Ok(Some(Self {
                name: name.to_owned(),
            })),
            Some(77) => {
                eprintln!("skipped: {}", text(&out.stderr).trim());
                Ok(None)
            }
            _ => Err(format!(
                "netns-rails up failed: {}{}",
                text(&out.stdout),
                text(&out.stderr)
            )),
        }
    }
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        let down = Command::new(script())
            .args(["down", &self.name])
            .stdin(Stdio::null())
            .output();
        match down {
            Ok(out) if out.status.success() => {}
            Ok(out) => eprintln!(
                "netns-rails down {} failed: {}",
                self.name,
                text(&out.stderr)
            ),
            Err(e) => eprintln!("cannot run netns-rails down {}: {e}", self.name),
        }
    }
}

/// Both namespaces are gone.
fn assert_removed(name: &str) {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let list = text(&out.stdout);
    for rank in 0..2 {
        let ns = format!("{name}-{rank}");
        assert!(
            !list.split_whitespace().any(|w| w == ns),
            "namespace {ns} left behind:\n{list}"
        );
    }
}

/// Runs `rails` in the two namespaces of `name` with the links `use_links`
/// lists (1-based, `netns-rails --use`), with the `split` strategy, which
/// cuts every large message over all the links (so that each link's share
/// does not depend on which rail happens to be idle first).
fn run_rails(name: &str, use_links: &str, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_navette"))
        .env("NAVETTE_STRATEGY", "split")
        .args(["run", "-n", "2", "--timeout", JOB_TIMEOUT, "--"])
        .arg(script())
        .args(["rank-exec", name, "--use", use_links, "--"])
        .arg(example("rails"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("navette runs")
}

#[test]
fn two_rate_limited_links_between_namespaces_carry_checked_messages() {
    if let Some(why) = cannot_run() {
        eprintln!("skipped: {why}");
        return;
    }
    // Unique per run: parallel runs do not see each other's namespaces.
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let name = format!("nvr{:x}", (std::process::id() ^ nanos) & 0xff_ffff);
    {
        let Some(_namespaces) = Namespaces::up(&name, "2gbit,1gbit").unwrap() else {
            return;
        };
        let sizes = "0,1,4K,300K,1M,4M,16M,64M";
        let out = run_rails(&name, "1,2", &["--sizes", sizes, "--expect-links", "2"]);
        assert_success(&out);
        let stdout = text(&out.stdout);
        for rank in 0..2u32 {
            let line = |start: &str| {
                let prefix = format!("[{rank}] rails: {start}");
                stdout
                    .lines()
                    .filter(|l| l.starts_with(&prefix))
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                line(&format!("rank {rank}: checked 8 size(s)")).len(),
                1,
                "{stdout}"
            );
            assert_eq!(
                line(&format!("rank {rank}: all 2 links carried data both ways")).len(),
                1,
                "{stdout}"
            );
            assert_eq!(line(&format!("rank {rank} ok")).len(), 1, "{stdout}");
            // Each link's connections go over its own network: link k
            // joins 10.231.(k+1).1 and 10.231.(k+1).2.
            let connections = line(&format!("rank {rank} link "));
            let connections: Vec<&String> = connections
                .iter()
                .filter(|l| l.contains("connection:"))
                .collect();
            assert!(connections.len() >= 2, "{stdout}");
            for link in 0..2 {
                let of_link: Vec<&&String> = connections
                    .iter()
                    .filter(|l| l.contains(&format!("link {link} connection:")))
                    .collect();
                assert!(
                    !of_link.is_empty(),
                    "no connection on link {link}:\n{stdout}"
                );
                let subnet = format!("10.231.{}.", link + 1);
                for l in of_link {
                    assert_eq!(l.matches(&subnet).count(), 2, "{l}");
                }
            }
        }
        // A rank with one link only (the 1 Gbit/s one) also works.
        let out = run_rails(&name, "2", &["--sizes", "1,64M", "--expect-links", "1"]);
        assert_success(&out);
        assert!(
            text(&out.stdout).contains("10.231.2.1"),
            "{}",
            text(&out.stdout)
        );
    }
    assert_removed(&name);
}
