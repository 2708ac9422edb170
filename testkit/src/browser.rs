//! A real browser for the tests: Debian's headless `chromium`, driven over the W3C
//! WebDriver protocol by Debian's `chromedriver` (package `chromium-driver`, installed by
//! `ops/test`). No browser library: WebDriver is HTTP and JSON, which `reqwest` speaks.
//!
//! A missing browser or driver fails the test with what to install; it never skips.
//! The driver process is killed when the [`Browser`] is dropped.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

/// The WebDriver element key (W3C).
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session behind its own chromedriver.
#[derive(Debug)]
pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
    _profile: PathBuf,
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ends the WebDriver session first (chromedriver then closes Chromium), with a
        // plain blocking request: a drop cannot await.
        use std::io::{Read, Write};
        let addr = self.base.trim_start_matches("http://").to_string();
        if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
            let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
            let _ = write!(
                s,
                "DELETE /session/{} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                self.session
            );
            let _ = s.read_to_end(&mut Vec::new());
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
        let _ = std::fs::remove_dir_all(&self._profile);
    }
}

/// A phone's screen (CSS pixels), the narrowest the page is laid out for.
pub const PHONE: (u32, u32) = (390, 844);
/// A desktop window.
pub const DESKTOP: (u32, u32) = (1280, 900);

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("no free port for chromedriver: {e}"))
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
}

