//! [`TestServer`]: a real PostgreSQL server for tests (feature `testing`).
//!
//! It finds `initdb`, `pg_ctl` and `postgres` on `PATH` or under
//! `/usr/lib/postgresql/*/bin` (the newest), runs `initdb` into a fresh
//! temporary directory and starts `postgres` on a free private port of
//! 127.0.0.1, with its socket in that directory, in a process group of its
//! own. PostgreSQL refuses to run as root, so as root the directory is
//! given to the `postgres` user and every PostgreSQL command runs through
//! `runuser -u postgres --`.
//!
//! It is stopped at the end, even on failure:
//! - dropping a [`TestServer`] stops it (fast, then SIGKILL) and removes
//!   its directory, also while a test panics;
//! - a watchdog process (`sh`, reading a pipe this process holds) stops it
//!   and removes the directory when this process exits in any way,
//!   SIGKILL included, which is what stops [`TestServer::shared`], a
//!   `static` that is never dropped;
//! - the first start in a process sweeps the directories (prefix
//!   `subagents-pg-`) whose owning process is dead: it stops what still
//!   runs there and deletes them.
//!
//! For speed the server runs with `fsync=off` (unless started with
//! [`TestServer::start_durable`], as benchmarks are): a crash of the PostgreSQL
//! processes (what [`TestServer::kill`] and [`TestServer::restart`] do)
//! loses nothing, a crash of the machine could. Tests isolate by schema
//! (or database) on one shared server.

use std::fs::{self, File};
use std::io::{Read as _, Write as _};
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Once, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tempfile::TempDir;

use crate::options::PgOptions;

/// The prefix of every server directory under the temporary directory.
pub const DIRECTORY_PREFIX: &str = "subagents-pg-";

/// The file in a server directory naming the process that owns it.
const OWNER_FILE: &str = "owner.pid";

/// How long a server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// Why a test server could not be started or stopped.
#[derive(Debug, thiserror::Error)]
pub enum TestServerError {
    /// No PostgreSQL binaries were found.
    #[error("PostgreSQL is not installed (looked on PATH and under /usr/lib/postgresql/*/bin for initdb, pg_ctl and postgres)")]
    NotInstalled,
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A PostgreSQL command failed.
    #[error("{command} failed: {detail}")]
    Command {
        /// The command.
        command: String,
        /// Its exit status and output.
        detail: String,
    },
    /// The server did not come up; the detail ends with its log's tail.
    #[error("PostgreSQL did not start: {0}")]
    Start(String),
}

fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> TestServerError {
    let what = what.into();
    move |source| TestServerError::Io { what, source }
}

/// The PostgreSQL programs a server runs.
#[derive(Clone, Debug)]
struct Binaries {
    initdb: PathBuf,
    pg_ctl: PathBuf,
    postgres: PathBuf,
}

impl Binaries {
    fn in_dir(dir: &Path) -> Option<Binaries> {
        let binaries = Binaries {
            initdb: dir.join("initdb"),
            pg_ctl: dir.join("pg_ctl"),
            postgres: dir.join("postgres"),
        };
        [&binaries.initdb, &binaries.pg_ctl, &binaries.postgres]
            .iter()
            .all(|path| path.is_file())
            .then_some(binaries)
    }

    fn find() -> Result<Binaries, TestServerError> {
        if let Some(path) = std::env::var_os("PATH") {
            if let Some(found) = std::env::split_paths(&path).find_map(|dir| Binaries::in_dir(&dir))
            {
                return Ok(found);
            }
        }
        let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        versions.sort();
        versions
            .iter()
            .rev()
            .find_map(|(_, dir)| Binaries::in_dir(dir))
            .ok_or(TestServerError::NotInstalled)
    }
}

/// The `postgres` account PostgreSQL runs as when this process is root.
#[derive(Clone, Copy, Debug)]
struct Account {
    uid: u32,
    gid: u32,
}

fn is_root() -> bool {
    // SAFETY: geteuid(2) has no preconditions and touches no memory of ours.
    unsafe { libc::geteuid() == 0 }
}

