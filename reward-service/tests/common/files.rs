//! Files the tests use: fresh directories, the workspace's binaries.

/// A fresh, empty directory under the system temp dir.
pub fn unique_dir(prefix: &str) -> std::path::PathBuf {
    reward_testkit::temp_dir(prefix)
}

/// A binary of the workspace (`reward-service`, `reward-ctl`), built beside this test
/// by `cargo build --workspace`; fails loudly when it is not.
pub fn workspace_bin(name: &str) -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe
        .parent()
        .and_then(std::path::Path::parent)
        .unwrap()
        .join(name);
    assert!(
        bin.exists(),
        "{} is not built (cargo build --workspace builds it)",
        bin.display()
    );
    bin
}
