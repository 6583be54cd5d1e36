//! [`Harness`]: the standard setup of a runtime test, and the calls tests
//! repeat on it. A harness is one log, one [`SubagentRuntime`] over it (with
//! what opening recovered) and one root agent. By default the log is a fresh
//! [`MemoryLog`], the capacity limits are the defaults, the `spawn` provider
//! is registered and the root is opened as [`ROOT_LABEL`].
//! [`HarnessBuilder`] changes any of these: the host, the limits, more or no
//! providers, a log of the test's own (RocksDB, a failing log, a log a
//! previous runtime wrote), a root with agent options, or a root taken back
//! after a restart.

use std::sync::Arc;

use subagent_core::{
    AgentOptions, Event, EventKind, MessageId, RecordedEvent, SessionId, StreamId,
    SubagentActivationSpec, SubagentError,
};
use subagent_projections::Projections;
use subagent_runtime::providers::SpawnProvider;
use subagent_runtime::{
    AgentHost, CapacityLimits, LiveAgent, RecoveryReport, ScriptedHost, SubagentActivation,
    SubagentProvider, SubagentRuntime,
};
use subagent_store::{EventLog, MemoryLog};
use tokio_util::sync::CancellationToken;

use super::fixtures::text;
use super::reads;
use super::wait::until;

/// The label of the root a harness opens.
pub(crate) const ROOT_LABEL: &str = "host";

/// Starts a child of `parent` with a fresh cancellation signal. For the
/// harness root, [`Harness::start`] says the same in fewer words.
pub(crate) async fn start(
    runtime: &SubagentRuntime,
    parent: &LiveAgent,
    spec: SubagentActivationSpec,
) -> Result<SubagentActivation, SubagentError> {
    runtime
        .start_activation(parent, spec, CancellationToken::new())
        .await
}

/// A host for [`Harness::builder`]: a scripted host by value, or an `Arc` of
/// any host the test keeps a handle on (a probe, a host it breaks on purpose).
pub(crate) trait IntoHost {
    /// The host as the runtime holds it.
    fn into_host(self) -> Arc<dyn AgentHost>;
}

impl IntoHost for ScriptedHost {
    fn into_host(self) -> Arc<dyn AgentHost> {
        Arc::new(self)
    }
}

impl<H: AgentHost> IntoHost for Arc<H> {
    fn into_host(self) -> Arc<dyn AgentHost> {
        self
    }
}

/// A test's log, its runtime and its root. Clones share all three.
#[derive(Clone)]
pub(crate) struct Harness<L = MemoryLog> {
    /// The log the runtime writes.
    pub(crate) log: L,
    /// The runtime, with the builder's providers registered.
    pub(crate) runtime: SubagentRuntime,
    /// The root agent: opened as [`ROOT_LABEL`], or taken back
    /// ([`HarnessBuilder::reopen`]).
    pub(crate) root: LiveAgent,
    /// What opening the runtime recovered.
    pub(crate) report: RecoveryReport,
}

/// How a harness gets its root.
enum RootChoice {
    /// `open_root_with(ROOT_LABEL, options)`.
    Open(Option<AgentOptions>),
    /// `reopen_root(session)`.
    Reopen(SessionId),
}

/// The setup of a [`Harness`], changed option by option, then opened.
pub(crate) struct HarnessBuilder<L = MemoryLog> {
    log: L,
    host: Arc<dyn AgentHost>,
    limits: CapacityLimits,
    providers: Vec<Arc<dyn SubagentProvider>>,
    root: RootChoice,
}

impl Harness {
    /// The default setup with `host`'s agents: a fresh memory log, default
    /// limits, the `spawn` provider, a root opened as [`ROOT_LABEL`].
    pub(crate) fn builder(host: impl IntoHost) -> HarnessBuilder {
        HarnessBuilder {
            log: MemoryLog::new(),
            host: host.into_host(),
            limits: CapacityLimits::default(),
            providers: vec![Arc::new(SpawnProvider) as Arc<dyn SubagentProvider>],
            root: RootChoice::Open(None),
        }
    }

    /// [`Harness::builder`]`(host).open()`: the default setup, opened.
    pub(crate) async fn open(host: impl IntoHost) -> Harness {
        Self::builder(host).open().await
    }
}

impl<L: EventLog + Clone> HarnessBuilder<L> {
    /// Opens the runtime with these capacity limits (default: unlimited).
    pub(crate) fn limits(mut self, limits: CapacityLimits) -> Self {
        self.limits = limits;
        self
    }

    /// Registers `provider` too, after the ones already named, in order.
    pub(crate) fn provider(mut self, provider: Arc<dyn SubagentProvider>) -> Self {
        self.providers.push(provider);
        self
    }

    /// Registers no provider, not even `spawn`: a host that has not
    /// registered its providers yet. Later [`provider`](Self::provider) calls
    /// add to the empty list.
    pub(crate) fn no_providers(mut self) -> Self {
        self.providers.clear();
        self
    }

