//! `subagents serve`: a runtime on the log in `--data` (or the PostgreSQL
//! log of `--store`, the token staying in `--data`) with the shipped
//! providers (`spawn`, `fork`, `process`), its children on the scripted
//! host, served over HTTP by the gateway until SIGINT or SIGTERM, then
//! closed cleanly.
//!
//! It listens on loopback unless `--allow-remote` is given, and prints the
//! URL and where the bearer token is (the token file's path, created with
//! mode 0600 on the first run, or the environment variable), never the
//! token itself.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use subagent_gateway::{GatewayConfig, Limits, Token, TokenSource};
use subagent_runtime::{Health, RecoveryPolicy, ScriptedHost, Supervised};
use subagent_store::{Durability, EventLog};
use tokio_util::sync::CancellationToken;

use crate::error::CliError;
use crate::{CliResult, DEFAULT_DATA_DIR};

/// The default listening address: loopback only.
pub(crate) const DEFAULT_LISTEN: &str = "127.0.0.1:7878";

/// `subagents serve`'s arguments.
#[derive(clap::Args)]
pub(crate) struct ServeArgs {
    /// The log directory (created if missing); with `--store`, only the
    /// token file's directory.
    #[arg(long, default_value = DEFAULT_DATA_DIR)]
    data: PathBuf,
    /// Serve a PostgreSQL log instead of the --data directory:
    /// postgres://USER@HOST:PORT/DB?schema=NAME (created if missing).
    #[arg(long, value_name = "URL", value_parser = crate::target::LogParser::postgres_only())]
    store: Option<crate::target::LogTarget>,
    /// The address to listen on.
    #[arg(long, default_value = DEFAULT_LISTEN)]
    listen: SocketAddr,
    /// Allow listening on an address other than loopback (the gateway is a
    /// door into agents that run tools: put TLS in front of it).
    #[arg(long)]
    allow_remote: bool,
    /// A browser origin allowed to call, besides the server's own
    /// (`http://<listen>`); repeatable.
    #[arg(long = "allow-origin", value_name = "ORIGIN")]
    allow_origins: Vec<String>,
    /// A deployment persona variable, `NAME=VALUE`; repeatable. Personas
    /// are rendered when a child's agent is built, so a child whose
    /// persona names a variable resumes only where it is set (the demo's
    /// `research` needs `--persona-var project=subagents`).
    #[arg(long = "persona-var", value_name = "NAME=VALUE", value_parser = persona_var)]
    persona_vars: Vec<(String, String)>,
    /// Span export (off by default).
    #[command(flatten)]
    telemetry: crate::telemetry::TelemetryArgs,
    /// How it holds its trees on a PostgreSQL store.
    #[command(flatten)]
    host: crate::hosting::HostArgs,
}

/// Parses `NAME=VALUE` (the name not empty).
fn persona_var(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?} is not NAME=VALUE")),
    }
}

