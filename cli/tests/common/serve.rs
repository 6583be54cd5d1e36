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
        let mut child = Command::new(env!("CARGO_BIN_EXE_subagents"))
            .args([
                "serve",
                "--data",
                data.to_str().unwrap(),
                "--listen",
                "127.0.0.1:0",
            ])
            .args(extra)
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
