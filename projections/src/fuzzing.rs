//! The bodies of the cargo-fuzz targets (`fuzz/fuzz_targets/`), one function
//! per target, so `make test` replays the committed corpora through exactly
//! the code the fuzzer runs (`tests/fuzz_corpora.rs`). Each body accepts any
//! bytes, must never panic, and asserts the property its target guards.
//!
//! | target                | property |
//! |-----------------------|----------|
//! | `record_decode`       | decoding any bytes is an error or a record that re-encodes to an equal record; as a body, the fast path and the general decoder agree, and what the general decoder reads the canonical writer writes as `serde_json` does |
//! | `event_json`          | any JSON event either fails to decode or round-trips |
//! | `checkpoint_decode`   | any checkpoint bytes are rejected or round-trip to the same state |
//! | `schema_subset`       | a schema the subset checker accepts compiles and validates without panicking |
//! | `persona_template`    | a template validates exactly when it renders, and a render leaves no `{{` of its own |
//! | `decide_sequence`     | any command sequence through `decide` keeps the fold (as an independently written [`ReferenceFold`](crate::fuzzing::ReferenceFold) computes it), checkpoints and inbox invariants, and records only histories [`crate::HistoryCheck`] admits |

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::Value;
use subagent_core::{
    persona, record, schema, AbandonReason, AgentOptions, ContentBlock, Delivery, Diagnostic,
    Event, InterruptAuthority, MessageDelivery, MessageId, SessionId, StartOptions, StartSettings,
    SubagentCapabilities, SubagentResult, SubagentRunId, SubagentStopReason, ToolRestriction,
};

use crate::admissible::HistoryCheck;
use crate::checkpoint;
use crate::machine::{decide, Command, StartChild};
use crate::state::Projections;
use crate::testing::HistoryBuilder;

/// `record_decode`: any bytes at any position, and the same bytes as a
/// record's body, which the canonical fast path may read only when the
/// general decoder reads them to the same record. Whatever the general
/// decoder reads, the canonical writer writes as `serde_json` does.
pub fn record_decode(data: &[u8]) {
    if let Some(fast) = record::decode_canonical_body(data) {
        match record::decode_body_general(data) {
            Ok(general) => assert_eq!(fast, general),
            Err(err) => panic!("the fast path read a body the general decoder refuses: {err}"),
        }
    }
    if let Ok(general) = record::decode_body_general(data) {
        let encoded = record::encode(&general).expect("a decoded record encodes");
        let body = &encoded[encoded.len() - record::body_len(&encoded)..];
        let reference = serde_json::to_vec(&general).expect("a decoded record serializes");
        assert_eq!(
            body,
            reference.as_slice(),
            "the canonical writer strays from serde_json"
        );
    }
    let Ok(decoded) = record::decode(1, data) else {
        return;
    };
    let encoded = record::encode(&decoded).expect("a decoded record encodes");
    let again = record::decode(1, &encoded).expect("an encoded record decodes");
    assert_eq!(again, decoded);
}

/// `event_json`: any bytes as the JSON of an event at the current schema.
pub fn event_json(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(event) =
        subagent_core::upcast::decode_event(subagent_core::CURRENT_SCHEMA_VERSION, text)
    else {
        return;
    };
    let json = serde_json::to_string(&event).expect("a decoded event encodes");
    let again = subagent_core::upcast::decode_event(subagent_core::CURRENT_SCHEMA_VERSION, &json)
        .expect("an encoded event decodes");
    assert_eq!(again, event);
}

/// `checkpoint_decode`: any bytes as a stored checkpoint, as they are and
/// with their checksum made good (else almost every mutation would stop at
/// the checksum and the parts' decoding would go unexplored). Whatever
/// decodes re-encodes to a checkpoint that decodes to the same state.
pub fn checkpoint_decode(data: &[u8]) {
    let _ = checkpoint::usable(Some(data), u64::MAX);
    let mut resealed = data.to_vec();
    if let Some(crc) = checkpoint::checksum(&resealed) {
        resealed[12..16].copy_from_slice(&crc.to_le_bytes());
    }
    for bytes in [data, &resealed] {
        let Ok(state) = checkpoint::decode(bytes) else {
            continue;
        };
        let again =
            checkpoint::decode(&checkpoint::encode(&state)).expect("a checkpoint re-decodes");
        assert_eq!(again, state);
    }
}

