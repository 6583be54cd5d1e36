//! # subagent-browser
//!
//! [`Browser`]: a real headless Chromium (Debian's `chromium`), driven over
//! WebDriver by `chromedriver` (Debian's `chromium-driver`, which the
//! Makefile installs), on a private loopback port with a fresh profile
//! directory. The driver and the browser it starts share one process
//! group, which is killed when the [`Browser`] is dropped, so a test that
//! fails midway leaves no Chromium behind.
//!
//! The console's browser tests (`cli/tests/console*.rs`) and
//! `subagents-bench console` both drive the page through it. Every failure
//! is a [`BrowserError`]; nothing here panics.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::{json, Value};

/// Where Debian installs Chromium.
const CHROMIUM: &str = "/usr/bin/chromium";

/// How long `chromedriver` may take to answer its first session request.
const DRIVER_START: Duration = Duration::from_secs(20);

/// How long [`Browser::until`] waits by default.
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// What can go wrong driving the browser.
#[derive(Debug, thiserror::Error)]
pub enum BrowserError {
    /// `chromedriver` could not be started (not installed: `make deps`).
    #[error(
        "chromedriver does not start ({0}); `make deps` installs chromium and chromium-driver"
    )]
    DriverMissing(std::io::Error),
    /// `chromedriver` never accepted a session.
    #[error("chromedriver never opened a session within {DRIVER_START:?}: {0}")]
    DriverSilent(String),
    /// A WebDriver command failed.
    #[error("{what}: {cause}")]
    WebDriver {
        /// The command.
        what: String,
        /// The driver's answer.
        cause: String,
    },
    /// A condition did not hold in time; a screenshot `timed-out.png` was
    /// saved and `page` is the page's visible text.
    #[error("timed out after {waited:?} waiting for {what}; the page shows:\n{page}")]
    TimedOut {
        /// The condition, in words.
        what: String,
        /// How long it waited.
        waited: Duration,
        /// `document.body.innerText` at the time.
        page: String,
    },
    /// A file could not be written.
    #[error("writing {path}: {cause}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        cause: std::io::Error,
    },
}

/// A headless Chromium session, the driver that runs it, and where its
/// screenshots go.
pub struct Browser {
    client: Client,
    driver: Child,
    _profile: tempfile::TempDir,
    shots: PathBuf,
}

/// A free loopback port (bound and released).
fn free_port() -> Result<u16, BrowserError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|address| address.port())
        .map_err(BrowserError::DriverMissing)
}

/// A WebDriver failure of `what`.
fn webdriver(what: impl Into<String>) -> impl FnOnce(fantoccini::error::CmdError) -> BrowserError {
    let what = what.into();
    move |cause| BrowserError::WebDriver {
        what,
        cause: cause.to_string(),
    }
}

