//! [`Command`]: everything a caller or a driver can ask of the state
//! machine, named in the imperative, each with its typed payload; and
//! [`Decision`], what `decide` answers with.

use serde_json::Value;
use subagent_core::{
    AbandonReason, AgentOptions, ContentBlock, Delivery, Diagnostic, Event, MessageDelivery,
    MessageId, SessionId, StartOptions, StartSettings, StreamId, SubagentResult, SubagentRunId,
    SubagentStopReason, ToolCallRef,
};

use crate::ownership::TreeClaim;

/// Everything a caller or a driver can ask of the state machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// Record the host's own root session.
    OpenRoot {
        /// The new root session id (not in use).
        session: SessionId,
        /// The root's label, shown in trees and catalogs.
        label: String,
        /// The root agent's options, which its local children inherit.
        agent_options: Option<AgentOptions>,
        /// On a shared log, the opening host's claim on the new tree
        /// (recorded as its `TreeAcquired`); `None` for a single-writer
        /// runtime.
        claim: Option<TreeClaim>,
    },
    /// A host of a shared log takes a root's tree (after the lease of the
    /// host that held it lapsed, or its own after a restart): records the
    /// claim as `TreeAcquired`, then settles what the tree has live, as a
    /// restart's recovery does for a single-writer log.
    TakeTree {
        /// The root of the tree.
        root: SessionId,
        /// The taking host's claim.
        claim: TreeClaim,
    },
    /// Register a provider.
    RegisterProvider {
        /// The registration, as the runtime stream records it.
        registration: Event,
    },
    /// Remove a provider.
    RemoveProvider {
        /// The registered provider name to remove.
        name: String,
    },
    /// Start a child below `parent` (validated against the provider first).
    StartChild(StartChild),
    /// The provider contributed the activation's creation inputs; the
    /// delegated prompt (first activation only) is accepted into the inbox
    /// with them, which ends the caller's cancellation window.
    PrepareActivation {
        /// The child session the command is about.
        child: SessionId,
        /// The activation epoch it addresses (a stale epoch is out of order).
        epoch: u64,
        /// The initial prompt and its message id.
        prompt: Option<(MessageId, Vec<ContentBlock>)>,
        /// Parent history to seed with (fork), as lossless JSON.
        seed: Option<Vec<Value>>,
        /// Whose history the seed copies, and the version it ends at.
        seed_source: Option<(SessionId, u64)>,
    },
    /// The child agent of an activation is live.
    PublishActivation {
        /// The child session the command is about.
        child: SessionId,
        /// The activation epoch it addresses (a stale epoch is out of order).
        epoch: u64,
        /// The run id pairing `subagent/start` and `subagent/end`.
        run_id: SubagentRunId,
    },
    /// A turn begins and claims every pending message, in FIFO order.
    BeginTurn {
        /// The session whose running (or next) turn this is.
        session: SessionId,
    },
    /// A transcript entry of the running turn (`AssistantMessage`,
    /// `ToolCalled`, `ToolReturned` or `AgentReported`).
    RecordTranscript {
        /// The session whose running (or next) turn this is.
        session: SessionId,
        /// The entry.
        entry: Event,
    },
    /// The running turn's agent calls a tool. `decide` records the call and
    /// answers it: a tool the session's lineage restricts is refused, and an
    /// unknown one fails, both recorded as the call's `ToolReturned` in the
    /// same decision; otherwise the decision holds only the call, the
    /// instruction to execute it (its result is recorded with
    /// [`Command::RecordTranscript`]).
    CallTool {
        /// The session whose turn calls.
        session: SessionId,
        /// The turn.
        turn: u64,
        /// The call's id.
        call_id: String,
        /// The tool's name.
        name: String,
        /// Its JSON input.
        input: Value,
        /// Whether the host has a tool of that name (a setting, not a fact
        /// of the log, so the caller supplies it like a start's settings).
        known: bool,
    },
    /// Steering: the running turn claims every pending message at its next
    /// step boundary. A no-op when nothing is pending.
    ClaimSteering {
        /// The session whose running (or next) turn this is.
        session: SessionId,
    },
    /// The running turn ended, with the agent's raw output. On the epoch's
    /// first turn end `decide` also settles the epoch (in the same
    /// decision): the result's output is the last non-empty assistant
    /// message, and a requested output schema is satisfied only by a valid
    /// capture (a completed turn without one settles `error`).
    EndTurn {
        /// The session whose running (or next) turn this is.
        session: SessionId,
        /// Why the turn ended, as the agent reported it.
        stop_reason: SubagentStopReason,
        /// What the agent produced in the turn.
        output: TurnOutput,
    },
    /// An activation produced its result.
    SettleActivation {
        /// The child session the command is about.
        child: SessionId,
        /// The activation epoch it addresses (a stale epoch is out of order).
        epoch: u64,
        /// The settled result (output, structured capture, diagnostic, stop reason).
        result: SubagentResult,
    },
    /// An activation's resources were released (settling it as `aborted`
    /// first when it had no result yet).
    ReleaseActivation {
        /// The child session the command is about.
        child: SessionId,
        /// The activation epoch it addresses (a stale epoch is out of order).
        epoch: u64,
        /// A cleanup failure, recorded beside the result.
        cleanup_error: Option<Diagnostic>,
    },
    /// The activation's agent or driver failed: the agent could not be
    /// built (a model endpoint down, a persona that no longer renders) or a
    /// turn could not go on. A model or transport failure is a result with
    /// stop reason `error` (the spec's `SubagentResult`), so an unsettled
    /// epoch settles `error` with `diagnostic` (and its parent is notified
    /// as for any settlement); a settled result is kept and the diagnostic
    /// is recorded beside it. A running turn ends `error`, and the activation
    /// is released: nothing is left live to swallow messages, pending ones
    /// stay pending, and the next send cold-resumes the child.
    FailActivation {
        /// The child session the command is about.
        child: SessionId,
        /// The activation epoch it addresses (a stale epoch is out of order).
        epoch: u64,
        /// Safe failure detail (already redacted).
        diagnostic: Diagnostic,
    },
    /// An activation ended before publication.
    AbandonActivation {
        /// The child session the command is about.
        child: SessionId,
        /// The activation epoch it addresses (a stale epoch is out of order).
        epoch: u64,
        /// Why it ended before publication (cancelled, preparation failed,
        /// drained, host restart).
        reason: AbandonReason,
    },
    /// An external run was published by its provider.
    StartRun {
        /// The external child whose one run this is.
        child: SessionId,
    },
    /// An external run settled.
    SettleRun {
        /// The external child whose one run this is.
        child: SessionId,
        /// The settled result (output, structured capture, diagnostic, stop reason).
        result: SubagentResult,
    },
    /// An external run's handle was disposed.
    DisposeRun {
        /// The external child whose one run this is.
        child: SessionId,
        /// A cleanup failure, recorded beside the result.
        cleanup_error: Option<Diagnostic>,
    },
    /// The provider refused to start the run.
    FailRunStart {
        /// The external child whose one run this is.
        child: SessionId,
        /// Why the provider refused, already redacted.
        diagnostic: Diagnostic,
    },
    /// A model-authored message between adjacent agents (a direct parent and
    /// its direct child). An idle target takes it in its next turn; an absent
    /// continuable child is cold-resumed (a new activation epoch).
    SendMessage {
        /// The exact live sender.
        sender: SessionId,
        /// The direct parent or direct child addressed.
        target: SessionId,
        /// The inbox id to record.
        message_id: MessageId,
        /// The message's content blocks.
        content: Vec<ContentBlock>,
        /// Queue or steer.
        delivery: MessageDelivery,
    },
    /// The spec's `prompt`: accept a browser-authored message for a
    /// continuable child through its direct parent. The caller checked the
    /// request's shape and that the parent is live (neither is in the log).
    /// A retry of an accepted request (same id, same body) records nothing.
    Prompt {
        /// The direct parent whose authority the caller claims.
        parent: SessionId,
        /// The continuable child addressed.
        child: SessionId,
        /// The caller-minted request identity.
        request_id: String,
        /// The caller's validated IANA time zone.
        zone: Option<String>,
        /// The inbox id to record for a new request.
        message_id: MessageId,
        /// Text and image blocks.
        content: Vec<ContentBlock>,
        /// Queue or steer.
        delivery: MessageDelivery,
    },
    /// Interrupt a child's live execution under a human parent address or a
    /// live ancestor. An absent or idle target is an accepted no-op.
    Interrupt {
        /// The child whose live execution to stop.
        target: SessionId,
        /// Who interrupts: the direct parent's address or a live ancestor.
        authority: subagent_core::InterruptAuthority,
    },
    /// A drain closes admission below `parent`.
    CloseAdmission {
        /// The parent entering teardown.
        parent: SessionId,
    },
    /// The parent left the registry; its cutoff ends.
    ReopenAdmission {
        /// The parent that left the registry.
        parent: SessionId,
    },
    /// Settle explicitly everything that was live when the host stopped, end
    /// the registrations of the previous host's providers, and end every
    /// drain's admission cutoff (no parent of the previous host is in the
    /// registry any more). A single-writer runtime's: trees a host of a
    /// shared log holds are left to it.
    Recover,
    /// A host takes an existing root session back (after a restart). Records
    /// nothing: holding a root is a fact of one live runtime, not of the log.
    /// The log only has to show that `session` is a root.
    ReopenRoot {
        /// The root session.
        session: SessionId,
    },
}

