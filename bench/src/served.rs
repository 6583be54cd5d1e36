//! [`Served`]: a runtime with the echo host and `spawn` over a RocksDB log,
//! and the gateway serving it on a free loopback port, as `bench gateway`
//! and `bench console` measure it.

use std::sync::Arc;

use subagent_core::{Delivery, SessionId, SubagentActivationSpec};
use subagent_gateway::{GatewayConfig, Limits, Token, TokenSource};
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{LiveAgent, SubagentRuntime};
use subagent_store::{Durability, EventLog, RocksLog, RocksOptions};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::messages::EchoHost;

/// The bench's bearer token.
pub(super) const TOKEN: &str = "bench-token-0123456789abcdef0123456789abcdef";

/// A served runtime; [`stop`](Self::stop) ends it.
pub(super) struct Served {
    /// The runtime the gateway fronts.
    pub(super) runtime: SubagentRuntime,
    /// Its log.
    pub(super) log: Arc<dyn EventLog>,
    /// `http://127.0.0.1:PORT`.
    pub(super) base: String,
    /// A client for it.
    pub(super) http: reqwest::Client,
    shutdown: CancellationToken,
    _dir: tempfile::TempDir,
}

impl Served {
    /// Serves a fresh, empty log with `durability`.
    pub(super) async fn start(
        durability: Durability,
    ) -> Result<Served, Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let log: Arc<dyn EventLog> =
            Arc::new(RocksLog::open(dir.path(), RocksOptions { durability })?);
        Served::over(dir, log).await
    }

    /// Serves `log`, which lives in `dir` (removed when this ends).
    pub(super) async fn over(
        dir: tempfile::TempDir,
        log: Arc<dyn EventLog>,
    ) -> Result<Served, Box<dyn std::error::Error>> {
        // Nobody waits for turn ends here: the channel's receiver is dropped.
        let (turns, _) = mpsc::unbounded_channel();
        let (runtime, _) =
            SubagentRuntime::open(Arc::clone(&log), Arc::new(EchoHost(turns))).await?;
        runtime.register_provider(Arc::new(SpawnProvider)).await?;
        let shutdown = CancellationToken::new();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base = format!("http://{}", listener.local_addr()?);
        let router = subagent_gateway::router(
            runtime.clone(),
            GatewayConfig {
                token: Token::new(TOKEN, TokenSource::Given)?,
                // The console page it serves calls it from its own origin.
                allowed_origins: vec![base.clone()],
                limits: Limits::default(),
            },
            shutdown.clone(),
        );
        let (served, ending) = (runtime.clone(), shutdown.clone());
        tokio::spawn(async move {
            let _ = subagent_gateway::serve(listener, router, served, ending.clone(), async move {
                ending.cancelled().await;
            })
            .await;
        });
        Ok(Served {
            runtime,
            log,
            base,
            http: reqwest::Client::new(),
            shutdown,
            _dir: dir,
        })
    }

    /// A root and a continuable child whose first turn has ended.
    pub(super) async fn pair(&self) -> Result<(LiveAgent, SessionId), Box<dyn std::error::Error>> {
        let root = self.runtime.open_root("bench").await?;
        let spec =
            SubagentActivationSpec::with_text_prompt("spawn", "echo", "ready", Delivery::Caller);
        let child = self
            .runtime
            .start_activation(&root, spec, CancellationToken::new())
            .await?;
        child.result().await?;
        Ok((root, child.child_id()))
    }

    /// Stops serving and closes the runtime (a second `close` waits for
    /// the one `serve` makes).
    pub(super) async fn stop(self) -> Result<(), Box<dyn std::error::Error>> {
        self.shutdown.cancel();
        self.runtime.close().await?;
        Ok(())
    }
}
