//! A `redis-server` of a test's own: for tests that hang, stop or break Redis, which
//! they must never do to the stack's shared one.

use std::time::Duration;

/// A `redis-server` of this test's own on a free loopback port, killed on drop.
#[derive(Debug)]
pub struct PrivateRedis {
    child: std::process::Child,
    /// Its `redis://` URL.
    pub url: String,
}

impl PrivateRedis {
    /// Starts one and waits until it answers (a loud failure if `redis-server` is
    /// not installed: `ops/stack up` installs it).
    pub fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = std::process::Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("redis-server is not installed (ops/stack up installs it)");
        // Owned from here: a server that never answers is killed on the panic's drop.
        let redis = Self {
            child,
            url: format!("redis://127.0.0.1:{port}"),
        };
        crate::eventually_blocking(
            Duration::from_secs(30),
            &format!("the private redis-server answering on port {port}"),
            || std::net::TcpStream::connect(("127.0.0.1", port)),
        );
        redis
    }

    /// Hangs the server now (SIGSTOP) and resumes it after `d` from a thread; join
    /// the thread for whether the resume was sent.
    pub fn hang_for(&self, d: Duration) -> std::thread::JoinHandle<bool> {
        self.signal("-STOP");
        let pid = self.child.id().to_string();
        std::thread::spawn(move || {
            // Time is the subject: the server stays hung for `d`.
            std::thread::sleep(d);
            std::process::Command::new("kill")
                .args(["-CONT", &pid])
                .status()
                .is_ok_and(|s| s.success())
        })
    }

    /// Sends `sig` (e.g. `-STOP`, `-CONT`) to the server; panics if `kill` fails.
    pub fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }
}

impl Drop for PrivateRedis {
    fn drop(&mut self) {
        self.signal("-CONT");
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