/// Runs the server until a shutdown signal.
///
/// # Errors
/// A non-loopback address without `--allow-remote`, storage, token and
/// listener failures.
pub(crate) fn run(args: &ServeArgs, out: &mut dyn Write) -> CliResult {
    if !args.listen.ip().is_loopback() && !args.allow_remote {
        return Err(Box::new(CliError::NotLoopback(args.listen)));
    }
    // Bound before anything is created: an address in use refuses the
    // start with nothing written, and names the address.
    let listener = std::net::TcpListener::bind(args.listen)
        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
        .map_err(|err| {
            std::io::Error::new(err.kind(), format!("listening on {}: {err}", args.listen))
        })?;
    let target = args
        .store
        .clone()
        .unwrap_or_else(|| crate::target::LogTarget::Dir(args.data.clone()));
    let shared: Arc<dyn EventLog> = target.open_writable(Durability::Sync)?;
    std::fs::create_dir_all(&args.data)?;
    let (token, created) = Token::load_or_create(&args.data)?;
    // Declared before the runtime, so it is dropped after it: the last
    // spans are flushed once the server stopped.
    let _exporting = crate::telemetry::install(
        &args
            .telemetry
            .export(&crate::telemetry::OtelEnvironment::from_process()),
        None,
    )?;
    let tokio = tokio::runtime::Runtime::new()?;
    // Before any agent starts: SIGINT and SIGTERM close the server, its
    // runtime and every agent process group, never by their default action.
    let mut shutdown_signal = {
        let _entered = tokio.enter();
        crate::signals::Shutdown::install()?
    };
    tokio.block_on(async {
        let opening = Opening {
            target: target.clone(),
            host: args.host.clone(),
            persona_vars: args.persona_vars.clone(),
        };
        let (runtime, recovery) = opening.open(shared).await?;
        // After its log fails, the runtime is closed and opened again on a
        // new handle of the same log, once the store answers.
        let reopen: subagent_runtime::supervisor::Reopen = Arc::new(move || {
            let opening = opening.clone();
            Box::pin(async move {
                let log = opening
                    .target
                    .open_writable(Durability::Sync)
                    .map_err(subagent_core::SubagentError::unavailable_from)?;
                opening.open(log).await.map(|(runtime, _)| runtime)
            })
        });
        let runtime = Supervised::new(runtime, reopen, RecoveryPolicy::default());
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let address = listener.local_addr()?;
        let mut allowed_origins = vec![
            format!("http://{address}"),
            format!("http://localhost:{}", address.port()),
        ];
        allowed_origins.extend(args.allow_origins.iter().cloned());
        let where_token = match token.source() {
            TokenSource::Environment => format!("from ${}", subagent_gateway::token::TOKEN_ENV),
            TokenSource::File { path, .. } => path.display().to_string(),
            TokenSource::Given => "given by the host".into(),
        };
        let shutdown = CancellationToken::new();
        let router = subagent_gateway::router(
            runtime.clone(),
            GatewayConfig {
                token,
                allowed_origins,
                limits: Limits::default(),
            },
            shutdown.clone(),
        );
        if recovery.events > 0 {
            writeln!(
                out,
                "recovered the previous run: {} recovery events appended",
                recovery.events
            )?;
        }
        writeln!(out, "serving http://{address}/v1/")?;
        let fresh = if created.is_some() { " (created)" } else { "" };
        writeln!(out, "bearer token: {where_token}{fresh}")?;
        writeln!(out, "log: {target}")?;
        if let Some(shared) = args.host.shared(&target) {
            writeln!(
                out,
                "host: {} (one of several on this log; leases of {} ms)",
                shared.holder,
                shared.lease_term.as_millis()
            )?;
        }
        out.flush()?;
        // Why the supervisor gave up, kept apart: closing the server then
        // marks the runtime closed.
        let gone: Arc<std::sync::OnceLock<String>> = Arc::default();
        let mut health = runtime.watch();
        let gave_up = {
            let gone = Arc::clone(&gone);
            async move {
                let given_up = health
                    .wait_for(|health| matches!(health, Health::GaveUp { .. }))
                    .await;
                if let Ok(health) = given_up {
                    if let Health::GaveUp { cause } = &*health {
                        let _ = gone.set(cause.to_string());
                    }
                }
            }
        };
        let served =
            subagent_gateway::serve(listener, router, runtime.clone(), shutdown, async move {
                tokio::select! {
                    _ = shutdown_signal.received() => {}
                    () = gave_up => {}
                }
            })
            .await;
        served.map_err(|err| -> Box<dyn std::error::Error> { err })?;
        if let Some(cause) = gone.get() {
            return Err(CliError::StoreGone {
                cause: cause.clone(),
            }
            .into());
        }
        writeln!(out, "closed cleanly")?;
        Ok(())
    })
}

/// How `serve` opens its runtime: at start, and again after its log
/// failed.
#[derive(Clone)]
struct Opening {
    target: crate::target::LogTarget,
    host: crate::hosting::HostArgs,
    persona_vars: Vec<(String, String)>,
}

impl Opening {
    /// The runtime over `log`, recovered, with the shipped providers and
    /// the persona variables.
    ///
    /// # Errors
    /// As `SubagentRuntime::open`, and the providers' registration.
    async fn open(
        &self,
        log: Arc<dyn EventLog>,
    ) -> Result<
        (
            subagent_runtime::SubagentRuntime,
            subagent_runtime::RecoveryReport,
        ),
        subagent_core::SubagentError,
    > {
        let (runtime, recovery) = self
            .host
            .open(&self.target, log, Arc::new(ScriptedHost::showcase()))
            .await?;
        let configured = async {
            crate::shipped::register_providers(&runtime).await?;
            runtime.set_persona_variables(self.persona_vars.iter().cloned().collect())
        };
        if let Err(err) = configured.await {
            // Not left running unserved (on a shared log its keeper would
            // go on holding trees).
            let _ = runtime.close().await;
            return Err(err);
        }
        Ok((runtime, recovery))
    }
}