fn id_of(flag: &str) -> Result<u32, TestServerError> {
    let output = Command::new("id")
        .args([flag, "postgres"])
        .output()
        .map_err(io("running id"))?;
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .map_err(|_| TestServerError::Command {
            command: format!("id {flag} postgres"),
            detail: format!(
                "no postgres user ({}); PostgreSQL refuses to run as root",
                String::from_utf8_lossy(&output.stderr).trim()
            ),
        })
}

/// Whether process `pid` exists.
fn alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    // SAFETY: kill(2) with signal 0 only checks that `pid` exists and may
    // be signalled; it sends nothing and touches no memory of ours.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Sends `signal` to process `pid` (a group when negative).
fn signal(pid: i32, signal: i32) {
    if pid == 0 || pid == -1 {
        return;
    }
    // SAFETY: kill(2) touches no memory of ours; `pid` is never 0 or -1
    // (this process's group, or every process).
    unsafe {
        libc::kill(pid, signal);
    }
}

/// The postmaster's pid and status line from `data/postmaster.pid`.
fn postmaster_status(data: &Path) -> Option<(i32, String)> {
    let text = fs::read_to_string(data.join("postmaster.pid")).ok()?;
    let lines: Vec<&str> = text.lines().collect();
    let pid = lines.first()?.trim().parse().ok()?;
    let status = lines.get(7).map_or("", |line| line.trim()).to_owned();
    Some((pid, status))
}

/// Whether `pid` is a PostgreSQL process (so a stale pid is never killed).
fn is_postgres(pid: i32) -> bool {
    fs::read(format!("/proc/{pid}/cmdline"))
        .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains("postgres"))
}

/// Stops the postmaster of `data` if one runs: SIGQUIT (immediate
/// shutdown), then SIGKILL after `grace`.
fn stop_postmaster_of(data: &Path, grace: Duration) {
    let Some((pid, _)) = postmaster_status(data) else {
        return;
    };
    if !alive(pid) || !is_postgres(pid) {
        return;
    }
    signal(pid, libc::SIGQUIT);
    let deadline = Instant::now() + grace;
    while alive(pid) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    if alive(pid) {
        signal(pid, libc::SIGKILL);
    }
}

/// Stops and deletes the servers of dead owners (a SIGKILLed test run).
fn sweep_stale() {
    let Ok(entries) = fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        if !name.to_string_lossy().starts_with(DIRECTORY_PREFIX) {
            continue;
        }
        let dir = entry.path();
        let owner = fs::read_to_string(dir.join(OWNER_FILE))
            .ok()
            .and_then(|text| text.trim().parse::<i32>().ok());
        let stale = match owner {
            Some(pid) => !alive(pid),
            // Killed between creating the directory and writing the owner:
            // stale once it is an hour old.
            None => entry
                .metadata()
                .and_then(|meta| meta.modified())
                .ok()
                .and_then(|modified| modified.elapsed().ok())
                .is_some_and(|age| age > Duration::from_secs(3600)),
        };
        if stale {
            stop_postmaster_of(&dir.join("data"), Duration::from_secs(3));
            let _ = fs::remove_dir_all(&dir);
        }
    }
}

/// A port of 127.0.0.1 that was free a moment ago.
fn free_port() -> Result<u16, TestServerError> {
    let listener =
        TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io("picking a free port"))?;
    Ok(listener
        .local_addr()
        .map_err(io("picking a free port"))?
        .port())
}

/// Why one attempt to start failed.
enum StartFailure {
    /// The port was taken, or an old server's memory is still held: try again.
    Retry(String),
    /// Anything else.
    Fatal(TestServerError),
}

/// A process that stops the server's group and deletes its directory
/// when this process exits (its stdin pipe closes).
struct Watchdog {
    child: Child,
    _pipe: ChildStdin,
}