impl Browser {
    /// Starts chromedriver and a headless Chromium window of `size` (CSS pixels).
    /// Panics, naming the package, when either is not installed.
    pub async fn start(size: (u32, u32)) -> Self {
        let driver_bin = which("chromedriver").unwrap_or_else(|| {
            panic!("chromedriver is not installed: `apt-get install -y chromium-driver` (ops/test does it)")
        });
        let chromium = which("chromium").unwrap_or_else(|| {
            panic!("chromium is not installed: `apt-get install -y chromium` (ops/test does it)")
        });
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(120))
            .build()
            .unwrap_or_else(|e| panic!("http client: {e}"));
        let profile = std::env::temp_dir().join(format!(
            "reward-browser-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        // A port picked and released can be taken again before the driver binds it:
        // try a few.
        for _ in 0..5 {
            let port = free_port();
            let mut driver = Command::new(&driver_bin)
                .arg(format!("--port={port}"))
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start chromedriver: {e}"));
            let base = format!("http://127.0.0.1:{port}");
            // Ready, or gone (`Ok(false)`: it could not bind the port; try another).
            let ready = crate::try_eventually(
                Duration::from_secs(60),
                "chromedriver to answer ready",
                async || {
                    if let Ok(Some(_)) = driver.try_wait() {
                        return Ok(false);
                    }
                    let r = http
                        .get(format!("{base}/status"))
                        .send()
                        .await
                        .map_err(|e| e.to_string())?;
                    let v = r.json::<Value>().await.map_err(|e| e.to_string())?;
                    if v["value"]["ready"] == json!(true) {
                        Ok(true)
                    } else {
                        Err(format!("not ready: {v}"))
                    }
                },
            )
            .await
            .unwrap_or(false);
            if !ready {
                let _ = driver.kill();
                let _ = driver.wait();
                continue;
            }
            // From here the driver belongs to a Browser, whose drop kills it even if
            // the session cannot be made.
            let mut b = Self {
                driver,
                base,
                session: String::new(),
                http,
                _profile: profile,
            };
            let caps = json!({"capabilities": {"alwaysMatch": {
                "browserName": "chrome",
                "goog:chromeOptions": {
                    "binary": chromium.display().to_string(),
                    "args": [
                        "--headless=new", "--no-sandbox", "--disable-gpu",
                        "--disable-dev-shm-usage", "--no-first-run", "--disable-extensions",
                        "--force-device-scale-factor=1", "--lang=en-US",
                        format!("--window-size={},{}", size.0, size.1),
                        format!("--user-data-dir={}", b._profile.display()),
                    ],
                },
            }}});
            let resp = b
                .http
                .post(format!("{}/session", b.base))
                .json(&caps)
                .send()
                .await
                .unwrap_or_else(|e| panic!("chromedriver new session: {e}"));
            let v: Value = resp
                .json()
                .await
                .unwrap_or_else(|e| panic!("chromedriver new session answer: {e}"));
            b.session = v["value"]["sessionId"]
                .as_str()
                .unwrap_or_else(|| panic!("chromedriver did not start chromium: {v}"))
                .to_string();
            b.resize(size).await;
            return b;
        }
        panic!("chromedriver did not answer on any of 5 ports");
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut req = self.http.request(method, &url);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req
            .send()
            .await
            .unwrap_or_else(|e| panic!("webdriver {path}: {e}"));
        let status = resp.status();
        let v: Value = resp
            .json()
            .await
            .unwrap_or_else(|e| panic!("webdriver {path} answer: {e}"));
        assert!(status.is_success(), "webdriver {path}: {status} {v}");
        v["value"].clone()
    }

    /// Opens `url` and waits for the document to load.
    pub async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    /// Sets the window to `size` CSS pixels (the viewport of a screenshot).
    pub async fn resize(&self, size: (u32, u32)) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": size.0, "height": size.1})),
        )
        .await;
    }

    /// Runs `script` (a function body; `arguments` holds `args`) and returns its value.
    pub async fn eval(&self, script: &str, args: Value) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": args })),
        )
        .await
    }

    /// Polls `script` until it returns `true`, up to `within`; panics with `what` and
    /// the page's status line otherwise.
    pub async fn wait_for(&self, what: &str, script: &str, within: Duration) {
        let done = crate::try_eventually(within, what, async || {
            self.eval(script, json!([])).await == json!(true)
        })
        .await;
        if let Err(e) = done {
            let status = self
                .eval(
                    "const s = document.getElementById('status'); return s ? s.textContent : document.title;",
                    json!([]),
                )
                .await;
            panic!("{e}; the page says {status}");
        }
    }

    async fn element(&self, css: &str) -> String {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        v[ELEMENT]
            .as_str()
            .unwrap_or_else(|| panic!("no element {css}: {v}"))
            .to_string()
    }

    /// Clicks the element `css` selects (as a pointer would).
    pub async fn click(&self, css: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/click"),
            Some(json!({})),
        )
        .await;
    }

    /// Types `text` into the element `css` selects.
    pub async fn type_into(&self, css: &str, text: &str) {
        let id = self.element(css).await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{id}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Presses keys on the keyboard, one after the other (WebDriver key codes:
    /// `\u{E004}` Tab, `\u{E007}` Enter).
    pub async fn press(&self, keys: &[&str]) {
        let actions: Vec<Value> = keys
            .iter()
            .flat_map(|k| {
                [
                    json!({"type": "keyDown", "value": k}),
                    json!({"type": "keyUp", "value": k}),
                ]
            })
            .collect();
        self.call(
            reqwest::Method::POST,
            "/actions",
            Some(json!({"actions": [{"type": "key", "id": "keyboard", "actions": actions}]})),
        )
        .await;
    }

    /// Takes the browser off the network (`navigator.onLine` false, an `offline`
    /// event) or puts it back (an `online` event), through chromedriver's network
    /// emulation.
    pub async fn set_offline(&self, offline: bool) {
        self.call(
            reqwest::Method::POST,
            "/chromium/network_conditions",
            Some(json!({"network_conditions": {
                "offline": offline, "latency": 0,
                "download_throughput": -1, "upload_throughput": -1,
            }})),
        )
        .await;
    }

    /// Saves a PNG of the viewport to `path` (its directory is created).
    pub async fn screenshot(&self, path: &Path) {
        let v = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let png = base64::engine::general_purpose::STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap_or_else(|e| panic!("screenshot is not base64: {e}"));
        assert!(png.starts_with(b"\x89PNG"), "screenshot is not a PNG");
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        }
        std::fs::write(path, png).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    }
}