    /// Opens the root with `options`, which its local children inherit.
    pub(crate) fn root_options(mut self, options: AgentOptions) -> Self {
        self.root = RootChoice::Open(Some(options));
        self
    }

    /// Takes back the root `session` (a previous runtime's, over the same
    /// log) instead of opening a new one.
    pub(crate) fn reopen(mut self, session: SessionId) -> Self {
        self.root = RootChoice::Reopen(session);
        self
    }

    /// Opens over `log` instead of a fresh memory log: the harness holds a
    /// clone, so a test can keep `log` to read it or to reopen it later.
    pub(crate) fn over<M: EventLog + Clone>(self, log: M) -> HarnessBuilder<M> {
        HarnessBuilder {
            log,
            host: self.host,
            limits: self.limits,
            providers: self.providers,
            root: self.root,
        }
    }

    /// Opens the runtime and registers the providers, but opens no root: for
    /// a reopen that must record nothing a test did not ask for. Panics if
    /// opening or a registration fails.
    pub(crate) async fn open_runtime(self) -> (SubagentRuntime, RecoveryReport) {
        runtime_over(&self.log, self.host, self.limits, self.providers).await
    }

    /// Opens the runtime, registers the providers in order, then opens (or
    /// takes back) the root. Panics if any step fails.
    pub(crate) async fn open(self) -> Harness<L> {
        let HarnessBuilder {
            log,
            host,
            limits,
            providers,
            root,
        } = self;
        let (runtime, report) = runtime_over(&log, host, limits, providers).await;
        let root = match root {
            RootChoice::Open(options) => runtime
                .open_root_with(ROOT_LABEL, options)
                .await
                .expect("the root opens"),
            RootChoice::Reopen(session) => runtime
                .reopen_root(session)
                .await
                .expect("the root is taken back"),
        };
        Harness {
            log,
            runtime,
            root,
            report,
        }
    }
}

/// A runtime over a clone of `log` with `providers` registered in order.
async fn runtime_over<L: EventLog + Clone>(
    log: &L,
    host: Arc<dyn AgentHost>,
    limits: CapacityLimits,
    providers: Vec<Arc<dyn SubagentProvider>>,
) -> (SubagentRuntime, RecoveryReport) {
    let (runtime, report) = SubagentRuntime::open_with(Arc::new(log.clone()), host, limits)
        .await
        .expect("the runtime opens");
    for provider in providers {
        runtime
            .register_provider(provider)
            .await
            .expect("the provider registers");
    }
    (runtime, report)
}

impl<L: EventLog> Harness<L> {
    /// Starts a child of the root with a fresh cancellation signal.
    pub(crate) async fn start(
        &self,
        spec: SubagentActivationSpec,
    ) -> Result<SubagentActivation, SubagentError> {
        start(&self.runtime, &self.root, spec).await
    }

    /// Sends one text block from the root to `target` with a fresh
    /// cancellation signal; the accepted message's id.
    pub(crate) async fn send(
        &self,
        target: SessionId,
        content: &str,
    ) -> Result<MessageId, SubagentError> {
        self.runtime
            .send_message(&self.root, target, text(content), CancellationToken::new())
            .await
    }

    /// The events of `session`'s stream, in order.
    pub(crate) fn events(&self, session: SessionId) -> Vec<Event> {
        reads::events(&self.log, session)
    }

    /// The events of `stream`, in order.
    pub(crate) fn stream_events(&self, stream: StreamId) -> Vec<Event> {
        reads::stream_events(&self.log, stream)
    }

    /// Every record of the whole log whose event is of `kind`, in position
    /// order (the record says which stream it is in).
    pub(crate) fn events_of(&self, kind: EventKind) -> Vec<RecordedEvent> {
        reads::records(&self.log)
            .into_iter()
            .filter(|record| record.event.kind() == kind)
            .collect()
    }

    /// How many events of `session`'s stream are of `kind`.
    pub(crate) fn count(&self, session: SessionId, kind: EventKind) -> usize {
        reads::count(&self.events(session), kind)
    }

    /// The projections rebuilt from the whole log (not the runtime's own).
    pub(crate) fn fold(&self) -> Projections {
        reads::fold(&self.log)
    }

    /// DESIGN.md invariants 4 and 5 on the log
    /// ([`assert_inbox_invariants`](reads::assert_inbox_invariants)).
    pub(crate) fn assert_inbox_invariants(&self) {
        reads::assert_inbox_invariants(&self.log);
    }

    /// Polls `session`'s events until `done` holds for them; panics naming
    /// `what` after [`until`]'s deadline.
    pub(crate) async fn until_events(
        &self,
        what: &str,
        session: SessionId,
        mut done: impl FnMut(&[Event]) -> bool,
    ) {
        until(what, || done(&self.events(session))).await;
    }
}