/// `schema_subset`: any bytes as a candidate output schema. An accepted one
/// must compile; its `examples` value (if any) and `{}` are validated
/// against it.
pub fn schema_subset(data: &[u8]) {
    let Ok(schema) = serde_json::from_slice::<Value>(data) else {
        return;
    };
    if schema::assert_object_json_schema(&schema).is_err() {
        return;
    }
    let empty = Value::Object(serde_json::Map::new());
    for instance in [schema.get("examples"), Some(&empty)] {
        if let Err(reason) = schema::validate_capture(&schema, instance) {
            assert_ne!(reason, schema::SCHEMA_DOES_NOT_COMPILE, "{schema}");
        }
    }
}

/// `persona_template`: any bytes as a persona template against the
/// variables `user` and `task`.
pub fn persona_template(data: &[u8]) {
    let template = String::from_utf8_lossy(data);
    let variables: BTreeMap<String, String> = [("user", "Ada"), ("task", "audit")]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
    let valid = persona::validate(&template, &variables);
    let rendered = persona::render(&template, &variables);
    assert_eq!(valid.is_ok(), rendered.is_ok(), "{template:?}");
    if let (Ok(pieces), Ok(text)) = (persona::parse(&template), rendered) {
        // Only literal text and the variables' values come out.
        let literal_len: usize = pieces
            .iter()
            .map(|piece| match piece {
                persona::Piece::Text(text) => text.len(),
                persona::Piece::Variable(name) => variables[*name].len(),
            })
            .sum();
        assert_eq!(text.len(), literal_len);
    }
}

/// `decide_sequence`: the bytes drive a sequence of commands over a small
/// world (a few sessions, two providers). Every accepted decision is folded
/// in; afterwards the [`ReferenceFold`] of the history, a checkpoint round
/// trip and the inbox accounting must all agree with the incremental
/// state, and the recorded
/// history must pass the admissibility check (so the check is never
/// stricter than the state machine).
pub fn decide_sequence(data: &[u8]) {
    let _ = decide_sequence_history(data);
}

/// [`decide_sequence`], returning the type names of the events recorded.
#[must_use]
pub fn decide_sequence_history(data: &[u8]) -> Vec<&'static str> {
    let mut world = FuzzWorld::default();
    let mut bytes = data.iter().copied();
    while let Some(op) = bytes.next() {
        let mut arg = || bytes.next().unwrap_or(0);
        let command = world.command(op, &mut arg);
        if let Ok(decision) = decide(&world.state, command) {
            for (stream, events) in decision {
                for event in events {
                    assert!(event.belongs_in(&stream), "{event:?} in {stream}");
                    let record = world.history.push(stream, event).clone();
                    world.state.apply(&record);
                }
            }
        }
    }
    // The incremental state agrees with a fold written apart from
    // `Projections::apply` (a rebuild through `apply` would only repeat it).
    ReferenceFold::fold(&world.history.records).assert_agrees(&world.state, "decide_sequence");
    // Everything decide records is a history the admissibility check accepts.
    if let Err(violation) = HistoryCheck::history(&world.history.records) {
        panic!("decide recorded an inadmissible history: {violation}");
    }
    let restored = checkpoint::decode(&checkpoint::encode(&world.state)).expect("round trip");
    assert_eq!(restored, world.state);
    for (session, inbox) in &world.state.inboxes {
        assert_eq!(
            inbox.accepted as usize,
            inbox.pending.len() + inbox.claimed.len() + inbox.dropped.len(),
            "{session}: a message was lost or duplicated"
        );
    }
    for record in world.state.sessions.values() {
        if let Some(max_depth) = record.descriptor.as_ref().and_then(|d| d.max_depth) {
            assert!(record.depth <= max_depth, "invariant 12");
        }
    }
    world
        .history
        .records
        .iter()
        .map(|record| record.event.type_name())
        .collect()
}

#[derive(Default)]
struct FuzzWorld {
    state: Projections,
    history: HistoryBuilder,
    /// Every session id handed out, in order.
    sessions: Vec<SessionId>,
    next_id: u128,
}

const PROVIDERS: [&str; 2] = ["spawn", "run"];

