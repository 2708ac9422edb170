//! What the load tester's integration tests share.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The repository's root (where `ops/`, `docs/` and `loadtest/profiles/` are).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// Runs `cmd` to its end: its exit code (-1 when killed) and stdout then stderr.
#[allow(dead_code)] // each test file compiles this module; not all of them run commands
pub fn output(cmd: &mut std::process::Command) -> (i32, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}