impl Watchdog {
    fn start(group: u32, dir: &Path) -> Result<Watchdog, TestServerError> {
        let script = r#"read -r _; kill -s QUIT -- "-$1" 2>/dev/null; if [ "$2" -gt 1 ]; then kill -s QUIT -- "$2" 2>/dev/null; fi; sleep 3; kill -s KILL -- "-$1" 2>/dev/null; rm -rf -- "$3""#;
        let data = dir.join("data");
        let postmaster = postmaster_status(&data).map_or(0, |(pid, _)| pid);
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("subagents-pg-watchdog")
            .arg(group.to_string())
            .arg(postmaster.to_string())
            .arg(dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .map_err(io("starting the server's watchdog"))?;
        let Some(pipe) = child.stdin.take() else {
            let _ = child.kill();
            let _ = child.wait();
            return Err(TestServerError::Start("the watchdog has no stdin".into()));
        };
        Ok(Watchdog { child, _pipe: pipe })
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        // Our own stop follows; the watchdog must not act on a group id
        // that may be reused.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A running PostgreSQL server of its own, for tests. Stopped and deleted
/// on drop.
pub struct TestServer {
    /// The server directory: `data/`, the socket, `postgres.log`, the owner file.
    dir: TempDir,
    port: u16,
    binaries: Binaries,
    account: Option<Account>,
    postmaster: Option<Child>,
    watchdog: Option<Watchdog>,
    /// `fsync` on ([`TestServer::start_durable`]).
    durable: bool,
}

impl std::fmt::Debug for TestServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestServer")
            .field("dir", &self.dir.path())
            .field("port", &self.port)
            .field("running", &self.postmaster.is_some())
            .finish()
    }
}

static SWEEP: Once = Once::new();
static SHARED: OnceLock<Result<TestServer, String>> = OnceLock::new();

impl TestServer {
    /// Initializes and starts a new server (sweeping stale ones first, once
    /// per process).
    ///
    /// # Errors
    /// [`TestServerError::NotInstalled`] without PostgreSQL; otherwise the
    /// failed step, with the server log's tail.
    pub fn start() -> Result<TestServer, TestServerError> {
        TestServer::start_with(false)
    }

    /// As [`TestServer::start`], with `fsync` and `full_page_writes` on:
    /// a commit is on disk when acknowledged, as on a production server.
    /// What benchmarks measure against.
    ///
    /// # Errors
    /// As [`TestServer::start`].
    pub fn start_durable() -> Result<TestServer, TestServerError> {
        TestServer::start_with(true)
    }

    fn start_with(durable: bool) -> Result<TestServer, TestServerError> {
        SWEEP.call_once(sweep_stale);
        let binaries = Binaries::find()?;
        let account = if is_root() {
            Some(Account {
                uid: id_of("-u")?,
                gid: id_of("-g")?,
            })
        } else {
            None
        };
        let dir = tempfile::Builder::new()
            .prefix(DIRECTORY_PREFIX)
            .tempdir()
            .map_err(io("creating the server directory"))?;
        fs::write(
            dir.path().join(OWNER_FILE),
            format!("{}\n", std::process::id()),
        )
        .map_err(io("writing the owner file"))?;
        if let Some(account) = account {
            std::os::unix::fs::chown(dir.path(), Some(account.uid), Some(account.gid))
                .map_err(io("giving the server directory to postgres"))?;
        }
        let mut server = TestServer {
            dir,
            port: 0,
            binaries,
            account,
            postmaster: None,
            watchdog: None,
            durable,
        };
        server.initdb()?;
        let mut last = String::new();
        for _ in 0..5 {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(StartFailure::Retry(reason)) => last = reason,
                Err(StartFailure::Fatal(err)) => return Err(err),
            }
        }
        Err(TestServerError::Start(last))
    }

