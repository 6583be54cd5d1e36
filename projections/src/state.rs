//! [`Projections`]: every projection of the log, folded together event by
//! event, and the queries the runtime and the tools ask of them.
//!
//! `apply` is a pure function of the state and one recorded event. Folding a
//! log from position 1 (or from a checkpoint) gives the same state as
//! maintaining it incrementally; the replay crate's `verify` and the property
//! tests check exactly that.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use serde::{Deserialize, Serialize};
use subagent_core::{
    AgentRoute, CatalogMode, Event, HostId, MessageSource, RecordedEvent, SessionId,
    SubagentCapabilities, SubagentCatalogEntry, SubagentDescendantListEntry, SubagentDescriptor,
    SubagentListEntry, ToolCallRef,
};

use crate::activation::{
    ActivationPhase, ActivationState, Activity, LiveActivation, RunPhase, RunState,
};
use crate::catalog::CatalogFact;
use crate::inbox::{prompt_digest, Inbox};
use crate::ownership::TreeOwner;
use crate::sessions::SessionRecord;
use crate::IdMap;

/// A registered provider as the log records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ProviderRecord {
    /// Registry name.
    pub name: String,
    /// Start-time capabilities.
    pub capabilities: SubagentCapabilities,
    /// Whether children see the parent's prefix.
    pub inherits_parent_context: bool,
    /// Prepares continuable children.
    pub continuable: bool,
    /// Starts external runs.
    pub one_shot: bool,
    /// The provider's static model route, merged under a child's options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub route_defaults: Option<AgentRoute>,
}

/// Every projection of the log at one position.
///
/// Its maps ([`IdMap`]) hash with `foldhash`, randomly
/// seeded as `std`'s are, not SipHash: every event folded in and every
/// command decided looks ids up in them, and SipHash was most of the cost
/// of a lookup (BENCHMARKS.md, "Hashing ids").
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Projections {
    /// The last position folded in (0: nothing).
    pub position: u64,
    /// Session corpus.
    pub sessions: IdMap<SessionId, SessionRecord>,
    /// Host roots in creation order.
    pub roots: Vec<SessionId>,
    /// Parent-owned catalogs, each in parent event order.
    pub catalogs: IdMap<SessionId, Vec<CatalogFact>>,
    /// Activation state of continuable sessions.
    pub activations: IdMap<SessionId, ActivationState>,
    /// The run of each external child.
    pub runs: IdMap<SessionId, RunState>,
    /// Inbox of each session that has received a message.
    pub inboxes: IdMap<SessionId, Inbox>,
    /// Registered providers in registration order: the `runtime` stream's
    /// registry, a single-writer runtime's.
    pub providers: Vec<ProviderRecord>,
    /// The registry of each host incarnation of a shared log, from its
    /// `host-<uuid>` stream, in registration order.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub host_providers: BTreeMap<HostId, Vec<ProviderRecord>>,
    /// The host holding each root's tree on a shared log (its last
    /// `TreeAcquired`); empty on a single-writer log.
    #[serde(default, skip_serializing_if = "IdMap::is_empty")]
    pub owners: IdMap<SessionId, TreeOwner>,
    /// Parents below which admission is closed.
    pub admission_closed: BTreeSet<SessionId>,
}

