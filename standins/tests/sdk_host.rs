//! The `sdk-host` binary as its parent starts it, without a server: its refusals of a
//! bad start. (That `cargo test` builds this binary is what lets the replays' pool
//! find it beside the load tester; the host's traffic is exercised by the e2e tier's
//! `kill-sdk-host` replays.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

fn host() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sdk-host"))
}

#[test]
fn a_missing_config_ends_the_host_with_its_path() {
    let path = std::env::temp_dir().join(format!("no-such-sdk-config-{}.toml", std::process::id()));
    let out = host().arg("--config").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sdk-host FAILED: cannot read"), "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(
        out.stdout.is_empty(),
        "a failed host wrote to the pipe: {:?}",
        out.stdout
    );
}

#[test]
fn a_malformed_config_is_refused_before_any_connection() {
    let path = std::env::temp_dir().join(format!("bad-sdk-config-{}.toml", std::process::id()));
    std::fs::write(&path, "this is = not [ toml").unwrap();
    let out = host().arg("--config").arg(&path).output().unwrap();
    std::fs::remove_file(&path).unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("sdk-host FAILED"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn the_config_flag_is_required() {
    let out = host().output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap's usage error");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--config"));
}
