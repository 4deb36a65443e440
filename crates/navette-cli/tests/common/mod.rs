//! Helpers shared by the integration tests that run examples.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;
use std::process::Output;

/// The path of the example `name`, built by cargo beside `navette`.
pub fn example(name: &str) -> PathBuf {
    let navette = PathBuf::from(env!("CARGO_BIN_EXE_navette"));
    let dir = navette
        .parent()
        .expect("the navette binary lives in a directory")
        .join("examples");
    let path = dir.join(name);
    let build = "build the examples: `cargo test -p navette-cli` (without --test) \
                 or `cargo build -p navette-cli --examples`";
    let built = std::fs::metadata(&path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("example {} is missing ({e}): {build}", path.display()));
    let source = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("examples/{name}.rs"));
    if let Ok(written) = std::fs::metadata(&source).and_then(|m| m.modified()) {
        assert!(
            written <= built,
            "example {} is older than {}: {build}",
            path.display(),
            source.display()
        );
    }
    path
}

/// Standard output or error of a job, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Asserts the job succeeded, showing everything it printed if not.
pub fn assert_success(out: &Output) {
    assert_eq!(
        out.status.code(),
        Some(0),
        "job failed\n--- stdout\n{}--- stderr\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
}
