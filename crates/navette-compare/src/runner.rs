//! Runs the measured programs: each in its own process group (so that a
//! time-out ends `mpirun`'s or the launcher's ranks too), with a time limit,
//! its standard output and error kept under `raw/` and its command line and
//! environment written to `raw/commands.txt` (new for each run).

use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// What a finished (or killed) program left.
#[derive(Clone, Debug)]
pub struct Output {
    /// Its exit status; `None` when it was killed at the time limit.
    pub status: Option<ExitStatus>,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Whether it exited with status 0.
    pub fn success(&self) -> bool {
        self.status.is_some_and(|s| s.success())
    }

    /// Why it did not succeed, in a few words: the first line that looks
    /// like an error (the cause; what follows is often its consequences,
    /// such as a launcher reporting its rank's exit), else the exit status.
    pub fn failure(&self) -> String {
        let is_error = |l: &&str| {
            let l = l.to_ascii_lowercase();
            l.contains("error") || l.contains("failed")
        };
        let said = self
            .stderr
            .lines()
            .find(is_error)
            .or_else(|| self.stdout.lines().find(is_error))
            .map(str::trim);
        match (self.status, said) {
            (None, _) => "killed at the time limit".to_owned(),
            (Some(_), Some(line)) => line.to_owned(),
            (Some(status), None) => format!("exited with {status}"),
        }
    }
}

/// A program started in the background (a server), ended on drop.
#[derive(Debug)]
pub struct Background {
    child: Child,
    name: String,
    readers: Option<(Receiver<String>, Receiver<String>)>,
}

/// Starts programs and keeps their traces.
#[derive(Debug)]
pub struct Runner {
    raw: PathBuf,
    commands: File,
    timeout: Duration,
}

impl Runner {
    /// A runner writing under `raw` (which must exist), killing what runs
    /// longer than `timeout`.
    pub fn new(raw: &Path, timeout: Duration) -> io::Result<Self> {
        let commands = File::create(raw.join("commands.txt"))?;
        Ok(Self {
            raw: raw.to_owned(),
            commands,
            timeout,
        })
    }

    /// The folder of raw outputs.
    pub fn raw_dir(&self) -> &Path {
        &self.raw
    }

    /// Runs `command` to its end or the time limit; its outputs are saved
    /// as `raw/NAME.out` and `raw/NAME.err`.
    pub fn run(&mut self, name: &str, command: &mut Command) -> io::Result<Output> {
        let mut job = self.start(name, command)?;
        let deadline = Instant::now() + self.timeout;
        let status = wait_until(&mut job.child, deadline)?;
        self.finish(job, status)
    }

    /// Starts `command` in the background (a server the next [`run`](Self::run)
    /// talks to); [`finish_background`](Self::finish_background) collects it.
    pub fn start(&mut self, name: &str, command: &mut Command) -> io::Result<Background> {
        let line = describe(command);
        eprintln!("compare: {line}");
        writeln!(self.commands, "[{name}] {line}")?;
        let mut child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", program(command))))?;
        let stdout = child.stdout.take().map(drain);
        let stderr = child.stderr.take().map(drain);
        let readers = stdout.zip(stderr);
        Ok(Background {
            child,
            name: name.to_owned(),
            readers,
        })
    }

    /// Waits for a background program (at most a few seconds: it should be
    /// done once its client is), kills it otherwise, and saves its outputs.
    pub fn finish_background(&mut self, mut job: Background) -> io::Result<Output> {
        let status = wait_until(&mut job.child, Instant::now() + Duration::from_secs(5))?;
        self.finish(job, status)
    }

    /// Whether a background program has already exited.
    pub fn has_exited(job: &mut Background) -> bool {
        matches!(job.child.try_wait(), Ok(Some(_)) | Err(_))
    }

