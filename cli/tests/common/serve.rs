//! [`Serve`]: a running `subagents serve` on a free loopback port, as the
//! serve tests and the README session drive it.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// A running `serve` and the URL it printed.
pub(crate) struct Serve {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub(crate) base: String,
    stdout: BufReader<std::process::ChildStdout>,
    /// The lines it printed before serving: the URL, then the token line.
    pub(crate) printed: Vec<String>,
}

impl Serve {
    /// Starts `serve --data DATA --listen 127.0.0.1:0` (no token in the
    /// environment) and reads up to its token line.
    pub(crate) fn start(data: &Path) -> Serve {
        Serve::start_with(data, &[])
    }

    /// As [`start`](Self::start), with `extra` arguments.
    pub(crate) fn start_with(data: &Path, extra: &[&str]) -> Serve {
        let mut command = Command::new(env!("CARGO_BIN_EXE_subagents"));
        command.args(Self::arguments(data)).args(extra);
        Serve::spawn(command)
    }

    /// As [`start`](Self::start), with no file allowed to grow past
    /// `bytes` (`prlimit --fsize`; SIGXFSZ ignored, so a write past it
    /// fails with EFBIG as on a full disk) until [`lift_file_limit`](Self::lift_file_limit).
    pub(crate) fn start_file_limited(data: &Path, bytes: u64) -> Serve {
        let mut command = Command::new("sh");
        command
            .args([
                "-c",
                "trap '' XFSZ; exec prlimit --fsize=\"$0\":unlimited \"$@\"",
                &bytes.to_string(),
                env!("CARGO_BIN_EXE_subagents"),
            ])
            .args(Self::arguments(data));
        Serve::spawn(command)
    }

    /// Lets every file of the running server grow again (the disk has room).
    pub(crate) fn lift_file_limit(&self) {
        let lifted = Command::new("prlimit")
            .args([
                "--pid",
                &self.child.id().to_string(),
                "--fsize=unlimited:unlimited",
            ])
            .status()
            .unwrap();
        assert!(lifted.success());
    }

    /// `serve`'s arguments for `data` on a free loopback port.
    fn arguments(data: &Path) -> [&str; 5] {
        [
            "serve",
            "--data",
            data.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ]
    }

    /// Runs `command` (a `serve`) and reads up to its token line.
    fn spawn(mut command: Command) -> Serve {
        let mut child = command
            .env_remove("SUBAGENTS_GATEWAY_TOKEN")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("serve starts");
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut printed = Vec::new();
        let base = loop {
            let mut line = String::new();
            assert!(
                stdout.read_line(&mut line).unwrap() > 0,
                "serve exited: {printed:?}"
            );
            printed.push(line.trim_end().to_owned());
            if let Some(url) = line.trim_end().strip_prefix("serving ") {
                break url.trim_end_matches("/v1/").to_owned();
            }
        };
        // The token line follows the URL.
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        printed.push(line.trim_end().to_owned());
        Serve {
            child,
            base,
            stdout,
            printed,
        }
    }

    /// SIGKILL: the host dies with whatever it held.
    pub(crate) fn kill(mut self) -> std::process::ExitStatus {
        self.child.kill().expect("SIGKILL");
        self.child.wait().unwrap()
    }

    /// SIGTERM, then the exit status and the rest of stdout.
    pub(crate) fn terminate(mut self) -> (std::process::ExitStatus, Vec<String>) {
        let pid = self.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        let status = self.child.wait().unwrap();
        let rest = (&mut self.stdout).lines().map(Result::unwrap).collect();
        (status, rest)
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one `POST /v1/roots` was answered: the root's id, or the refusal's
/// status, code and `Retry-After`.
#[derive(Debug)]
pub(crate) enum Opened {
    /// Acknowledged (201): the root's id.
    Root(String),
    /// A refusal.
    Refused {
        /// Its status.
        status: u16,
        /// Its body's code.
        code: String,
        /// Its `Retry-After` header.
        retry_after: Option<String>,
    },
    /// The connection failed (the server is gone).
    Unanswered,
}

/// Opens a root labelled `label` on `base`.
pub(crate) async fn open_root(
    http: &reqwest::Client,
    base: &str,
    token: &str,
    label: &str,
) -> Opened {
    let Ok(response) = http
        .post(format!("{base}/v1/roots"))
        .bearer_auth(token)
        .json(&serde_json::json!({"label": label}))
        .send()
        .await
    else {
        return Opened::Unanswered;
    };
    let status = response.status().as_u16();
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned);
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    if (200..300).contains(&status) {
        Opened::Root(body["sessionId"].as_str().unwrap_or_default().to_owned())
    } else {
        Opened::Refused {
            status,
            code: body["code"].as_str().unwrap_or_default().to_owned(),
            retry_after,
        }
    }
}

/// Opens roots on `base` one after another until `done` fires, keeping the
/// answers in order.
pub(crate) async fn open_roots_until(
    base: String,
    token: String,
    done: tokio_util::sync::CancellationToken,
) -> Vec<Opened> {
    let http = reqwest::Client::new();
    let mut answers = Vec::new();
    let mut n = 0;
    while !done.is_cancelled() {
        n += 1;
        answers.push(open_root(&http, &base, &token, &format!("load-{n}")).await);
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    answers
}

/// Checks a load's answers across a store outage: every refusal is 503
/// `store/unavailable` with a `Retry-After`, at least one came, and some
/// roots were acknowledged before and after it. The acknowledged ids.
pub(crate) fn acknowledged_across_an_outage(answers: &[Opened]) -> Vec<String> {
    let mut acknowledged = Vec::new();
    let mut refused = 0;
    let mut after_refusal = 0;
    for answer in answers {
        match answer {
            Opened::Root(id) => {
                acknowledged.push(id.clone());
                if refused > 0 {
                    after_refusal += 1;
                }
            }
            Opened::Refused {
                status,
                code,
                retry_after,
            } => {
                assert_eq!(
                    (*status, code.as_str()),
                    (503, "store/unavailable"),
                    "{answer:?}"
                );
                let seconds: u64 = retry_after
                    .as_deref()
                    .and_then(|value| value.parse().ok())
                    .unwrap_or_else(|| panic!("a Retry-After in seconds: {answer:?}"));
                assert!((1..=60).contains(&seconds), "{answer:?}");
                refused += 1;
            }
            Opened::Unanswered => panic!("the server stopped answering"),
        }
    }
    assert!(refused > 0, "the outage was seen by the load");
    assert!(after_refusal > 0, "the load went on after the outage");
    acknowledged
}

/// Checks that `GET /v1/roots` on `base` lists every root of `acknowledged`.
pub(crate) async fn assert_all_listed(base: &str, token: &str, acknowledged: &[String]) {
    let listed = reqwest::Client::new()
        .get(format!("{base}/v1/roots"))
        .bearer_auth(token)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for id in acknowledged {
        assert!(
            listed.contains(id.as_str()),
            "acknowledged root {id} is lost"
        );
    }
}

/// `GET /readyz`'s status on `base` (0 when it does not answer).
pub(crate) async fn readiness(http: &reqwest::Client, base: &str) -> u16 {
    http.get(format!("{base}/readyz"))
        .send()
        .await
        .map_or(0, |response| response.status().as_u16())
}
