//! Helpers shared by the integration tests that run examples.

#![allow(dead_code, unreachable_pub)]

use std::path::PathBuf;

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
