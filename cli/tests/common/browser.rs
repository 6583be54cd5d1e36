//! [`Browser`]: a real headless Chromium driven over WebDriver by
//! `chromedriver` (Debian's `chromium` and `chromium-driver`, which the
//! Makefile installs), on a private port with a fresh profile directory,
//! stopped even when the test fails. Each step can save a screenshot under
//! the target directory (`console-screenshots/`).

use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// A headless Chromium session and the driver that runs it.
pub(crate) struct Browser {
    pub(crate) client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    shots: PathBuf,
}

/// A free loopback port (bound and released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .expect("a free port")
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session with a
    /// `width` x `height` window; screenshots go to
    /// `<target>/console-screenshots/<suite>/`.
    pub(crate) async fn start(suite: &str, width: u32, height: u32) -> Browser {
        let port = free_port();
        // Its own process group, so the Chromium it starts dies with it.
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("chromedriver runs (make test installs chromium-driver)");
        let profile = tempfile::tempdir().unwrap();
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update",
                    "--disable-sync",
                    format!("--user-data-dir={}", profile.path().display()),
                    format!("--window-size={width},{height}"),
                ],
            },
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = loop {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(err) => {
                    assert!(
                        Instant::now() < deadline,
                        "chromedriver never answered: {err}"
                    );
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        };
        let shots = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
            .join("console-screenshots")
            .join(suite);
        std::fs::create_dir_all(&shots).unwrap();
        Browser {
            client,
            driver,
            _profile: profile,
            shots,
        }
    }

    /// Saves a screenshot of the page as `<name>.png`.
    pub(crate) async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("a screenshot");
        std::fs::write(self.shots.join(format!("{name}.png")), png).unwrap();
    }

    /// The value of the JavaScript expression `expression` on the page.
    pub(crate) async fn eval(&self, expression: &str) -> Value {
        self.client
            .execute(&format!("return ({expression});"), Vec::new())
            .await
            .unwrap_or_else(|err| panic!("evaluating {expression}: {err}"))
    }

    /// Waits up to 10 s until `expression` is `true` on the page; panics
    /// naming `what` (and saving a screenshot) otherwise.
    pub(crate) async fn until(&self, expression: &str, what: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.eval(expression).await == Value::Bool(true) {
                return;
            }
            if Instant::now() > deadline {
                self.screenshot("timed-out").await;
                let body = self.eval("document.body.innerText").await;
                panic!("timed out waiting for {what}; the page shows:\n{body}");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The element `css` selects.
    pub(crate) async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.client
            .find(Locator::Css(css))
            .await
            .unwrap_or_else(|err| panic!("no element {css}: {err}"))
    }

    /// Replaces the value of the input `css` with `text`.
    pub(crate) async fn fill(&self, css: &str, text: &str) {
        let input = self.find(css).await;
        input.clear().await.unwrap();
        input.send_keys(text).await.unwrap();
    }

    /// Clicks the element `css`.
    pub(crate) async fn click(&self, css: &str) {
        self.find(css).await.click().await.unwrap();
    }
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group: the driver and the
    /// browser it started, even when the test failed midway.
    fn drop(&mut self) {
        let group = format!("-{}", self.driver.id());
        let _ = Command::new("kill").args(["-KILL", "--", &group]).status();
        let _ = self.driver.wait();
    }
}