impl FuzzWorld {
    fn fresh(&mut self) -> uuid::Uuid {
        self.next_id += 1;
        uuid::Uuid::from_u128(self.next_id)
    }

    fn session(&mut self, pick: u8) -> SessionId {
        if self.sessions.is_empty() || pick == u8::MAX {
            let id = SessionId::from_uuid(self.fresh());
            self.sessions.push(id);
            return id;
        }
        self.sessions[usize::from(pick) % self.sessions.len()]
    }

    fn epoch(&self, session: SessionId, skew: u8) -> u64 {
        let epoch = self.state.activations.get(&session).map_or(1, |a| a.epoch);
        // Mostly the right epoch; sometimes a stale or future one.
        match skew % 8 {
            0 => epoch.saturating_sub(1),
            1 => epoch + 1,
            _ => epoch,
        }
    }

    fn result(arg: u8) -> SubagentResult {
        let stop_reason = match arg % 4 {
            0 => SubagentStopReason::Completed,
            1 => SubagentStopReason::Aborted,
            2 => SubagentStopReason::Error,
            _ => SubagentStopReason::MaxTokens,
        };
        SubagentResult::failed(stop_reason, vec![ContentBlock::text("out")], "why")
    }

    fn command(&mut self, op: u8, arg: &mut impl FnMut() -> u8) -> Command {
        // Ops 22 and 23 were added later; every other byte keeps the
        // meaning it had, so the committed corpora still say what they said.
        match op {
            22 => {
                let child = self.session(arg());
                return Command::FailActivation {
                    child,
                    epoch: self.epoch(child, arg()),
                    diagnostic: Diagnostic::new("model endpoint down"),
                };
            }
            23 => {
                return Command::ReopenRoot {
                    session: self.session(arg()),
                }
            }
            _ => {}
        }
        match op % 24 {
            0 => {
                let session = SessionId::from_uuid(self.fresh());
                self.sessions.push(session);
                let agent_options = (arg() & 1 == 0).then(|| AgentOptions {
                    model: Some("m".into()),
                    ..AgentOptions::default()
                });
                Command::OpenRoot {
                    session,
                    label: "root".into(),
                    agent_options,
                    claim: None,
                }
            }
            1 => {
                let name = PROVIDERS[usize::from(arg()) % 2];
                Command::RegisterProvider {
                    registration: Event::ProviderRegistered {
                        name: name.into(),
                        capabilities: SubagentCapabilities::ALL,
                        inherits_parent_context: false,
                        route_defaults: None,
                        continuable: name == "spawn",
                        one_shot: name == "run",
                    },
                }
            }
            2 => Command::RemoveProvider {
                name: PROVIDERS[usize::from(arg()) % 2].into(),
            },
            3 => self.start_child(arg),
            4 => {
                let child = self.session(arg());
                Command::PrepareActivation {
                    child,
                    epoch: self.epoch(child, arg()),
                    prompt: Some((
                        MessageId::from_uuid(self.fresh()),
                        vec![ContentBlock::text("task")],
                    )),
                    seed: None,
                    seed_source: None,
                }
            }
            5 => {
                let child = self.session(arg());
                Command::PublishActivation {
                    child,
                    epoch: self.epoch(child, arg()),
                    run_id: SubagentRunId::from_uuid(*child.as_uuid()),
                }
            }
            6 => Command::BeginTurn {
                session: self.session(arg()),
            },
            7 => Command::ClaimSteering {
                session: self.session(arg()),
            },
            8 => {
                let session = self.session(arg());
                let turn = self.state.activations.get(&session).map_or(1, |a| a.turns);
                Command::RecordTranscript {
                    session,
                    entry: Event::AssistantMessage {
                        turn,
                        content: vec![ContentBlock::text("said")],
                        usage: None,
                    },
                }
            }
            9 => {
                let session = self.session(arg());
                let result = Self::result(arg());
                Command::EndTurn {
                    session,
                    stop_reason: result.stop_reason,
                    output: crate::TurnOutput {
                        assistant: vec![result.output],
                        structured: result.structured,
                        diagnostic: result.diagnostic,
                    },
                }
            }
            10 => {
                let child = self.session(arg());
                Command::SettleActivation {
                    child,
                    epoch: self.epoch(child, arg()),
                    result: Self::result(arg()),
                }
            }
            11 => {
                let child = self.session(arg());
                Command::ReleaseActivation {
                    child,
                    epoch: self.epoch(child, arg()),
                    cleanup_error: (arg() & 1 == 0).then(|| Diagnostic::new("cleanup")),
                }
            }
            12 => {
                let child = self.session(arg());
                let reason = match arg() % 4 {
                    0 => AbandonReason::Cancelled,
                    1 => AbandonReason::HostRestart,
                    2 => AbandonReason::Drained,
                    _ => AbandonReason::PreparationFailed {
                        diagnostic: Diagnostic::new("prep"),
                    },
                };
                Command::AbandonActivation {
                    child,
                    epoch: self.epoch(child, arg()),
                    reason,
                }
            }
            13 => Command::StartRun {
                child: self.session(arg()),
            },
            14 => Command::SettleRun {
                child: self.session(arg()),
                result: Self::result(arg()),
            },
            15 => Command::DisposeRun {
                child: self.session(arg()),
                cleanup_error: None,
            },
            16 => Command::FailRunStart {
                child: self.session(arg()),
                diagnostic: Diagnostic::new("failed"),
            },
            17 => {
                let sender = self.session(arg());
                let target = self.session(arg());
                Command::SendMessage {
                    sender,
                    target,
                    message_id: MessageId::from_uuid(self.fresh()),
                    content: vec![ContentBlock::text("note")],
                    delivery: if arg() & 1 == 0 {
                        MessageDelivery::Queue
                    } else {
                        MessageDelivery::Steer
                    },
                }
            }
            18 => {
                let target = self.session(arg());
                let holder = self.session(arg());
                let authority = if arg() & 1 == 0 {
                    InterruptAuthority::User {
                        parent_session_id: holder,
                    }
                } else {
                    InterruptAuthority::Ancestor {
                        agent_session_id: holder,
                    }
                };
                Command::Interrupt { target, authority }
            }
            19 => Command::CloseAdmission {
                parent: self.session(arg()),
            },
            20 => Command::ReopenAdmission {
                parent: self.session(arg()),
            },
            21 => {
                let session = self.session(arg());
                let turn = self.state.activations.get(&session).map_or(1, |a| a.turns);
                let name = ["read_file", "shell"][usize::from(arg()) % 2];
                Command::CallTool {
                    session,
                    turn,
                    call_id: format!("call-{}", self.fresh()),
                    name: name.into(),
                    input: serde_json::json!({}),
                    known: !arg().is_multiple_of(4),
                }
            }
            22 => {
                // Few request ids and bodies, so retries and conflicts occur.
                let flags = arg();
                Command::Prompt {
                    parent: self.session(arg()),
                    child: self.session(arg()),
                    request_id: ["r1", "r2"][usize::from(flags & 1)].into(),
                    zone: (flags & 2 != 0).then(|| "Europe/Paris".into()),
                    message_id: MessageId::from_uuid(self.fresh()),
                    content: vec![ContentBlock::text(
                        ["hi", "ho"][usize::from(flags >> 2 & 1)],
                    )],
                    delivery: if flags & 8 == 0 {
                        MessageDelivery::Queue
                    } else {
                        MessageDelivery::Steer
                    },
                }
            }
            _ => Command::Recover,
        }
    }