impl Command {
    /// The session whose tree the command is about: what a host of a
    /// shared log serializes the command on (commands of one tree run one
    /// at a time, commands of different trees concurrently). `None` for the
    /// host-level commands (registrations, recovery), which run alone.
    #[must_use]
    pub fn subject(&self) -> Option<SessionId> {
        match self {
            Command::RegisterProvider { .. }
            | Command::RemoveProvider { .. }
            | Command::Recover => None,
            Command::OpenRoot { session, .. }
            | Command::ReopenRoot { session }
            | Command::BeginTurn { session }
            | Command::RecordTranscript { session, .. }
            | Command::CallTool { session, .. }
            | Command::ClaimSteering { session }
            | Command::EndTurn { session, .. } => Some(*session),
            Command::TakeTree { root, .. } => Some(*root),
            Command::StartChild(start) => Some(start.parent),
            Command::PrepareActivation { child, .. }
            | Command::PublishActivation { child, .. }
            | Command::SettleActivation { child, .. }
            | Command::ReleaseActivation { child, .. }
            | Command::FailActivation { child, .. }
            | Command::AbandonActivation { child, .. }
            | Command::StartRun { child }
            | Command::SettleRun { child, .. }
            | Command::DisposeRun { child, .. }
            | Command::FailRunStart { child, .. }
            | Command::Prompt { child, .. } => Some(*child),
            Command::SendMessage { target, .. } | Command::Interrupt { target, .. } => {
                Some(*target)
            }
            Command::CloseAdmission { parent } | Command::ReopenAdmission { parent } => {
                Some(*parent)
            }
        }
    }