    fn finish(&mut self, mut job: Background, status: Option<ExitStatus>) -> io::Result<Output> {
        // A grandchild that left the process group may still hold a pipe:
        // what was read by then is enough.
        let collect =
            |rx: Receiver<String>| rx.recv_timeout(Duration::from_secs(5)).unwrap_or_default();
        let (stdout, stderr) = match job.readers.take() {
            Some((out, err)) => (collect(out), collect(err)),
            None => Default::default(),
        };
        std::fs::write(self.raw.join(format!("{}.out", job.name)), &stdout)?;
        if !stderr.is_empty() {
            std::fs::write(self.raw.join(format!("{}.err", job.name)), &stderr)?;
        }
        let what = status.map_or_else(|| "killed at the time limit".into(), |s| s.to_string());
        writeln!(self.commands, "[{}] {what}", job.name)?;
        Ok(Output {
            status,
            stdout,
            stderr,
        })
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            kill_group(&self.child);
            let _ = self.child.wait();
        }
    }
}

/// Waits for `child` until `deadline`; kills its process group then.
fn wait_until(child: &mut Child, deadline: Instant) -> io::Result<Option<ExitStatus>> {
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            kill_group(child);
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the process group that `child` leads (started with
/// `process_group(0)`, so its id is the group's), by the `kill` command.
fn kill_group(child: &Child) {
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{}", child.id())])
        .stderr(Stdio::null())
        .status();
}

fn drain(mut pipe: impl Read + Send + 'static) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        let _ = tx.send(String::from_utf8_lossy(&bytes).into_owned());
    });
    rx
}

fn program(command: &Command) -> String {
    command.get_program().to_string_lossy().into_owned()
}

/// `command` as a shell line: the variables it sets, the program, the
/// arguments, quoted where needed.
pub fn describe(command: &Command) -> String {
    let envs = command.get_envs().filter_map(|(k, v)| {
        v.map(|v| format!("{}={}", k.to_string_lossy(), quote(&v.to_string_lossy())))
    });
    let words = std::iter::once(program(command))
        .chain(command.get_args().map(|a| a.to_string_lossy().into_owned()))
        .map(|w| quote(&w));
    envs.chain(words).collect::<Vec<_>>().join(" ")
}

fn quote(word: &str) -> String {
    let plain = !word.is_empty()
        && word
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=,:+@%".contains(c));
    if plain {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_lines() {
        let mut command = Command::new("ucx_perftest");
        command
            .env("UCX_TLS", "sm,self")
            .args(["127.0.0.1", "-t", "tag_lat", "it's"]);
        assert_eq!(
            describe(&command),
            r"UCX_TLS=sm,self ucx_perftest 127.0.0.1 -t tag_lat 'it'\''s'"
        );
    }

    #[test]
    fn failure_reasons() {
        let output = |code: i32, stderr: &str| {
            use std::os::unix::process::ExitStatusExt;
            Output {
                status: Some(ExitStatus::from_raw(code << 8)),
                stdout: String::new(),
                stderr: stderr.to_owned(),
            }
        };
        let out = output(
            1,
            "navette: error: NAVETTE_DRIVER=shm: not available yet\nnavette run: rank 0 exited\n",
        );
        assert!(!out.success());
        assert_eq!(
            out.failure(),
            "navette: error: NAVETTE_DRIVER=shm: not available yet"
        );
        assert_eq!(output(3, "").failure(), "exited with exit status: 3");
        assert!(output(0, "").success());
    }
}

#[cfg(test)]
mod time_limit {
    use super::*;

    #[test]
    fn a_program_past_its_limit_is_killed_and_its_output_kept() {
        let raw =
            std::env::temp_dir().join(format!("navette-compare-runner-{}", std::process::id()));
        std::fs::create_dir_all(&raw).unwrap();
        let mut runner = Runner::new(&raw, Duration::from_secs(1)).unwrap();
        let mut command = Command::new("sh");
        command.args(["-c", "echo started; sleep 30 & wait"]);
        let output = runner.run("sleeper", &mut command).unwrap();
        assert_eq!(output.status, None);
        assert_eq!(output.stdout, "started\n");
        assert_eq!(output.failure(), "killed at the time limit");
        let saved = std::fs::read_to_string(raw.join("sleeper.out")).unwrap();
        assert_eq!(saved, "started\n");
        let commands = std::fs::read_to_string(raw.join("commands.txt")).unwrap();
        assert!(
            commands.contains("[sleeper] killed at the time limit"),
            "{commands}"
        );
        std::fs::remove_dir_all(&raw).unwrap();
    }
}