impl Browser {
    /// Starts `chromedriver` and a headless Chromium session with a
    /// `width` x `height` window. Screenshots go to `shots`, which is
    /// created.
    ///
    /// # Errors
    /// [`BrowserError::DriverMissing`] without chromedriver,
    /// [`BrowserError::DriverSilent`] when it never opens a session,
    /// [`BrowserError::Io`] when `shots` cannot be created.
    pub async fn start(shots: &Path, width: u32, height: u32) -> Result<Browser, BrowserError> {
        std::fs::create_dir_all(shots).map_err(|cause| BrowserError::Io {
            path: shots.to_owned(),
            cause,
        })?;
        let profile = tempfile::tempdir().map_err(|cause| BrowserError::Io {
            path: std::env::temp_dir(),
            cause,
        })?;
        let port = free_port()?;
        // Its own process group, so the Chromium it starts dies with it.
        let driver = Command::new("chromedriver")
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(BrowserError::DriverMissing)?;
        // From here on, a failure drops `browser`, which kills the group.
        let capabilities = json!({
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": CHROMIUM,
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
            unreachable!("a json! object literal")
        };
        let mut guard = DriverGuard(Some(driver));
        let connector = hyper_util::client::legacy::connect::HttpConnector::new();
        let deadline = Instant::now() + DRIVER_START;
        let client = loop {
            match ClientBuilder::new(connector.clone())
                .capabilities(capabilities.clone())
                .connect(&format!("http://127.0.0.1:{port}"))
                .await
            {
                Ok(client) => break client,
                Err(err) if Instant::now() >= deadline => {
                    return Err(BrowserError::DriverSilent(err.to_string()))
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        };
        Ok(Browser {
            client,
            driver: guard
                .0
                .take()
                .expect("the guard holds the driver until here"),
            _profile: profile,
            shots: shots.to_owned(),
        })
    }

    /// The WebDriver client, for what the helpers below do not cover.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Opens `url`.
    ///
    /// # Errors
    /// The driver's refusal.
    pub async fn goto(&self, url: &str) -> Result<(), BrowserError> {
        self.client
            .goto(url)
            .await
            .map_err(webdriver(format!("opening {url}")))
    }

    /// Saves a screenshot of the page as `<shots>/<name>.png`; returns its
    /// path.
    ///
    /// # Errors
    /// The driver's refusal, or the file not written.
    pub async fn screenshot(&self, name: &str) -> Result<PathBuf, BrowserError> {
        let png = self
            .client
            .screenshot()
            .await
            .map_err(webdriver("taking a screenshot"))?;
        let path = self.shots.join(format!("{name}.png"));
        std::fs::write(&path, png).map_err(|cause| BrowserError::Io {
            path: path.clone(),
            cause,
        })?;
        Ok(path)
    }

    /// The value of the JavaScript expression `expression` on the page.
    ///
    /// # Errors
    /// A script error, or the driver's refusal.
    pub async fn eval(&self, expression: &str) -> Result<Value, BrowserError> {
        self.client
            .execute(&format!("return ({expression});"), Vec::new())
            .await
            .map_err(webdriver(format!("evaluating {expression}")))
    }

    /// Runs the statement `script` on the page.
    ///
    /// # Errors
    /// A script error, or the driver's refusal.
    pub async fn run(&self, script: &str) -> Result<(), BrowserError> {
        self.client
            .execute(script, Vec::new())
            .await
            .map(drop)
            .map_err(webdriver(format!("running {script}")))
    }

    /// Waits up to [`DEFAULT_WAIT`] until `expression` is `true` on the
    /// page.
    ///
    /// # Errors
    /// [`BrowserError::TimedOut`] naming `what` (a screenshot
    /// `timed-out.png` is saved first), or a failed evaluation.
    pub async fn until(&self, expression: &str, what: &str) -> Result<(), BrowserError> {
        self.until_within(expression, what, DEFAULT_WAIT).await
    }

    /// As [`until`](Self::until), waiting up to `wait`.
    ///
    /// # Errors
    /// As [`until`](Self::until).
    pub async fn until_within(
        &self,
        expression: &str,
        what: &str,
        wait: Duration,
    ) -> Result<(), BrowserError> {
        let started = Instant::now();
        loop {
            if self.eval(expression).await? == Value::Bool(true) {
                return Ok(());
            }
            if started.elapsed() > wait {
                // Best effort: the timeout is the error worth reporting.
                let _ = self.screenshot("timed-out").await;
                let page = self
                    .eval("document.body.innerText")
                    .await
                    .map(|text| text.as_str().unwrap_or_default().to_owned())
                    .unwrap_or_default();
                return Err(BrowserError::TimedOut {
                    what: what.to_owned(),
                    waited: started.elapsed(),
                    page,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The element `css` selects.
    ///
    /// # Errors
    /// No such element.
    pub async fn find(&self, css: &str) -> Result<Element, BrowserError> {
        self.client
            .find(Locator::Css(css))
            .await
            .map_err(webdriver(format!("finding {css}")))
    }

    /// Replaces the value of the input `css` with `text`.
    ///
    /// # Errors
    /// No such element, or the driver's refusal.
    pub async fn fill(&self, css: &str, text: &str) -> Result<(), BrowserError> {
        let input = self.find(css).await?;
        input
            .clear()
            .await
            .map_err(webdriver(format!("clearing {css}")))?;
        input
            .send_keys(text)
            .await
            .map_err(webdriver(format!("typing into {css}")))
    }

    /// Types `keys` (WebDriver key codes such as `"\u{E015}"` for Down)
    /// into the element `css`.
    ///
    /// # Errors
    /// No such element, or the driver's refusal.
    pub async fn press(&self, css: &str, keys: &str) -> Result<(), BrowserError> {
        self.find(css)
            .await?
            .send_keys(keys)
            .await
            .map_err(webdriver(format!("pressing keys in {css}")))
    }

    /// Clicks the element `css`.
    ///
    /// # Errors
    /// No such element, or the driver's refusal.
    pub async fn click(&self, css: &str) -> Result<(), BrowserError> {
        self.find(css)
            .await?
            .click()
            .await
            .map_err(webdriver(format!("clicking {css}")))
    }

    /// Resizes the window to `width` x `height`.
    ///
    /// # Errors
    /// The driver's refusal.
    pub async fn resize(&self, width: u32, height: u32) -> Result<(), BrowserError> {
        self.client
            .set_window_size(width, height)
            .await
            .map_err(webdriver(format!("resizing to {width}x{height}")))
    }
}

/// Kills the driver's process group unless disarmed: [`Browser::start`]
/// holds the driver in one until the session is open.
struct DriverGuard(Option<Child>);

impl Drop for DriverGuard {
    fn drop(&mut self) {
        if let Some(driver) = self.0.as_mut() {
            kill_group(driver);
        }
    }
}

/// Kills `driver`'s whole process group (the driver and the browser it
/// started) and reaps the driver.
fn kill_group(driver: &mut Child) {
    let Ok(group) = i32::try_from(driver.id()) else {
        let _ = driver.kill();
        let _ = driver.wait();
        return;
    };
    let _ = Command::new("kill")
        .args(["-KILL", "--", &format!("-{group}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    let _ = driver.wait();
}

impl Drop for Browser {
    /// Kills chromedriver's whole process group, even when a test failed
    /// midway.
    fn drop(&mut self) {
        kill_group(&mut self.driver);
    }
}