    /// The command's name in snake case (`start_child`, `begin_turn`, ...):
    /// what its span and its refusal metrics are labelled with.
    #[must_use]
    pub fn name(&self) -> &'static str {
        match self {
            Command::OpenRoot { .. } => "open_root",
            Command::TakeTree { .. } => "take_tree",
            Command::RegisterProvider { .. } => "register_provider",
            Command::RemoveProvider { .. } => "remove_provider",
            Command::StartChild(_) => "start_child",
            Command::PrepareActivation { .. } => "prepare_activation",
            Command::PublishActivation { .. } => "publish_activation",
            Command::BeginTurn { .. } => "begin_turn",
            Command::RecordTranscript { .. } => "record_transcript",
            Command::CallTool { .. } => "call_tool",
            Command::ClaimSteering { .. } => "claim_steering",
            Command::EndTurn { .. } => "end_turn",
            Command::SettleActivation { .. } => "settle_activation",
            Command::ReleaseActivation { .. } => "release_activation",
            Command::FailActivation { .. } => "fail_activation",
            Command::AbandonActivation { .. } => "abandon_activation",
            Command::StartRun { .. } => "start_run",
            Command::SettleRun { .. } => "settle_run",
            Command::DisposeRun { .. } => "dispose_run",
            Command::FailRunStart { .. } => "fail_run_start",
            Command::SendMessage { .. } => "send_message",
            Command::Prompt { .. } => "prompt",
            Command::Interrupt { .. } => "interrupt",
            Command::CloseAdmission { .. } => "close_admission",
            Command::ReopenAdmission { .. } => "reopen_admission",
            Command::Recover => "recover",
            Command::ReopenRoot { .. } => "reopen_root",
        }
    }
}

/// What an agent produced in one turn, as the driver saw it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TurnOutput {
    /// The contents of its assistant messages, in order.
    pub assistant: Vec<Vec<ContentBlock>>,
    /// Its structured capture, if it made one.
    pub structured: Option<Value>,
    /// Failure detail for a turn that did not complete (already redacted).
    pub diagnostic: Option<Diagnostic>,
}

/// A request to start a child.
#[derive(Clone, Debug, PartialEq)]
pub struct StartChild {
    /// The delegating parent.
    pub parent: SessionId,
    /// The child's reserved id.
    pub child: SessionId,
    /// The provider.
    pub provider: String,
    /// The catalog label.
    pub label: String,
    /// Capability-gated options.
    pub options: StartOptions,
    /// Who receives the result.
    pub delivery: Delivery,
    /// The run id (external children).
    pub run_id: SubagentRunId,
    /// The parent's delegation tool call that asks for the start, when
    /// its agent does: a call of the parent's running turn.
    pub requested_by: Option<ToolCallRef>,
    /// The deployment settings the start is checked against: persona
    /// variables, the host's tool names and model selection.
    pub settings: std::sync::Arc<StartSettings>,
}

/// The events of one decision, grouped by stream, to be appended atomically.
pub type Decision = Vec<(StreamId, Vec<Event>)>;

/// A decision that appends `events` to one stream.
pub(super) fn single(stream: StreamId, events: Vec<Event>) -> Decision {
    vec![(stream, events)]
}

/// Adds `events` to `stream`'s part of `decision` (a new part when the
/// stream has none yet), so each stream appears once.
pub(super) fn push_to(decision: &mut Decision, stream: StreamId, events: Vec<Event>) {
    match decision
        .iter_mut()
        .find(|(existing, _)| *existing == stream)
    {
        Some((_, existing)) => existing.extend(events),
        None => decision.push((stream, events)),
    }
}