    fn start_child(&mut self, arg: &mut impl FnMut() -> u8) -> Command {
        let parent = self.session(arg());
        let child = SessionId::from_uuid(self.fresh());
        self.sessions.push(child);
        let flags = arg();
        let options = StartOptions {
            max_depth: (flags & 1 != 0).then(|| u64::from(arg() % 4)),
            tool_filter: (flags & 2 != 0).then(|| ToolRestriction::Deny(vec!["shell".into()])),
            persona: (flags & 4 != 0).then(|| "Serve {{user}}".into()),
            output_schema: (flags & 8 != 0).then(|| serde_json::json!({"type": "object"})),
            agent_options: (flags & 16 != 0).then(|| AgentOptions {
                reasoning_effort: Some("high".into()),
                ..AgentOptions::default()
            }),
        };
        let settings = StartSettings {
            persona_variables: [("user".to_owned(), "Ada".to_owned())].into(),
            tools: ["shell".to_owned()].into(),
            ..StartSettings::default()
        };
        Command::StartChild(StartChild {
            parent,
            child,
            provider: PROVIDERS[usize::from(arg()) % 2].into(),
            label: "task".into(),
            options,
            delivery: if flags & 32 != 0 {
                Delivery::Caller
            } else {
                Delivery::Parent
            },
            run_id: SubagentRunId::from_uuid(*child.as_uuid()),
            requested_by: None,
            settings: Arc::new(settings),
        })
    }
}