    /// One server for the whole test process, started on first use. It is
    /// never dropped; its watchdog stops it when the process exits. Give
    /// each test its own schema ([`unique_schema`]) or database.
    ///
    /// # Errors
    /// The first start's failure, as text, on every call.
    pub fn shared() -> Result<&'static TestServer, TestServerError> {
        match SHARED.get_or_init(|| TestServer::start().map_err(|err| err.to_string())) {
            Ok(server) => Ok(server),
            Err(reason) => Err(TestServerError::Start(reason.clone())),
        }
    }

    /// Its TCP port on 127.0.0.1.
    #[must_use]
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Its data directory.
    #[must_use]
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// A libpq connection string for the `postgres` superuser and database.
    #[must_use]
    pub fn connection_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres",
            self.port
        )
    }

    /// The driver's configuration for [`TestServer::connection_string`].
    #[must_use]
    pub fn config(&self) -> tokio_postgres::Config {
        let mut config = tokio_postgres::Config::new();
        config
            .host("127.0.0.1")
            .port(self.port)
            .user("postgres")
            .dbname("postgres");
        config
    }

    /// [`PgOptions`] for a log in `schema` on this server, with a short
    /// poll interval and connect timeout for tests.
    #[must_use]
    pub fn options(&self, schema: &str) -> PgOptions {
        let mut options = PgOptions::new(self.config()).with_schema(schema);
        options.poll_interval = Duration::from_millis(50);
        options.connect_timeout = Duration::from_secs(5);
        options
    }

    /// Whether the postmaster this server started is still running.
    pub fn is_running(&mut self) -> bool {
        match &mut self.postmaster {
            Some(child) => matches!(child.try_wait(), Ok(None)),
            None => false,
        }
    }

    /// Stops the server cleanly (`pg_ctl stop -m fast`); the directory is
    /// kept, [`TestServer::restart`] starts it again.
    ///
    /// # Errors
    /// `pg_ctl`'s failure (the server is then killed).
    pub fn stop(&mut self) -> Result<(), TestServerError> {
        self.pg_ctl_stop("fast")
    }

    /// A crash and a recovery: stops the server immediately (`pg_ctl stop
    /// -m immediate`, no checkpoint, as a crash would leave it) unless it
    /// is already stopped, then starts it on the same directory and port.
    ///
    /// # Errors
    /// The failed stop or start.
    pub fn restart(&mut self) -> Result<(), TestServerError> {
        if self.is_running() {
            self.pg_ctl_stop("immediate")?;
        } else {
            self.watchdog = None;
            if let Some(mut child) = self.postmaster.take() {
                let _ = child.wait();
            }
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return Ok(()),
                // The port in TIME_WAIT or backends of a killed server still
                // exiting: the same port must come back.
                Err(StartFailure::Retry(reason)) if Instant::now() < deadline => {
                    tracing::debug!(reason, "restarting the test server; retrying");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(StartFailure::Retry(reason)) => return Err(TestServerError::Start(reason)),
                Err(StartFailure::Fatal(err)) => return Err(err),
            }
        }
    }

    /// SIGKILLs the postmaster's process group, as a crash would. Its
    /// backends notice the postmaster's death and exit on their own (they
    /// are group leaders of their own); [`TestServer::restart`] waits for
    /// them.
    pub fn kill(&mut self) {
        self.watchdog = None;
        if let Some(mut child) = self.postmaster.take() {
            if let Ok(group) = i32::try_from(child.id()) {
                signal(-group, libc::SIGKILL);
            }
            if let Some((pid, _)) = postmaster_status(&self.data_dir()) {
                if is_postgres(pid) {
                    signal(pid, libc::SIGKILL);
                }
            }
            let _ = child.wait();
        }
    }

    /// A command that runs `program` as the server's account.
    fn command(&self, program: &Path) -> Command {
        let mut command = if self.account.is_some() {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(self.dir.path());
        command
    }

    fn run(&self, mut command: Command, name: &str) -> Result<(), TestServerError> {
        let output = command
            .stdin(Stdio::null())
            .output()
            .map_err(io(format!("running {name}")))?;
        if output.status.success() {
            return Ok(());
        }
        Err(TestServerError::Command {
            command: name.to_owned(),
            detail: format!(
                "{}: {}{}",
                output.status,
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            ),
        })
    }

    fn initdb(&self) -> Result<(), TestServerError> {
        let mut command = self.command(&self.binaries.initdb);
        command.arg("-D").arg(self.data_dir()).args([
            "-A",
            "trust",
            "-U",
            "postgres",
            "-E",
            "UTF8",
            "--locale=C",
            "--no-sync",
        ]);
        self.run(command, "initdb")
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("postgres.log")
    }

    /// The last 4 KiB of the server's log.
    fn log_tail(&self) -> String {
        let mut text = String::new();
        if let Ok(mut file) = File::open(self.log_path()) {
            let _ = file.read_to_string(&mut text);
        }
        let start = text.len().saturating_sub(4096);
        let start = (start..text.len())
            .find(|index| text.is_char_boundary(*index))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }

    /// Starts the postmaster on `self.port` and waits until it accepts
    /// connections.
    fn spawn(&mut self) -> Result<(), StartFailure> {
        let fatal = StartFailure::Fatal;
        let mut log = File::options()
            .create(true)
            .append(true)
            .open(self.log_path())
            .map_err(|err| fatal(io("opening the server log")(err)))?;
        let _ = writeln!(
            log,
            "--- subagents test server: starting on port {}",
            self.port
        );
        let stdout = log
            .try_clone()
            .map_err(|err| fatal(io("opening the server log")(err)))?;
        let mut command = self.command(&self.binaries.postgres);
        command
            .arg("-D")
            .arg(self.data_dir())
            .arg("-p")
            .arg(self.port.to_string())
            .arg("-k")
            .arg(self.dir.path())
            .args([
                "-c",
                "listen_addresses=127.0.0.1",
                "-c",
                if self.durable {
                    "fsync=on"
                } else {
                    "fsync=off"
                },
                "-c",
                if self.durable {
                    "full_page_writes=on"
                } else {
                    "full_page_writes=off"
                },
                "-c",
                "max_connections=200",
                "-c",
                "log_min_messages=warning",
            ])
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(log)
            .process_group(0);
        let mut child = command
            .spawn()
            .map_err(|err| fatal(io("starting postgres")(err)))?;
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let tail = self.log_tail();
                let retry = [
                    "could not bind",
                    "Address already in use",
                    "still in use",
                    "lock file",
                ]
                .iter()
                .any(|sign| tail.contains(sign));
                let reason = format!("postgres exited with {status}:\n{tail}");
                return Err(if retry {
                    StartFailure::Retry(reason)
                } else {
                    StartFailure::Fatal(TestServerError::Start(reason))
                });
            }
            let ready = postmaster_status(&self.data_dir())
                .is_some_and(|(_, status)| status == "ready")
                && TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok();
            if ready {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fatal(TestServerError::Start(format!(
                    "not ready after {START_TIMEOUT:?}:\n{}",
                    self.log_tail()
                ))));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let watchdog = Watchdog::start(child.id(), self.dir.path());
        self.postmaster = Some(child);
        match watchdog {
            Ok(watchdog) => {
                self.watchdog = Some(watchdog);
                Ok(())
            }
            Err(err) => {
                self.kill();
                Err(fatal(err))
            }
        }
    }

    /// `pg_ctl stop -m <mode>`, then reaps the postmaster; kills it if
    /// `pg_ctl` fails.
    fn pg_ctl_stop(&mut self, mode: &str) -> Result<(), TestServerError> {
        self.watchdog = None;
        if self.postmaster.is_none() {
            return Ok(());
        }
        let mut command = self.command(&self.binaries.pg_ctl);
        command
            .arg("stop")
            .arg("-D")
            .arg(self.data_dir())
            .args(["-m", mode, "-w", "-t", "30"]);
        let stopped = self.run(command, "pg_ctl stop");
        if stopped.is_err() {
            self.kill();
        }
        if let Some(mut child) = self.postmaster.take() {
            let _ = child.wait();
        }
        stopped
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if self.pg_ctl_stop("fast").is_err() {
            self.kill();
        }
        // `dir` (a TempDir) is removed after this.
    }
}

/// A schema name no other test of any process uses: `prefix`, this
/// process's id, a counter and the clock.
#[must_use]
pub fn unique_schema(prefix: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let count = NEXT.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.subsec_nanos());
    let mut name: String = prefix
        .chars()
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
        .take(16)
        .collect();
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) || name.starts_with("pg_")
    {
        name.insert_str(0, "t_");
    }
    format!("{name}_{}_{count}_{nanos}", std::process::id())
}