impl Projections {
    /// The empty state (before position 1).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Folds every record of `records` in.
    pub fn fold<'a>(records: impl IntoIterator<Item = &'a RecordedEvent>) -> Self {
        let mut state = Self::new();
        for record in records {
            state.apply(record);
        }
        state
    }

    /// Folds one recorded event in. Events must arrive in position order;
    /// an event at or below the current position is ignored (idempotent
    /// catch-up after a checkpoint).
    pub fn apply(&mut self, record: &RecordedEvent) {
        if record.position <= self.position {
            return;
        }
        self.position = record.position;
        let session = record.stream.session();
        match &record.event {
            Event::ProviderRegistered {
                name,
                capabilities,
                inherits_parent_context,
                continuable,
                one_shot,
                route_defaults,
            } => {
                if let Some(registry) = self.registry_mut(record.stream) {
                    registry.retain(|provider| provider.name != *name);
                    registry.push(ProviderRecord {
                        name: name.clone(),
                        capabilities: *capabilities,
                        inherits_parent_context: *inherits_parent_context,
                        continuable: *continuable,
                        one_shot: *one_shot,
                        route_defaults: route_defaults.clone(),
                    });
                }
            }
            Event::ProviderRemoved { name } => {
                if let Some(registry) = self.registry_mut(record.stream) {
                    registry.retain(|provider| provider.name != *name);
                }
            }
            Event::TreeAcquired {
                host,
                holder,
                fence,
            } => {
                if let Some(root) = session {
                    self.owners.insert(
                        root,
                        TreeOwner {
                            host: *host,
                            holder: holder.clone(),
                            fence: *fence,
                        },
                    );
                }
            }
            Event::AdmissionClosed { parent } => {
                self.admission_closed.insert(*parent);
            }
            Event::AdmissionReopened { parent } => {
                self.admission_closed.remove(parent);
            }
            Event::HostRecovered { .. } => {}
            Event::SessionCreated {
                session: id,
                parent,
                depth,
                label,
                provider,
                mode,
                external,
                descriptor,
            } => {
                if parent.is_none() {
                    self.roots.push(*id);
                }
                let interpreted = parent
                    .is_some()
                    .then(|| SubagentDescriptor::interpret(descriptor))
                    .flatten();
                let agent_options = match &interpreted {
                    Some(descriptor) => descriptor.agent_options.clone(),
                    None if parent.is_none() => descriptor
                        .get("agentOptions")
                        .and_then(|options| serde_json::from_value(options.clone()).ok()),
                    None => None,
                };
                self.sessions.insert(
                    *id,
                    SessionRecord {
                        id: *id,
                        parent: *parent,
                        depth: *depth,
                        label: label.clone(),
                        provider: provider.clone(),
                        mode: *mode,
                        external: *external,
                        descriptor: interpreted,
                        agent_options,
                        created_at: record.position,
                        trace: record.trace,
                        requested_by: None,
                    },
                );
            }
            Event::ChildCataloged {
                child,
                label,
                provider,
                mode,
                external,
            } => {
                if let Some(parent) = session {
                    self.catalogs.entry(parent).or_default().push(CatalogFact {
                        child: *child,
                        label: label.clone(),
                        provider: provider.clone(),
                        mode: *mode,
                        external: *external,
                    });
                }
            }
            Event::ToolCalled { turn, call_id, .. } => {
                if let Some(state) = self.activation_get_mut(session) {
                    if state.running_turn == Some(*turn) {
                        state.open_calls.push(call_id.clone());
                    }
                }
            }
            Event::ToolReturned { call_id, .. } => {
                if let Some(state) = self.activation_get_mut(session) {
                    state.open_calls.retain(|open| open != call_id);
                }
            }
            Event::HistorySeeded { .. }
            | Event::AssistantMessage { .. }
            | Event::AgentReported { .. } => {}
            Event::ActivationRequested {
                epoch,
                delivery,
                output_schema,
                requested_by,
            } => {
                self.note_requesting_call(session, requested_by.as_ref());
                if let Some(state) = self.activation_mut(session) {
                    state.epoch = *epoch;
                    state.live = Some(LiveActivation {
                        epoch: *epoch,
                        phase: ActivationPhase::Requested,
                        delivery: *delivery,
                        output_schema: output_schema.clone(),
                        run_id: None,
                        settled: false,
                        trace: record.trace,
                        turn_trace: None,
                    });
                }
            }
            Event::ActivationPrepared { epoch, .. } => {
                if let Some(live) = self.live_mut(session, *epoch) {
                    live.phase = ActivationPhase::Prepared;
                }
            }
            Event::ActivationPublished { epoch, run_id } => {
                if let Some(live) = self.live_mut(session, *epoch) {
                    live.phase = ActivationPhase::Published;
                    live.run_id = Some(*run_id);
                }
            }
            Event::ActivationSettled { epoch, result } => {
                if let Some(state) = self.activation_mut(session) {
                    if let Some(live) = state.live.as_mut().filter(|live| live.epoch == *epoch) {
                        live.settled = true;
                    }
                    state.last_result = Some((*epoch, result.clone()));
                }
            }
            Event::ActivationReleased {
                epoch,
                cleanup_error,
            } => {
                if let Some(state) = self.activation_mut(session) {
                    if state.live.as_ref().is_some_and(|live| live.epoch == *epoch) {
                        state.live = None;
                        state.running_turn = None;
                        state.open_calls.clear();
                    }
                    if let Some(error) = cleanup_error {
                        state.last_cleanup_error = Some((*epoch, error.clone()));
                    }
                }
            }
            Event::ActivationAbandoned { epoch, .. } => {
                if let Some(state) = self.activation_mut(session) {
                    if state.live.as_ref().is_some_and(|live| live.epoch == *epoch) {
                        state.live = None;
                        state.running_turn = None;
                        state.open_calls.clear();
                    }
                }
            }
            Event::RunRequested {
                run_id,
                provider,
                delivery,
                requested_by,
            } => {
                self.note_requesting_call(session, requested_by.as_ref());
                if let Some(id) = session {
                    self.runs.insert(
                        id,
                        RunState {
                            run_id: *run_id,
                            provider: provider.clone(),
                            delivery: *delivery,
                            phase: RunPhase::Requested,
                            result: None,
                            cleanup_error: None,
                        },
                    );
                }
            }
            Event::RunStarted { run_id } => self.set_run_phase(session, *run_id, RunPhase::Started),
            Event::RunSettled { run_id, result } => {
                if let Some(run) = self.run_mut(session, *run_id) {
                    run.result.get_or_insert_with(|| result.clone());
                    run.phase = RunPhase::Settled;
                }
            }
            Event::RunDisposed {
                run_id,
                cleanup_error,
            } => {
                if let Some(run) = self.run_mut(session, *run_id) {
                    run.phase = RunPhase::Disposed;
                    run.cleanup_error.clone_from(cleanup_error);
                }
            }
            Event::RunStartFailed { run_id, .. } => {
                self.set_run_phase(session, *run_id, RunPhase::StartFailed)
            }
            Event::MessageAccepted {
                message_id,
                delivery,
                source,
                content,
            } => {
                if let Some(id) = session {
                    let inbox = self.inboxes.entry(id).or_default();
                    inbox.accept(*message_id, *delivery);
                    if let MessageSource::Browser { request_id, zone } = source {
                        inbox.record_prompt(
                            request_id,
                            *message_id,
                            prompt_digest(*delivery, zone.as_deref(), content),
                        );
                    }
                }
            }
            Event::MessagesClaimed { ids, turn } => {
                if let Some(id) = session {
                    self.inboxes.entry(id).or_default().claim(ids, *turn);
                }
            }
            Event::MessagesDropped { ids, epoch } => {
                if let Some(id) = session {
                    self.inboxes
                        .entry(id)
                        .or_default()
                        .drop_messages(ids, *epoch);
                }
            }
            Event::TurnStarted { turn, .. } => {
                if let Some(state) = self.activation_mut(session) {
                    state.running_turn = Some(*turn);
                    state.turns = state.turns.max(*turn);
                    state.open_calls.clear();
                    if let Some(live) = state.live.as_mut() {
                        live.turn_trace = record.trace;
                    }
                }
            }
            Event::TurnEnded { turn, .. } => {
                if let Some(state) = self.activation_mut(session) {
                    if state.running_turn == Some(*turn) {
                        state.running_turn = None;
                        state.open_calls.clear();
                        if let Some(live) = state.live.as_mut() {
                            live.turn_trace = None;
                        }
                    }
                }
            }
            Event::InterruptRequested { .. } => {}
        }
    }

    /// Keeps the call a child's first request named as the call that
    /// started it (a later request, such as a resume, names none).
    fn note_requesting_call(&mut self, session: Option<SessionId>, call: Option<&ToolCallRef>) {
        let Some(call) = call else { return };
        if let Some(record) = session.and_then(|id| self.sessions.get_mut(&id)) {
            record.requested_by.get_or_insert_with(|| call.clone());
        }
    }

    /// `session`'s activation state, when it has one (none is made).
    fn activation_get_mut(&mut self, session: Option<SessionId>) -> Option<&mut ActivationState> {
        session.and_then(|id| self.activations.get_mut(&id))
    }

    fn activation_mut(&mut self, session: Option<SessionId>) -> Option<&mut ActivationState> {
        session.map(|id| self.activations.entry(id).or_default())
    }

    fn live_mut(&mut self, session: Option<SessionId>, epoch: u64) -> Option<&mut LiveActivation> {
        self.activation_mut(session)?
            .live
            .as_mut()
            .filter(|live| live.epoch == epoch)
    }

    fn run_mut(
        &mut self,
        session: Option<SessionId>,
        run_id: subagent_core::SubagentRunId,
    ) -> Option<&mut RunState> {
        self.runs
            .get_mut(&session?)
            .filter(|run| run.run_id == run_id)
    }

    fn set_run_phase(
        &mut self,
        session: Option<SessionId>,
        run_id: subagent_core::SubagentRunId,
        phase: RunPhase,
    ) {
        if let Some(run) = self.run_mut(session, run_id) {
            run.phase = phase;
        }
    }

    // ---- queries -------------------------------------------------------------

    /// The parent's catalog in parent event order, interpreted: a child whose
    /// session or descriptor cannot be read is listed with mode `unknown` and a
    /// diagnostic. Costs O(children), independent of the log's length.
    #[must_use]
    pub fn list_children(&self, parent: SessionId) -> Vec<SubagentListEntry> {
        self.catalogs
            .get(&parent)
            .map(|facts| facts.iter().map(|fact| self.interpret(fact)).collect())
            .unwrap_or_default()
    }

    fn interpret(&self, fact: &CatalogFact) -> SubagentListEntry {
        let (mode, diagnostic) = match self.sessions.get(&fact.child) {
            None => (
                CatalogMode::Unknown,
                Some("child session record not found".to_owned()),
            ),
            Some(record) if record.descriptor.is_none() => (
                CatalogMode::Unknown,
                Some("child descriptor is unavailable or of an unknown version".to_owned()),
            ),
            Some(_) => (CatalogMode::from(fact.mode), None),
        };
        SubagentListEntry {
            entry: SubagentCatalogEntry {
                child_id: fact.child,
                label: fact.label.clone(),
                provider: fact.provider.clone(),
                mode,
                external: fact.external,
            },
            diagnostic,
        }
    }

    /// The complete subtree below `root` in stable pre-order (catalog order at
    /// every level). Every session is a traversal node, so continuable
    /// descendants below one-shot or unknown children are found. A cycle in a
    /// damaged log is reported as a diagnostic instead of looping.
    #[must_use]
    pub fn list_descendants(&self, root: SessionId) -> Vec<SubagentDescendantListEntry> {
        let mut out = Vec::new();
        let mut visited = HashSet::from([root]);
        let mut stack: Vec<(SessionId, u64, usize)> = vec![(root, 0, 0)];
        while let Some((parent, depth, index)) = stack.pop() {
            let Some(fact) = self
                .catalogs
                .get(&parent)
                .and_then(|facts| facts.get(index))
            else {
                continue;
            };
            stack.push((parent, depth, index + 1));
            let mut entry = self.interpret(fact);
            let first_visit = visited.insert(fact.child);
            if !first_visit {
                entry.diagnostic =
                    Some("session appears twice in the tree; not descended again".to_owned());
            }
            out.push(SubagentDescendantListEntry {
                entry,
                parent_id: parent,
                depth: depth + 1,
            });
            if first_visit {
                stack.push((fact.child, depth + 1, 0));
            }
        }
        out
    }

    /// `list_agents`: the parent's continuable children whose activity is
    /// running or inactive, in catalog order.
    #[must_use]
    pub fn list_agents(&self, parent: SessionId) -> Vec<(SubagentListEntry, Activity)> {
        self.list_children(parent)
            .into_iter()
            .filter(|entry| entry.entry.mode == CatalogMode::Continuable && !entry.entry.external)
            .map(|entry| {
                let activity = self.activity(entry.entry.child_id);
                (entry, activity)
            })
            .filter(|(_, activity)| matches!(activity, Activity::Running | Activity::Inactive))
            .collect()
    }

    /// Every live activation, ordered by session id.
    #[must_use]
    pub fn live_activations(&self) -> Vec<(SessionId, &LiveActivation)> {
        let mut live: Vec<_> = self
            .activations
            .iter()
            .filter_map(|(id, activation)| activation.live.as_ref().map(|live| (*id, live)))
            .collect();
        live.sort_by_key(|(id, _)| *id);
        live
    }

    /// The span a new activation of a child of `parent` is parented on
    /// (the rule `subagent_core::telemetry` states, in one place): the span
    /// of the parent's turn in progress, else of the parent's live
    /// activation, else of the root's creation. `None` when none was
    /// recorded (spans were not exported).
    #[must_use]
    pub fn span_parent(&self, parent: SessionId) -> Option<subagent_core::TraceContext> {
        let live = self
            .activations
            .get(&parent)
            .and_then(|activation| activation.live.as_ref());
        if let Some(trace) = live.and_then(|live| live.turn_trace.or(live.trace)) {
            return Some(trace);
        }
        self.tree_trace(parent)
    }

    /// The trace context `session`'s root kept (its `create_agent` span):
    /// the trace every span of the tree is in. `None` when the root kept
    /// none, or `session` is unknown.
    #[must_use]
    pub fn tree_trace(&self, session: SessionId) -> Option<subagent_core::TraceContext> {
        self.lineage(session).last().and_then(|root| root.trace)
    }

    /// Activity of a session (inactive when it was never activated).
    #[must_use]
    pub fn activity(&self, session: SessionId) -> Activity {
        self.activations
            .get(&session)
            .map_or(Activity::Inactive, ActivationState::activity)
    }

    /// The pending messages of a session, oldest first.
    #[must_use]
    pub fn pending_messages(&self, session: SessionId) -> Vec<subagent_core::MessageId> {
        self.inboxes
            .get(&session)
            .map(|inbox| inbox.pending_ids().collect())
            .unwrap_or_default()
    }
}
