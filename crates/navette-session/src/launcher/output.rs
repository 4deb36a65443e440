//! Forwarding a rank's output line by line, optionally prefixed with
//! `[rank] `, so that lines of different ranks never interleave.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};

/// Longest line forwarded in one piece; a longer line is cut there (and,
/// when prefixing, each piece gets its own prefix and newline).
pub(crate) const MAX_LINE: usize = 64 << 10;

/// A writer shared by the forwarding threads; each line is written and
/// flushed under the lock.
#[derive(Clone)]
pub(crate) struct Sink(Arc<Mutex<Out>>);

/// The writer, and the first failure to write to it.
struct Out {
    w: Box<dyn Write + Send>,
    lost: Option<io::Error>,
}

impl Sink {
    pub(crate) fn new(w: Box<dyn Write + Send>) -> Self {
        Self(Arc::new(Mutex::new(Out { w, lost: None })))
    }

    pub(crate) fn emit(&self, prefix: &str, line: &[u8]) {
        // One write per line, so that a line stays whole even on an
        // unbuffered output shared with other processes.
        let mut whole = Vec::with_capacity(prefix.len() + line.len());
        whole.extend_from_slice(prefix.as_bytes());
        whole.extend_from_slice(line);
        let mut out = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // A failed write must not stop the draining, or the rank would
        // block on a full pipe: the line is dropped, and the first failure
        // kept for the report. A reader that went away (EPIPE, as `| head`)
        // is no failure: what it did not read, it did not want.
        let written = out.w.write_all(&whole).and_then(|()| out.w.flush());
        if let Err(e) = written
            && e.kind() != io::ErrorKind::BrokenPipe
            && out.lost.is_none()
        {
            out.lost = Some(e);
        }
    }

    /// Why lines could not be written, if some could not (see
    /// [`Self::emit`]).
    pub(crate) fn lost(&self) -> Option<String> {
        let out = self.0.lock().unwrap_or_else(|e| e.into_inner());
        out.lost.as_ref().map(ToString::to_string)
    }
}

/// Copies `src` to `sink` line by line until end of file or error. With a
/// `prefix`, every line is prefixed and ends with a newline (one is added
/// to a last line without it).
pub(crate) fn forward(src: impl Read, prefix: &str, sink: &Sink) {
    let mut reader = BufReader::with_capacity(MAX_LINE, src);
    let mut line = Vec::new();
    let emit = |line: &mut Vec<u8>| {
        if !prefix.is_empty() && line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        sink.emit(prefix, line);
        line.clear();
    };
    loop {
        let buf = match reader.fill_buf() {
            Ok(buf) => buf,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        if buf.is_empty() {
            break;
        }
        let (take, complete) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len().min(MAX_LINE - line.len()), false),
        };
        line.extend_from_slice(&buf[..take]);
        reader.consume(take);
        if complete || line.len() >= MAX_LINE {
            emit(&mut line);
        }
    }
    if !line.is_empty() {
        emit(&mut line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl Write for Buf {
        fn write(&mut self, data: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(data);
            Ok(data.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn run(input: &[u8], prefix: &str) -> Vec<u8> {
        let buf = Buf::default();
        forward(input, prefix, &Sink::new(Box::new(buf.clone())));
        buf.0.lock().unwrap().clone()
    }

    #[test]
    fn lines_are_prefixed_and_terminated() {
        assert_eq!(run(b"a\nbc\nd", "[1] "), b"[1] a\n[1] bc\n[1] d\n");
        assert_eq!(run(b"a\nbc\nd", ""), b"a\nbc\nd");
        assert_eq!(run(b"", "[1] "), b"");
    }

    #[test]
    fn long_lines_are_cut() {
        let input = vec![b'x'; MAX_LINE * 2 + 5];
        let out = run(&input, "[0] ");
        let lines: Vec<&[u8]> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].len(), 4 + MAX_LINE);
        assert_eq!(lines[2].len(), 4 + 5);
    }
}