/// An independently written fold of the properties of [`Projections`] that
/// the runtime and its tests rely on, for comparing `Projections::apply`
/// (incrementally, through a checkpoint, or inside [`HistoryCheck`])
/// against something other than itself.
///
/// Written from the events' documented meaning in plain `std` collections;
/// it shares no code with `state.rs` (not its maps, not [`crate::Inbox`]'s
/// methods, not its helpers), so a defect there is not repeated here. It
/// keeps:
/// - the position folded, the roots in creation order, each session's
///   parent, depth, label, provider, mode and whether it is external;
/// - each parent's catalog, in its stream's order;
/// - each session's last requested epoch, its live activation (epoch,
///   phase, whether settled, run id), its running turn and highest turn;
/// - each external child's run (id and phase);
/// - each inbox: how many messages were accepted, the pending ones in
///   FIFO order, the claimed ones with their turn, the dropped ones with
///   their epoch;
/// - each registry's provider names in order, each tree's owner, and the
///   parents whose admission is closed.
///
/// What it leaves out (descriptors, results, traces, prompt receipts) the
/// checkpoint round trips and the state machine's own tests cover.
#[derive(Clone, Debug, Default)]
pub struct ReferenceFold {
    position: u64,
    roots: Vec<SessionId>,
    sessions: BTreeMap<SessionId, ReferenceSession>,
    catalogs: BTreeMap<SessionId, Vec<ReferenceEntry>>,
    activations: BTreeMap<SessionId, ReferenceActivation>,
    runs: BTreeMap<SessionId, (SubagentRunId, &'static str)>,
    inboxes: BTreeMap<SessionId, ReferenceInbox>,
    runtime_registry: Vec<String>,
    host_registries: BTreeMap<subagent_core::HostId, Vec<String>>,
    owners: BTreeMap<SessionId, (subagent_core::HostId, String, u64)>,
    closed: std::collections::BTreeSet<SessionId>,
}

/// A session as its `SessionCreated` recorded it.
#[derive(Clone, Debug, PartialEq)]
struct ReferenceSession {
    parent: Option<SessionId>,
    depth: u64,
    label: String,
    provider: Option<String>,
    mode: subagent_core::SessionMode,
    external: bool,
}

/// A catalog entry: the child, its label, provider, mode, external.
type ReferenceEntry = (SessionId, String, String, subagent_core::SessionMode, bool);

/// A live activation: its epoch, phase, whether it settled, its run id.
type ReferenceLive = (u64, &'static str, bool, Option<SubagentRunId>);

#[derive(Clone, Debug, Default, PartialEq)]
struct ReferenceActivation {
    epoch: u64,
    live: Option<ReferenceLive>,
    running_turn: Option<u64>,
    turns: u64,
    /// The running turn's calls not yet returned.
    open_calls: Vec<String>,
}

#[derive(Clone, Debug, Default, PartialEq)]
struct ReferenceInbox {
    accepted: u64,
    pending: Vec<MessageId>,
    claimed: BTreeMap<MessageId, u64>,
    dropped: BTreeMap<MessageId, u64>,
}

impl ReferenceFold {
    /// Folds every record of `records`, in order.
    #[must_use]
    pub fn fold<'a>(records: impl IntoIterator<Item = &'a subagent_core::RecordedEvent>) -> Self {
        let mut fold = Self::default();
        for record in records {
            fold.apply(record);
        }
        fold
    }

    /// Folds one record in; one at or below the position folded is ignored.
    pub fn apply(&mut self, record: &subagent_core::RecordedEvent) {
        use subagent_core::StreamId;
        if record.position <= self.position {
            return;
        }
        self.position = record.position;
        let session = match record.stream {
            StreamId::Session(session) => Some(session),
            StreamId::Runtime | StreamId::Host(_) => None,
        };
        match &record.event {
            Event::ProviderRegistered { name, .. } => {
                // A registration under a known name replaces it, and the
                // name moves to the end of the registration order.
                if let Some(names) = self.registry(record.stream) {
                    names.retain(|known| known != name);
                    names.push(name.clone());
                }
            }
            Event::ProviderRemoved { name } => {
                if let Some(names) = self.registry(record.stream) {
                    names.retain(|known| known != name);
                }
            }
            Event::AdmissionClosed { parent } => {
                self.closed.insert(*parent);
            }
            Event::AdmissionReopened { parent } => {
                self.closed.remove(parent);
            }
            Event::TreeAcquired {
                host,
                holder,
                fence,
            } => {
                if let Some(root) = session {
                    self.owners.insert(root, (*host, holder.clone(), *fence));
                }
            }
            Event::SessionCreated {
                session: created,
                parent,
                depth,
                label,
                provider,
                mode,
                external,
                ..
            } => {
                if parent.is_none() {
                    self.roots.push(*created);
                }
                self.sessions.insert(
                    *created,
                    ReferenceSession {
                        parent: *parent,
                        depth: *depth,
                        label: label.clone(),
                        provider: provider.clone(),
                        mode: *mode,
                        external: *external,
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
                    self.catalogs.entry(parent).or_default().push((
                        *child,
                        label.clone(),
                        provider.clone(),
                        *mode,
                        *external,
                    ));
                }
            }
            Event::ActivationRequested { epoch, .. } => {
                if let Some(session) = session {
                    let activation = self.activations.entry(session).or_default();
                    activation.epoch = *epoch;
                    activation.live = Some((*epoch, "requested", false, None));
                }
            }
            Event::ActivationPrepared { epoch, .. } => {
                if let Some(live) = self.live_at(session, *epoch) {
                    live.1 = "prepared";
                }
            }
            Event::ActivationPublished { epoch, run_id } => {
                if let Some(live) = self.live_at(session, *epoch) {
                    live.1 = "published";
                    live.3 = Some(*run_id);
                }
            }
            Event::ActivationSettled { epoch, .. } => {
                if let Some(live) = self.live_at(session, *epoch) {
                    live.2 = true;
                }
            }
            Event::ActivationReleased { epoch, .. } | Event::ActivationAbandoned { epoch, .. } => {
                // The live activation of that epoch ends, and with it any
                // turn it was running.
                if self.live_at(session, *epoch).is_some() {
                    if let Some(activation) = session.and_then(|s| self.activations.get_mut(&s)) {
                        activation.live = None;
                        activation.running_turn = None;
                        activation.open_calls.clear();
                    }
                }
            }
            Event::RunRequested { run_id, .. } => {
                if let Some(session) = session {
                    self.runs.insert(session, (*run_id, "requested"));
                }
            }
            Event::RunStarted { run_id } => self.run_phase(session, *run_id, "started"),
            Event::RunSettled { run_id, .. } => self.run_phase(session, *run_id, "settled"),
            Event::RunDisposed { run_id, .. } => self.run_phase(session, *run_id, "disposed"),
            Event::RunStartFailed { run_id, .. } => {
                self.run_phase(session, *run_id, "start-failed");
            }
            Event::MessageAccepted { message_id, .. } => {
                if let Some(session) = session {
                    let inbox = self.inboxes.entry(session).or_default();
                    inbox.accepted += 1;
                    inbox.pending.push(*message_id);
                }
            }
            Event::MessagesClaimed { ids, turn } => {
                if let Some(session) = session {
                    let inbox = self.inboxes.entry(session).or_default();
                    for id in ids {
                        inbox.pending.retain(|pending| pending != id);
                        inbox.claimed.insert(*id, *turn);
                    }
                }
            }
            Event::MessagesDropped { ids, epoch } => {
                if let Some(session) = session {
                    let inbox = self.inboxes.entry(session).or_default();
                    for id in ids {
                        inbox.pending.retain(|pending| pending != id);
                        inbox.dropped.insert(*id, *epoch);
                    }
                }
            }
            Event::TurnStarted { turn, .. } => {
                if let Some(session) = session {
                    let activation = self.activations.entry(session).or_default();
                    activation.running_turn = Some(*turn);
                    activation.turns = activation.turns.max(*turn);
                    activation.open_calls.clear();
                }
            }
            Event::TurnEnded { turn, .. } => {
                if let Some(activation) = session.and_then(|s| self.activations.get_mut(&s)) {
                    if activation.running_turn == Some(*turn) {
                        activation.running_turn = None;
                        activation.open_calls.clear();
                    }
                }
            }
            Event::ToolCalled { turn, call_id, .. } => {
                if let Some(activation) = session.and_then(|s| self.activations.get_mut(&s)) {
                    if activation.running_turn == Some(*turn) {
                        activation.open_calls.push(call_id.clone());
                    }
                }
            }
            Event::ToolReturned { call_id, .. } => {
                if let Some(activation) = session.and_then(|s| self.activations.get_mut(&s)) {
                    activation.open_calls.retain(|open| open != call_id);
                }
            }
            Event::HostRecovered { .. }
            | Event::HistorySeeded { .. }
            | Event::AssistantMessage { .. }
            | Event::AgentReported { .. }
            | Event::InterruptRequested { .. } => {}
        }
    }

    /// The provider names of the registry `stream` records: the runtime
    /// stream's, or a host's.
    fn registry(&mut self, stream: subagent_core::StreamId) -> Option<&mut Vec<String>> {
        match stream {
            subagent_core::StreamId::Runtime => Some(&mut self.runtime_registry),
            subagent_core::StreamId::Host(host) => {
                Some(self.host_registries.entry(host).or_default())
            }
            subagent_core::StreamId::Session(_) => None,
        }
    }

    fn live_at(&mut self, session: Option<SessionId>, epoch: u64) -> Option<&mut ReferenceLive> {
        self.activations
            .get_mut(&session?)?
            .live
            .as_mut()
            .filter(|live| live.0 == epoch)
    }

    fn run_phase(
        &mut self,
        session: Option<SessionId>,
        run_id: SubagentRunId,
        phase: &'static str,
    ) {
        if let Some(run) = session.and_then(|s| self.runs.get_mut(&s)) {
            if run.0 == run_id {
                run.1 = phase;
            }
        }
    }

    /// Where `state` disagrees with this fold, naming the first property
    /// that differs; `None` when they agree.
    #[must_use]
    pub fn disagreement(&self, state: &Projections) -> Option<String> {
        use crate::{ActivationPhase, RunPhase};
        fn differ<T: PartialEq + std::fmt::Debug>(
            what: &str,
            reference: &T,
            state: &T,
        ) -> Option<String> {
            (reference != state).then(|| {
                format!("{what}: the reference has {reference:?}, the projections {state:?}")
            })
        }
        let mut found = differ("the position", &self.position, &state.position)
            .or_else(|| differ("the roots", &self.roots, &state.roots));
        // Sessions.
        let sessions: BTreeMap<SessionId, ReferenceSession> = state
            .sessions
            .iter()
            .map(|(id, record)| {
                (
                    *id,
                    ReferenceSession {
                        parent: record.parent,
                        depth: record.depth,
                        label: record.label.clone(),
                        provider: record.provider.clone(),
                        mode: record.mode,
                        external: record.external,
                    },
                )
            })
            .collect();
        found = found.or_else(|| differ("the sessions", &self.sessions, &sessions));
        // Catalogs (a parent with no entry lists nothing).
        let catalogs: BTreeMap<SessionId, Vec<ReferenceEntry>> = state
            .catalogs
            .iter()
            .filter(|(_, facts)| !facts.is_empty())
            .map(|(parent, facts)| {
                let entries = facts
                    .iter()
                    .map(|fact| {
                        (
                            fact.child,
                            fact.label.clone(),
                            fact.provider.clone(),
                            fact.mode,
                            fact.external,
                        )
                    })
                    .collect();
                (*parent, entries)
            })
            .collect();
        found = found.or_else(|| differ("the catalogs", &self.catalogs, &catalogs));
        // Activations (a session with none is the default: epoch 0,
        // nothing live, no turn).
        let activations: BTreeMap<SessionId, ReferenceActivation> = state
            .activations
            .iter()
            .map(|(id, activation)| {
                let live = activation.live.as_ref().map(|live| {
                    let phase = match live.phase {
                        ActivationPhase::Requested => "requested",
                        ActivationPhase::Prepared => "prepared",
                        ActivationPhase::Published => "published",
                    };
                    (live.epoch, phase, live.settled, live.run_id)
                });
                let activation = ReferenceActivation {
                    epoch: activation.epoch,
                    live,
                    running_turn: activation.running_turn,
                    turns: activation.turns,
                    open_calls: activation.open_calls.clone(),
                };
                (*id, activation)
            })
            .filter(|(_, activation)| *activation != ReferenceActivation::default())
            .collect();
        let reference: BTreeMap<SessionId, ReferenceActivation> = self
            .activations
            .iter()
            .filter(|(_, activation)| **activation != ReferenceActivation::default())
            .map(|(id, activation)| (*id, activation.clone()))
            .collect();
        found = found.or_else(|| differ("the activations", &reference, &activations));
        // Runs.
        let runs: BTreeMap<SessionId, (SubagentRunId, &'static str)> = state
            .runs
            .iter()
            .map(|(id, run)| {
                let phase = match run.phase {
                    RunPhase::Requested => "requested",
                    RunPhase::Started => "started",
                    RunPhase::Settled => "settled",
                    RunPhase::Disposed => "disposed",
                    RunPhase::StartFailed => "start-failed",
                };
                (*id, (run.run_id, phase))
            })
            .collect();
        found = found.or_else(|| differ("the runs", &self.runs, &runs));
        // Inboxes (a session with none has an empty one).
        let inboxes: BTreeMap<SessionId, ReferenceInbox> = state
            .inboxes
            .iter()
            .map(|(id, inbox)| {
                let inbox = ReferenceInbox {
                    accepted: inbox.accepted,
                    pending: inbox.pending.iter().map(|(id, _)| *id).collect(),
                    claimed: inbox
                        .claimed
                        .iter()
                        .map(|(id, turn)| (*id, *turn))
                        .collect(),
                    dropped: inbox
                        .dropped
                        .iter()
                        .map(|(id, epoch)| (*id, *epoch))
                        .collect(),
                };
                (*id, inbox)
            })
            .filter(|(_, inbox)| *inbox != ReferenceInbox::default())
            .collect();
        let reference: BTreeMap<SessionId, ReferenceInbox> = self
            .inboxes
            .iter()
            .filter(|(_, inbox)| **inbox != ReferenceInbox::default())
            .map(|(id, inbox)| (*id, inbox.clone()))
            .collect();
        found = found.or_else(|| differ("the inboxes", &reference, &inboxes));
        // Registries (a host with no provider left has an empty one).
        let names = |registry: &[crate::ProviderRecord]| -> Vec<String> {
            registry
                .iter()
                .map(|provider| provider.name.clone())
                .collect()
        };
        found = found.or_else(|| {
            differ(
                "the runtime's registry",
                &self.runtime_registry,
                &names(&state.providers),
            )
        });
        let hosts: BTreeMap<subagent_core::HostId, Vec<String>> = state
            .host_providers
            .iter()
            .map(|(host, registry)| (*host, names(registry)))
            .filter(|(_, names)| !names.is_empty())
            .collect();
        let reference: BTreeMap<subagent_core::HostId, Vec<String>> = self
            .host_registries
            .iter()
            .filter(|(_, names)| !names.is_empty())
            .map(|(host, names)| (*host, names.clone()))
            .collect();
        found = found.or_else(|| differ("the hosts' registries", &reference, &hosts));
        let owners: BTreeMap<SessionId, (subagent_core::HostId, String, u64)> = state
            .owners
            .iter()
            .map(|(root, owner)| (*root, (owner.host, owner.holder.clone(), owner.fence)))
            .collect();
        found = found.or_else(|| differ("the trees' owners", &self.owners, &owners));
        found.or_else(|| {
            differ(
                "the closed admissions",
                &self.closed,
                &state.admission_closed,
            )
        })
    }

    /// Panics, naming the first property that differs, unless `state`
    /// agrees with this fold ([`ReferenceFold::disagreement`]).
    #[track_caller]
    pub fn assert_agrees(&self, state: &Projections, context: &str) {
        if let Some(difference) = self.disagreement(state) {
            panic!("{context}: the projections disagree with the reference fold on {difference}");
        }
    }
}
