//! Model-based tests of the whole runtime (`proptest-state-machine`).
//!
//! [`Model`] is a reference model written from `../shared/spec/` in plain
//! Rust: a list of sessions with their parent, kind and liveness (a root is
//! live while the host holds it: opened, or taken back after a restart), the
//! registered providers and the parents whose admission a drain closed. It
//! does not use `decide` or the projections. Each generated transition is
//! applied to the model and to a real [`SubagentRuntime`] driven by the
//! scripted agent, over the in-memory log, over RocksDB and over
//! PostgreSQL, there also as a host of a shared log (`open_shared`: a crash
//! is recovered by the next incarnation taking its own trees back); the runtime's
//! answer (success, the error code, `wait_for_children`'s flag, what a
//! reopen after a crash recovered) must equal the model's. After every step, once the runtime is quiescent:
//! - the set of live activations and runs equals the model's;
//! - every parent's catalog lists the model's children in start order;
//! - the runtime's incremental projections equal a fold of the whole log,
//!   and that fold agrees with `ReferenceFold`, a fold of the log written
//!   apart from `Projections::apply`;
//! - every accepted message is pending, claimed or dropped exactly once;
//! - no child is deeper than the depth cap it was started with;
//! - the log itself never shows two live activations of one session, a
//!   release before the children's, or a result settled twice;
//! - every descendant listing is a consistent pre-order.
//!
//! Failures proptest shrinks are kept in `tests/model.proptest-regressions`.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest_state_machine::{prop_state_machine, ReferenceStateMachine, StateMachineTest};
use subagent_core::{
    ContentBlock, Delivery, ErrorCode, Event, SessionId, SubagentActivationSpec, SubagentError,
    ToolRestriction,
};
use subagent_projections::fuzzing::ReferenceFold;
use subagent_projections::{HistoryCheck, Projections};
use subagent_runtime::providers::{InstantProvider, SpawnProvider};
use subagent_runtime::scripted::Step;
use subagent_runtime::{
    InterruptAuthority, LiveAgent, Script, ScriptedHost, SubagentActivation, SubagentProvider,
    SubagentRuntime,
};
use subagent_store::{EventLog, EventLogExt, MemoryLog, RocksLog, RocksOptions};
use tokio_util::sync::CancellationToken;

// ---- the reference model ------------------------------------------------------

/// The providers a transition may name. `Missing` is never registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
enum Provider {
    /// `spawn`: local, continuable, every start option.
    Spawn,
    /// `instant`: external one-shot, no start option.
    Instant,
    /// A name nobody registers.
    Missing,
}

impl Provider {
    fn name(self) -> &'static str {
        match self {
            Provider::Spawn => "spawn",
            Provider::Instant => "instant",
            Provider::Missing => "missing",
        }
    }
}

/// The start option a transition asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StartOption {
    None,
    Persona,
    ToolFilter,
    OutputSchema,
    MaxDepth(u64),
    /// A tool filter naming a tool the host does not have.
    UnknownTool,
    /// A model route, while model selection is disabled.
    Route,
}

/// What the host registers each time it opens the runtime.
const HOST_PROVIDERS: [Provider; 2] = [Provider::Spawn, Provider::Instant];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Root,
    Local,
    External,
}

#[derive(Clone, Debug)]
struct ModelSession {
    parent: Option<usize>,
    depth: u64,
    kind: Kind,
    /// A root that is open, a local child with a live activation, or an
    /// external run not yet disposed.
    live: bool,
    /// The live activation captures structured output (input closed).
    captures: bool,
    /// The host holds this child's current activation handle (from its
    /// start, in this runtime generation, before any cold resume): only then
    /// does `Dispose` release it.
    disposable: bool,
    /// An agent started it through the `subagent` tool: the host holds no
    /// handle to act as it.
    by_tool: bool,
}

/// What an agent does through the runtime's tools, mid-turn, in a turn a
/// message from its parent wakes.
#[derive(Clone, Copy, Debug)]
enum AgentCall {
    /// `subagent`: start a child.
    Start {
        provider: Provider,
        option: StartOption,
    },
    /// `send_message` to a session (refused unless a direct child).
    Message { target: usize },
    /// `send_message` to `parent`: report to its parent.
    Report,
    /// `subagent_control` `close` (refused unless a direct child).
    Close { child: usize },
    /// `subagent_control` `wait` for any child.
    Wait,
}

/// What a transition answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Outcome {
    Ok,
    Observed(bool),
    Err(ErrorCode),
    /// A reopen after a crash settled this many live activations and runs.
    Recovered {
        abandoned: u64,
        failed: u64,
    },
}

#[derive(Clone, Debug)]
struct Model {
    sessions: Vec<ModelSession>,
    providers: BTreeSet<Provider>,
    /// Parents below which a drain closed admission.
    closed: BTreeSet<usize>,
    /// Runtime generation: bumped by every restart.
    restarts: u32,
    /// The answer the last transition must get.
    expected: Outcome,
}

#[derive(Clone, Debug)]
enum Transition {
    Start {
        parent: usize,
        provider: Provider,
        option: StartOption,
    },
    Send {
        sender: usize,
        target: usize,
    },
    Interrupt {
        target: usize,
        /// `true`: `Ancestor(holder)`; `false`: `User { parent: holder }`.
        as_ancestor: bool,
        holder: usize,
    },
    Dispose {
        child: usize,
    },
    DrainChildren {
        parent: usize,
        children: Vec<usize>,
    },
    DrainDescendants {
        parent: usize,
    },
    Wait {
        parent: usize,
    },
    Register(Provider),
    Remove(Provider),
    Restart,
    /// The host dies without closing (every task is dropped), and a new
    /// host reopens the log.
    Crash,
    /// The host takes a root session back (`reopen_root`).
    ReopenRoot {
        session: usize,
    },
    /// The host closes a root it holds (`close_root`).
    CloseRoot {
        session: usize,
    },
    /// `waker` (the agent's parent, as the host) messages `agent`, whose
    /// agent then makes `call` through the runtime's tools in the turn the
    /// message wakes.
    Agent {
        agent: usize,
        waker: usize,
        call: AgentCall,
    },
}

impl ModelSession {
    /// A newly opened root.
    fn root() -> Self {
        ModelSession {
            parent: None,
            depth: 0,
            kind: Kind::Root,
            live: true,
            captures: false,
            disposable: false,
            by_tool: false,
        }
    }
}

impl Model {
    fn new() -> Self {
        Model {
            sessions: vec![ModelSession::root()],
            providers: HOST_PROVIDERS.into_iter().collect(),
            closed: BTreeSet::new(),
            restarts: 0,
            expected: Outcome::Ok,
        }
    }

    fn lineage(&self, session: usize) -> Vec<usize> {
        let mut lineage = vec![session];
        let mut current = self.sessions[session].parent;
        while let Some(parent) = current {
            lineage.push(parent);
            current = self.sessions[parent].parent;
        }
        lineage
    }

    fn admission_closed(&self, session: usize) -> bool {
        self.lineage(session)
            .iter()
            .any(|id| self.closed.contains(id))
    }

    /// Releases `session` and, first, every live session below it; a
    /// released session leaves the registry, which ends a drain's cutoff.
    fn release(&mut self, session: usize) {
        let children: Vec<usize> = (0..self.sessions.len())
            .filter(|id| self.sessions[*id].parent == Some(session) && self.sessions[*id].live)
            .collect();
        for child in children {
            self.release(child);
        }
        self.sessions[session].live = false;
        self.sessions[session].captures = false;
        self.closed.remove(&session);
    }

    /// A new host: every session stops being live, old handles go stale,
    /// every drain's cutoff ends with the registry it belonged to, a new
    /// root opens and the host's providers register again.
    fn reopen(&mut self) {
        for session in &mut self.sessions {
            session.live = false;
            session.captures = false;
            session.disposable = false;
        }
        self.closed.clear();
        self.providers = HOST_PROVIDERS.into_iter().collect();
        self.restarts += 1;
        self.sessions.push(ModelSession::root());
    }

    fn live_children(&self, parent: usize) -> Vec<usize> {
        (0..self.sessions.len())
            .filter(|id| self.sessions[*id].parent == Some(parent) && self.sessions[*id].live)
            .collect()
    }

    /// A session the host can act as: a root, or a local child it started.
    fn delegating(&self, session: usize) -> bool {
        session < self.sessions.len()
            && self.sessions[session].kind != Kind::External
            && !self.sessions[session].by_tool
    }

    /// A local child whose parent the host can act as, to wake it.
    fn wakeable_agent(&self, session: usize) -> bool {
        session < self.sessions.len()
            && self.sessions[session].kind == Kind::Local
            && self.sessions[session]
                .parent
                .is_some_and(|parent| self.delegating(parent))
    }

    fn step(&mut self, transition: &Transition) -> Outcome {
        use Outcome::{Err, Observed, Ok};
        match transition {
            Transition::Start {
                parent,
                provider,
                option,
            } => {
                let parent = *parent;
                if !self.sessions[parent].live {
                    return Err(ErrorCode::Unauthorized);
                }
                if !self.providers.contains(provider) {
                    return Err(ErrorCode::UnknownProvider);
                }
                if self.admission_closed(parent) {
                    return Err(ErrorCode::AdmissionClosed);
                }
                if *provider == Provider::Instant && *option != StartOption::None {
                    return Err(ErrorCode::CapabilityUnsupported);
                }
                match option {
                    StartOption::UnknownTool => return Err(ErrorCode::UnknownTool),
                    StartOption::Route => return Err(ErrorCode::RouteNotAllowed),
                    _ => {}
                }
                let depth = self.sessions[parent].depth + 1;
                if let StartOption::MaxDepth(cap) = option {
                    if depth > *cap {
                        return Err(ErrorCode::DepthExceeded);
                    }
                }
                let kind = if *provider == Provider::Spawn {
                    Kind::Local
                } else {
                    Kind::External
                };
                self.sessions.push(ModelSession {
                    parent: Some(parent),
                    depth,
                    kind,
                    live: true,
                    captures: *option == StartOption::OutputSchema,
                    disposable: true,
                    by_tool: false,
                });
                Ok
            }
            Transition::Send { sender, target } => {
                let (sender, target) = (*sender, *target);
                if !self.sessions[sender].live {
                    return Err(ErrorCode::Unauthorized);
                }
                let to_child = self.sessions[target].parent == Some(sender);
                let to_parent = self.sessions[sender].parent == Some(target);
                if !to_child && !to_parent {
                    return Err(ErrorCode::Unauthorized);
                }
                let record = &self.sessions[target];
                if record.kind == Kind::External {
                    return Err(ErrorCode::NotResumable);
                }
                if record.live && record.captures {
                    return Err(ErrorCode::DeliveryUnavailable);
                }
                if to_child && !record.live {
                    if self.admission_closed(sender) {
                        return Err(ErrorCode::AdmissionClosed);
                    }
                    let record = &mut self.sessions[target];
                    record.live = true;
                    record.captures = false;
                    // A new activation: the start's handle addresses the old one.
                    record.disposable = false;
                }
                Ok
            }
            Transition::Interrupt {
                target,
                as_ancestor,
                holder,
            } => {
                let owns = if *as_ancestor {
                    if !self.sessions[*holder].live {
                        return Err(ErrorCode::Unauthorized);
                    }
                    self.lineage(*target)[1..].contains(holder)
                } else {
                    self.sessions[*target].parent == Some(*holder)
                };
                // Every target is idle here: an authorized interrupt is a no-op.
                if owns {
                    Ok
                } else {
                    Err(ErrorCode::Unauthorized)
                }
            }
            Transition::Dispose { child } => {
                // The handle from the start is current only in the same
                // runtime generation and before any cold resume.
                let record = &self.sessions[*child];
                if record.live && record.disposable {
                    self.release(*child);
                }
                Ok
            }
            Transition::DrainChildren { parent, children } => {
                if !self.sessions[*parent].live {
                    return Err(ErrorCode::Unauthorized);
                }
                let foreign = children.iter().any(|child| {
                    self.sessions[*child].live
                        && self.sessions[*child].kind != Kind::Root
                        && self.sessions[*child].parent != Some(*parent)
                });
                if foreign {
                    return Err(ErrorCode::Unauthorized);
                }
                for child in children {
                    if self.sessions[*child].live && self.sessions[*child].kind != Kind::Root {
                        self.release(*child);
                    }
                }
                Ok
            }
            Transition::DrainDescendants { parent } => {
                if !self.sessions[*parent].live {
                    return Err(ErrorCode::Unauthorized);
                }
                self.closed.insert(*parent);
                for child in self.live_children(*parent) {
                    self.release(child);
                }
                Ok
            }
            Transition::Wait { parent } => {
                if !self.sessions[*parent].live {
                    return Err(ErrorCode::Unauthorized);
                }
                Observed(!self.live_children(*parent).is_empty())
            }
            Transition::Register(provider) => {
                if self.providers.insert(*provider) {
                    Ok
                } else {
                    Err(ErrorCode::DuplicateProvider)
                }
            }
            Transition::Remove(provider) => {
                if self.providers.remove(provider) {
                    Ok
                } else {
                    Err(ErrorCode::UnknownProvider)
                }
            }
            Transition::Restart => {
                // A clean close releases every live child (ending any drain's
                // cutoff below it); the registry and the root handles end
                // with the host.
                let roots: Vec<usize> = (0..self.sessions.len())
                    .filter(|id| self.sessions[*id].kind == Kind::Root)
                    .collect();
                for root in roots {
                    for child in self.live_children(root) {
                        self.release(child);
                    }
                }
                self.reopen();
                Ok
            }
            Transition::Crash => {
                // Nothing is released; the reopen abandons every live
                // activation and settles every live run, and counts them.
                let live = |kind| {
                    self.sessions
                        .iter()
                        .filter(|s| s.live && s.kind == kind)
                        .count() as u64
                };
                let recovered = Outcome::Recovered {
                    abandoned: live(Kind::Local),
                    failed: live(Kind::External),
                };
                self.reopen();
                recovered
            }
            Transition::ReopenRoot { session } => {
                // The log is the authority: only a root session is reopened,
                // and only while no one holds it.
                let record = &mut self.sessions[*session];
                if record.kind != Kind::Root {
                    Err(ErrorCode::Unauthorized)
                } else if record.live {
                    Err(ErrorCode::RootHeld)
                } else {
                    record.live = true;
                    Ok
                }
            }
            Transition::CloseRoot { session } => {
                let record = &mut self.sessions[*session];
                if record.kind != Kind::Root || !record.live {
                    return Err(ErrorCode::Unauthorized);
                }
                // Its children stay as they are; the root leaves the
                // registry, which ends a drain's cutoff below it.
                record.live = false;
                self.closed.remove(session);
                Ok
            }
            Transition::Agent { agent, waker, call } => {
                let (agent, waker) = (*agent, *waker);
                // The message that wakes it is a message like any other.
                let woken = self.step(&Transition::Send {
                    sender: waker,
                    target: agent,
                });
                if woken != Ok {
                    return woken;
                }
                match *call {
                    AgentCall::Start { provider, option } => {
                        let started = self.step(&Transition::Start {
                            parent: agent,
                            provider,
                            option,
                        });
                        if started == Ok {
                            let child = self.sessions.last_mut().expect("just started");
                            child.by_tool = true;
                            child.disposable = false;
                        }
                        started
                    }
                    AgentCall::Message { target } => self.step(&Transition::Send {
                        sender: agent,
                        target,
                    }),
                    AgentCall::Report => self.step(&Transition::Send {
                        sender: agent,
                        target: waker,
                    }),
                    AgentCall::Close { child } => {
                        // Scoped to its own direct children, whatever they do.
                        if self.sessions[child].parent != Some(agent) {
                            return Err(ErrorCode::Unauthorized);
                        }
                        if self.sessions[child].live {
                            self.release(child);
                        }
                        Ok
                    }
                    // At quiescence no child is working: it answers at once.
                    AgentCall::Wait => Ok,
                }
            }
        }
    }
}

fn provider() -> impl Strategy<Value = Provider> {
    prop_oneof![
        4 => Just(Provider::Spawn),
        2 => Just(Provider::Instant),
        1 => Just(Provider::Missing),
    ]
}

fn start_option() -> impl Strategy<Value = StartOption> {
    prop_oneof![
        6 => Just(StartOption::None),
        1 => Just(StartOption::Persona),
        1 => Just(StartOption::ToolFilter),
        1 => Just(StartOption::OutputSchema),
        2 => (0u64..4).prop_map(StartOption::MaxDepth),
        1 => Just(StartOption::UnknownTool),
        1 => Just(StartOption::Route),
    ]
}

struct ModelMachine;

impl ReferenceStateMachine for ModelMachine {
    type State = Model;
    type Transition = Transition;

    fn init_state() -> BoxedStrategy<Model> {
        Just(Model::new()).boxed()
    }

    fn transitions(state: &Model) -> BoxedStrategy<Transition> {
        let sessions = state.sessions.len();
        let delegating: Vec<usize> = (0..sessions).filter(|id| state.delegating(*id)).collect();
        // Mostly live delegators and adjacent pairs, so most steps get past
        // authorization; the rest probe the refusals.
        let live_delegating: Vec<usize> = delegating
            .iter()
            .copied()
            .filter(|id| state.sessions[*id].live)
            .collect();
        let live_delegator = if live_delegating.is_empty() {
            proptest::sample::select(delegating.clone()).boxed()
        } else {
            proptest::sample::select(live_delegating).boxed()
        };
        let adjacent: Vec<(usize, usize)> = delegating
            .iter()
            .flat_map(|sender| {
                (0..sessions)
                    .filter(|target| {
                        state.sessions[*target].parent == Some(*sender)
                            || state.sessions[*sender].parent == Some(*target)
                    })
                    .map(|target| (*sender, target))
                    .collect::<Vec<_>>()
            })
            .collect();
        let pair = if adjacent.is_empty() {
            (proptest::sample::select(delegating.clone()), 0..sessions).boxed()
        } else {
            proptest::sample::select(adjacent).boxed()
        };
        let children: Vec<usize> = (0..sessions)
            .filter(|id| state.sessions[*id].kind != Kind::Root)
            .collect();
        let session = 0..sessions;
        let roots: Vec<usize> = (0..sessions)
            .filter(|id| state.sessions[*id].kind == Kind::Root)
            .collect();
        let root = proptest::sample::select(roots);
        let delegator = proptest::sample::select(delegating);
        let child = if children.is_empty() {
            Just(0usize).boxed()
        } else {
            proptest::sample::select(children).boxed()
        };
        // Agents the host can wake, with their parent, and their children.
        let agents: Vec<(usize, usize)> = (0..sessions)
            .filter(|id| state.wakeable_agent(*id))
            .filter_map(|id| Some((id, state.sessions[id].parent?)))
            .collect();
        let agent_children: Vec<((usize, usize), usize)> = agents
            .iter()
            .flat_map(|agent| {
                (0..sessions)
                    .filter(|id| state.sessions[*id].parent == Some(agent.0))
                    .map(|id| (*agent, id))
                    .collect::<Vec<_>>()
            })
            .collect();
        let agent = if agents.is_empty() {
            Just((0usize, 0usize)).boxed()
        } else {
            proptest::sample::select(agents).boxed()
        };
        let agent_child = if agent_children.is_empty() {
            (agent.clone(), 0..sessions).boxed()
        } else {
            proptest::sample::select(agent_children).boxed()
        };
        let agent_call = |call: AgentCall| {
            move |(agent, waker): (usize, usize)| Transition::Agent { agent, waker, call }
        };
        prop_oneof![
            8 => (live_delegator.clone(), provider(), start_option()).prop_map(|(parent, provider, option)| {
                Transition::Start { parent, provider, option }
            }),
            1 => (delegator.clone(), provider(), start_option()).prop_map(|(parent, provider, option)| {
                Transition::Start { parent, provider, option }
            }),
            5 => pair.prop_map(|(sender, target)| Transition::Send { sender, target }),
            1 => (delegator.clone(), session.clone()).prop_map(|(sender, target)| Transition::Send { sender, target }),
            2 => (session.clone(), any::<bool>(), delegator.clone()).prop_map(|(target, as_ancestor, holder)| {
                Transition::Interrupt { target, as_ancestor, holder }
            }),
            2 => child.prop_map(|child| Transition::Dispose { child }),
            1 => (delegator.clone(), proptest::collection::vec(session.clone(), 0..3))
                .prop_map(|(parent, children)| Transition::DrainChildren { parent, children }),
            1 => live_delegator.prop_map(|parent| Transition::DrainDescendants { parent }),
            1 => delegator.prop_map(|parent| Transition::Wait { parent }),
            1 => prop_oneof![Just(Provider::Spawn), Just(Provider::Instant)].prop_map(Transition::Register),
            1 => provider().prop_map(Transition::Remove),
            1 => Just(Transition::Restart),
            1 => Just(Transition::Crash),
            2 => root.clone().prop_map(|session| Transition::ReopenRoot { session }),
            1 => root.prop_map(|session| Transition::CloseRoot { session }),
            1 => session.clone().prop_map(|session| Transition::ReopenRoot { session }),
            1 => session.clone().prop_map(|session| Transition::CloseRoot { session }),
            4 => (agent.clone(), provider(), start_option()).prop_map(|((agent, waker), provider, option)| {
                Transition::Agent { agent, waker, call: AgentCall::Start { provider, option } }
            }),
            2 => agent_child.clone().prop_map(|((agent, waker), target)| {
                Transition::Agent { agent, waker, call: AgentCall::Message { target } }
            }),
            1 => agent.clone().prop_map(agent_call(AgentCall::Report)),
            1 => agent_child.prop_map(|((agent, waker), child)| {
                Transition::Agent { agent, waker, call: AgentCall::Close { child } }
            }),
            1 => (agent.clone(), session).prop_map(|((agent, waker), child)| {
                Transition::Agent { agent, waker, call: AgentCall::Close { child } }
            }),
            1 => agent.prop_map(agent_call(AgentCall::Wait)),
        ]
        .boxed()
    }

    fn preconditions(state: &Model, transition: &Transition) -> bool {
        let exists = |id: &usize| *id < state.sessions.len();
        match transition {
            Transition::Start { parent, .. } | Transition::Wait { parent } => {
                state.delegating(*parent)
            }
            Transition::DrainDescendants { parent } => state.delegating(*parent),
            Transition::Send { sender, target } => state.delegating(*sender) && exists(target),
            Transition::Interrupt { target, holder, .. } => {
                exists(target) && state.delegating(*holder)
            }
            Transition::Dispose { child } => {
                exists(child) && state.sessions[*child].kind != Kind::Root
            }
            Transition::DrainChildren { parent, children } => {
                state.delegating(*parent) && children.iter().all(exists)
            }
            Transition::ReopenRoot { session } => exists(session),
            // Closing takes the session's handle: the host has none for an
            // agent's child.
            Transition::CloseRoot { session } => {
                exists(session) && !state.sessions[*session].by_tool
            }
            Transition::Register(_)
            | Transition::Remove(_)
            | Transition::Restart
            | Transition::Crash => true,
            Transition::Agent { agent, waker, call } => {
                state.wakeable_agent(*agent)
                    && state.sessions[*agent].parent == Some(*waker)
                    && match call {
                        AgentCall::Message { target } => exists(target),
                        AgentCall::Close { child } => exists(child),
                        AgentCall::Start { .. } | AgentCall::Report | AgentCall::Wait => true,
                    }
            }
        }
    }

    fn apply(mut state: Model, transition: &Transition) -> Model {
        state.expected = state.step(transition);
        state
    }
}

// ---- the system under test ------------------------------------------------------

fn provider_object(provider: Provider) -> Arc<dyn SubagentProvider> {
    match provider {
        Provider::Spawn => Arc::new(SpawnProvider),
        Provider::Instant => Arc::new(InstantProvider),
        Provider::Missing => unreachable!("never registered"),
    }
}

fn scripted_host() -> ScriptedHost {
    ScriptedHost::new(Script {
        turns: vec![vec![
            Step::Tool {
                name: "read_file".into(),
                input: serde_json::json!({"path": "a"}),
                output: "text".into(),
            },
            Step::Say("done".into()),
        ]],
    })
}

/// A message that makes its agent call one tool: what an `Agent` transition
/// sends to wake the agent.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Instruction {
    call_id: String,
    name: String,
    input: serde_json::Value,
}

/// Agents that play the scripted agent's turn, except a turn woken by an
/// [`Instruction`]: that turn makes the call it names, through the turn's
/// tool port, and says the result.
struct Puppets(ScriptedHost);

struct Puppet(Box<dyn subagent_runtime::Agent>);

impl subagent_runtime::AgentHost for Puppets {
    fn create(
        &self,
        spec: subagent_runtime::AgentSpec,
    ) -> subagent_runtime::BoxFuture<'static, Result<Box<dyn subagent_runtime::Agent>, SubagentError>>
    {
        let scripted = self.0.create(spec);
        Box::pin(async move {
            Ok(Box::new(Puppet(scripted.await?)) as Box<dyn subagent_runtime::Agent>)
        })
    }

    fn tools(&self) -> Vec<subagent_runtime::ToolDefinition> {
        self.0.tools()
    }

    fn execute_tool(
        &self,
        session: SessionId,
        call: subagent_runtime::ToolCall,
        cancel: CancellationToken,
    ) -> subagent_runtime::BoxFuture<'static, subagent_runtime::ToolOutput> {
        self.0.execute_tool(session, call, cancel)
    }
}

impl subagent_runtime::Agent for Puppet {
    fn run_turn(
        &mut self,
        input: subagent_runtime::TurnInput,
    ) -> subagent_runtime::BoxFuture<'_, subagent_runtime::TurnEnd> {
        let instruction = input.messages.iter().find_map(|message| {
            serde_json::from_str::<Instruction>(&subagent_core::content::plain_text(message)).ok()
        });
        let Some(instruction) = instruction else {
            return self.0.run_turn(input);
        };
        Box::pin(async move {
            let output = input
                .tools
                .call(subagent_runtime::ToolCall {
                    call_id: instruction.call_id,
                    name: instruction.name,
                    input: instruction.input,
                })
                .await;
            let said = input
                .transcript
                .send(subagent_runtime::TranscriptItem::Assistant(output.output))
                .await;
            subagent_runtime::TurnEnd {
                stop_reason: if said.is_ok() {
                    subagent_core::SubagentStopReason::Completed
                } else {
                    subagent_core::SubagentStopReason::Aborted
                },
                diagnostic: None,
                structured: None,
            }
        })
    }
}

/// Where the log lives: memory, a RocksDB directory reopened on restart, or
/// a PostgreSQL schema connected again on restart.
trait Backend: 'static {
    fn open(&mut self) -> Arc<dyn EventLog>;

    /// How the runtime runs on it: the log's only writer (`None`), or a
    /// host of a shared log.
    fn shared(&self) -> Option<subagent_runtime::SharedHost> {
        None
    }
}

#[derive(Default)]
struct Memory(Option<MemoryLog>);

impl Backend for Memory {
    fn open(&mut self) -> Arc<dyn EventLog> {
        Arc::new(self.0.get_or_insert_with(MemoryLog::new).clone())
    }
}

struct Rocks(tempfile::TempDir);

impl Default for Rocks {
    fn default() -> Self {
        Rocks(tempfile::tempdir().expect("tempdir"))
    }
}

impl Backend for Rocks {
    fn open(&mut self) -> Arc<dyn EventLog> {
        // The previous handle may still be dropping on a runtime thread.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match RocksLog::open(self.0.path(), RocksOptions::default()) {
                Ok(log) => return Arc::new(log),
                Err(err) if Instant::now() < deadline => {
                    let _ = err;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(err) => panic!("reopening the log: {err}"),
            }
        }
    }
}

/// A schema of its own on the shared PostgreSQL test server, connected
/// again (a new handle: pool, writer, listener) on restart, once the
/// previous handle's writer has stopped: a dropped `PgLog` still commits
/// what it had queued, and that must not land after the next host's
/// recovery (the RocksDB backend gets the same from its directory lock).
struct Postgres {
    schema: String,
    previous_writer: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Default for Postgres {
    fn default() -> Self {
        Postgres {
            schema: subagent_pg::testing::unique_schema("model"),
            previous_writer: None,
        }
    }
}

impl Backend for Postgres {
    fn open(&mut self) -> Arc<dyn EventLog> {
        if let Some(done) = self.previous_writer.take() {
            let deadline = Instant::now() + Duration::from_secs(15);
            // Done, or every sender gone with the log's tasks.
            while !*done.borrow() && done.has_changed().is_ok() {
                assert!(
                    Instant::now() < deadline,
                    "the previous writer did not stop"
                );
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let server = subagent_pg::testing::TestServer::shared().expect("a PostgreSQL test server");
        let log = subagent_pg::PgLog::connect(server.options(&self.schema))
            .expect("connecting to the log");
        self.previous_writer = Some(log.writer_done());
        Arc::new(log)
    }
}

/// [`Postgres`], the runtime opened as a host of a shared log
/// (`open_shared`, the same holder name at every open): its trees held by
/// leases, a crash recovered by the next incarnation taking its own trees
/// back.
#[derive(Default)]
struct SharedPostgres(Postgres);

impl Backend for SharedPostgres {
    fn open(&mut self) -> Arc<dyn EventLog> {
        self.0.open()
    }

    fn shared(&self) -> Option<subagent_runtime::SharedHost> {
        Some(subagent_runtime::SharedHost::new(
            "model-host",
            Duration::from_secs(5),
        ))
    }
}

fn async_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio")
}

struct System<B: Backend> {
    tokio: tokio::runtime::Runtime,
    backend: B,
    runtime: Option<SubagentRuntime>,
    /// Session ids, index-aligned with the model's sessions.
    sessions: Vec<SessionId>,
    /// The activation handle of each child started in this generation.
    activations: HashMap<usize, SubagentActivation>,
    /// Every session's handle: a root's from `open_root`, a child's from its
    /// activation. Kept across restarts, where they go stale.
    handles: HashMap<usize, LiveAgent>,
    /// Registrations, so `Remove` goes through the disposer.
    registrations: HashMap<Provider, subagent_runtime::ProviderRegistration>,
    /// Tool calls made by agents so far (their ids are unique).
    agent_calls: u64,
}

impl<B: Backend + Default> System<B> {
    fn new() -> Self {
        let mut system = System {
            tokio: async_runtime(),
            backend: B::default(),
            runtime: None,
            sessions: Vec::new(),
            activations: HashMap::new(),
            handles: HashMap::new(),
            registrations: HashMap::new(),
            agent_calls: 0,
        };
        system.open();
        system
    }

    /// The head of the log the crashed host left.
    fn backend_head(&mut self) -> u64 {
        self.backend.open().head()
    }

    /// What the recovery markers after `head` counted (a reopen with
    /// nothing to settle writes none; a shared host writes one per tree it
    /// takes back).
    fn recovered_since(&self, head: u64) -> Outcome {
        let (mut abandoned, mut failed) = (0, 0);
        for record in self.runtime().log().read_all(head + 1) {
            if let Event::HostRecovered {
                abandoned_activations,
                failed_runs,
                ..
            } = record.expect("decodes").event
            {
                abandoned += abandoned_activations;
                failed += failed_runs;
            }
        }
        Outcome::Recovered { abandoned, failed }
    }

    fn runtime(&self) -> &SubagentRuntime {
        self.runtime.as_ref().expect("open")
    }

    /// Opens the runtime over the backend and a new root.
    fn open(&mut self) {
        let log = self.backend.open();
        let shared = self.backend.shared();
        let runtime = self.tokio.block_on(async {
            let (runtime, _) = match shared {
                None => SubagentRuntime::open(log, Arc::new(Puppets(scripted_host()))).await,
                Some(shared) => {
                    SubagentRuntime::open_shared(
                        log,
                        Arc::new(Puppets(scripted_host())),
                        subagent_runtime::CapacityLimits::default(),
                        shared,
                    )
                    .await
                }
            }
            .expect("the runtime opens");
            runtime
        });
        runtime
            .set_persona_variables([("user".to_owned(), "Ada".to_owned())].into())
            .expect("an open runtime takes settings");
        let root = self
            .tokio
            .block_on(runtime.open_root("root"))
            .expect("root");
        for provider in HOST_PROVIDERS {
            let registration = self
                .tokio
                .block_on(runtime.register_provider(provider_object(provider)))
                .expect("the host's providers register");
            self.registrations.insert(provider, registration);
        }
        self.sessions.push(root.session());
        self.handles.insert(self.sessions.len() - 1, root);
        self.runtime = Some(runtime);
    }

    fn handle(&self, index: usize) -> LiveAgent {
        self.handles[&index].clone()
    }

    fn spec(provider: Provider, option: StartOption) -> SubagentActivationSpec {
        let mut spec = SubagentActivationSpec::with_text_prompt(
            provider.name(),
            "task",
            "go",
            Delivery::Parent,
        );
        let options = &mut spec.request.options;
        match option {
            StartOption::None => {}
            StartOption::Persona => options.persona = Some("Serve {{user}}".into()),
            StartOption::ToolFilter => {
                options.tool_filter = Some(ToolRestriction::Deny(vec!["read_file".into()]));
            }
            StartOption::OutputSchema => {
                options.output_schema = Some(serde_json::json!({"type": "object"}));
            }
            StartOption::MaxDepth(cap) => options.max_depth = Some(cap),
            StartOption::UnknownTool => {
                options.tool_filter = Some(ToolRestriction::Allow(vec!["teleport".into()]));
            }
            StartOption::Route => {
                options.agent_options = Some(subagent_core::AgentOptions {
                    model: Some("bigger".into()),
                    ..subagent_core::AgentOptions::default()
                });
            }
        }
        spec
    }

    /// The input of `subagent` for a start like [`Self::spec`]'s.
    fn start_input(provider: Provider, option: StartOption) -> serde_json::Value {
        let mut input =
            serde_json::json!({"provider": provider.name(), "label": "task", "prompt": "go"});
        let (field, value) = match option {
            StartOption::None => return input,
            StartOption::Persona => ("persona", serde_json::json!("Serve {{user}}")),
            StartOption::ToolFilter => ("toolFilter", serde_json::json!({"deny": ["read_file"]})),
            StartOption::OutputSchema => ("outputSchema", serde_json::json!({"type": "object"})),
            StartOption::MaxDepth(cap) => ("maxDepth", serde_json::json!(cap)),
            StartOption::UnknownTool => ("toolFilter", serde_json::json!({"allow": ["teleport"]})),
            StartOption::Route => ("agentOptions", serde_json::json!({"model": "bigger"})),
        };
        input[field] = value;
        input
    }

    /// `waker` messages `agent` an [`Instruction`] to make `call`; the
    /// call's answer, once its turn records it.
    fn agent_call(&mut self, agent: usize, waker: usize, call: AgentCall) -> Outcome {
        self.agent_calls += 1;
        let call_id = format!("model-{}", self.agent_calls);
        let (name, input) = match call {
            AgentCall::Start { provider, option } => {
                ("subagent", Self::start_input(provider, option))
            }
            AgentCall::Message { target } => (
                "send_message",
                serde_json::json!({"to": self.sessions[target], "text": "note"}),
            ),
            AgentCall::Report => (
                "send_message",
                serde_json::json!({"to": "parent", "text": "report"}),
            ),
            AgentCall::Close { child } => (
                "subagent_control",
                serde_json::json!({"action": "close", "child": self.sessions[child]}),
            ),
            AgentCall::Wait => (
                "subagent_control",
                serde_json::json!({"action": "wait", "timeoutSeconds": 10}),
            ),
        };
        let instruction = Instruction {
            call_id: call_id.clone(),
            name: name.into(),
            input,
        };
        let runtime = self.runtime().clone();
        let woken = self.tokio.block_on(runtime.send_message(
            &self.handle(waker),
            self.sessions[agent],
            vec![ContentBlock::text(
                serde_json::to_string(&instruction).expect("an instruction serializes"),
            )],
            CancellationToken::new(),
        ));
        if let Err(err) = woken {
            return Outcome::Err(err.code());
        }
        let stream = subagent_core::StreamId::Session(self.sessions[agent]);
        let deadline = Instant::now() + Duration::from_secs(20);
        let (output, is_error) = loop {
            let answer = runtime.log().read_stream(stream, 1).find_map(|record| {
                match record.expect("the log reads back").event {
                    Event::ToolReturned {
                        call_id: returned,
                        output,
                        is_error,
                        ..
                    } if returned == call_id => Some((output, is_error)),
                    _ => None,
                }
            });
            if let Some(answer) = answer {
                break answer;
            }
            assert!(Instant::now() < deadline, "{call_id} was never answered");
            std::thread::sleep(Duration::from_millis(1));
        };
        let text = subagent_core::content::plain_text(&output);
        if is_error {
            let code = text.split(':').next().unwrap_or_default();
            return Outcome::Err(
                ErrorCode::parse(code).unwrap_or_else(|| panic!("{call_id} failed: {text}")),
            );
        }
        if let AgentCall::Start { .. } = call {
            let answer: serde_json::Value =
                serde_json::from_str(&text).expect("subagent answers JSON");
            let child: SessionId = answer["childId"]
                .as_str()
                .and_then(|id| id.parse().ok())
                .expect("subagent answers the child's id");
            // An agent's child: the host holds no handle to it.
            self.sessions.push(child);
        }
        Outcome::Ok
    }

    fn run(&mut self, transition: &Transition) -> Outcome {
        let unit = |result: Result<(), SubagentError>| match result {
            Ok(()) => Outcome::Ok,
            Err(err) => Outcome::Err(err.code()),
        };
        let runtime = self.runtime().clone();
        match transition {
            Transition::Start {
                parent,
                provider,
                option,
            } => {
                let started = self.tokio.block_on(runtime.start_activation(
                    &self.handle(*parent),
                    Self::spec(*provider, *option),
                    CancellationToken::new(),
                ));
                match started {
                    Ok(activation) => {
                        self.sessions.push(activation.child_id());
                        let index = self.sessions.len() - 1;
                        self.handles.insert(index, activation.agent());
                        self.activations.insert(index, activation);
                        Outcome::Ok
                    }
                    Err(err) => Outcome::Err(err.code()),
                }
            }
            Transition::Send { sender, target } => unit(
                self.tokio
                    .block_on(runtime.send_message(
                        &self.handle(*sender),
                        self.sessions[*target],
                        vec![ContentBlock::text("note")],
                        CancellationToken::new(),
                    ))
                    .map(|_| ()),
            ),
            Transition::Interrupt {
                target,
                as_ancestor,
                holder,
            } => {
                let holder_handle = self.handle(*holder);
                let authority = if *as_ancestor {
                    InterruptAuthority::Ancestor(&holder_handle)
                } else {
                    InterruptAuthority::User {
                        parent_session_id: self.sessions[*holder],
                    }
                };
                unit(
                    self.tokio
                        .block_on(runtime.interrupt(self.sessions[*target], authority)),
                )
            }
            Transition::Dispose { child } => match self.activations.get(child) {
                Some(activation) => unit(self.tokio.block_on(activation.dispose())),
                // Started before a restart: no handle, nothing to dispose.
                None => Outcome::Ok,
            },
            Transition::DrainChildren { parent, children } => {
                let ids: Vec<SessionId> = children.iter().map(|id| self.sessions[*id]).collect();
                unit(
                    self.tokio
                        .block_on(runtime.drain_children(&self.handle(*parent), &ids)),
                )
            }
            Transition::DrainDescendants { parent } => unit(
                self.tokio
                    .block_on(runtime.drain_descendants(&[self.handle(*parent)])),
            ),
            Transition::Wait { parent } => {
                match self
                    .tokio
                    .block_on(runtime.wait_for_children(&self.handle(*parent)))
                {
                    Ok(observed) => Outcome::Observed(observed),
                    Err(err) => Outcome::Err(err.code()),
                }
            }
            Transition::Register(provider) => {
                match self
                    .tokio
                    .block_on(runtime.register_provider(provider_object(*provider)))
                {
                    Ok(registration) => {
                        self.registrations.insert(*provider, registration);
                        Outcome::Ok
                    }
                    Err(err) => Outcome::Err(err.code()),
                }
            }
            Transition::Remove(provider) => match self.registrations.remove(provider) {
                Some(registration) => unit(self.tokio.block_on(registration.remove())),
                None => unit(
                    self.tokio
                        .block_on(runtime.remove_provider(provider.name())),
                ),
            },
            Transition::Restart => {
                self.tokio.block_on(runtime.close()).expect("a clean close");
                // Nothing works after close, and nothing more is recorded.
                let head = runtime.log().head();
                let closed = |outcome: Result<(), SubagentError>| {
                    assert_eq!(outcome.map_err(|e| e.code()), Err(ErrorCode::Closed));
                };
                closed(self.tokio.block_on(runtime.open_root("late")).map(|_| ()));
                closed(
                    self.tokio
                        .block_on(runtime.register_provider(provider_object(Provider::Spawn)))
                        .map(|_| ()),
                );
                closed(
                    self.tokio
                        .block_on(runtime.start_activation(
                            &self.handle(0),
                            Self::spec(Provider::Spawn, StartOption::None),
                            CancellationToken::new(),
                        ))
                        .map(|_| ()),
                );
                assert_eq!(runtime.log().head(), head, "recorded after close");
                self.activations.clear();
                self.registrations.clear();
                self.runtime = None;
                drop(runtime);
                self.open();
                Outcome::Ok
            }
            Transition::Crash => {
                self.activations.clear();
                self.registrations.clear();
                self.runtime = None;
                drop(runtime);
                // Dropping the async runtime drops every driver task mid-air.
                std::mem::replace(&mut self.tokio, async_runtime())
                    .shutdown_timeout(Duration::from_secs(10));
                let head = self.backend_head();
                self.open();
                self.recovered_since(head)
            }
            Transition::ReopenRoot { session } => {
                match self
                    .tokio
                    .block_on(runtime.reopen_root(self.sessions[*session]))
                {
                    Ok(root) => {
                        assert_eq!(root.session(), self.sessions[*session]);
                        self.handles.insert(*session, root);
                        Outcome::Ok
                    }
                    Err(err) => Outcome::Err(err.code()),
                }
            }
            Transition::CloseRoot { session } => unit(
                self.tokio
                    .block_on(runtime.close_root(&self.handle(*session))),
            ),
            Transition::Agent { agent, waker, call } => self.agent_call(*agent, *waker, *call),
        }
    }

    /// Waits until every live activation has settled its first turn and is
    /// idle with an empty inbox, and every live run has settled.
    fn quiesce(&self) -> Projections {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let state = self.runtime().projections();
            let activations_idle = state.live_activations().iter().all(|(session, live)| {
                live.phase == subagent_projections::ActivationPhase::Published
                    && live.settled
                    && state
                        .activations
                        .get(session)
                        .is_some_and(|a| a.running_turn.is_none())
                    && state.pending_messages(*session).is_empty()
            });
            let runs_settled = state.runs.values().all(|run| {
                run.phase != subagent_projections::RunPhase::Requested
                    && run.phase != subagent_projections::RunPhase::Started
            });
            if activations_idle && runs_settled {
                return state;
            }
            assert!(Instant::now() < deadline, "the runtime never quiesced");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn check(&self, model: &Model) {
        let state = self.quiesce();
        let id_of: HashMap<SessionId, usize> = self
            .sessions
            .iter()
            .enumerate()
            .map(|(index, id)| (*id, index))
            .collect();
        // Liveness.
        let mut live: HashSet<usize> = state
            .live_activations()
            .iter()
            .map(|(session, _)| id_of[session])
            .collect();
        live.extend(
            state
                .runs
                .iter()
                .filter(|(_, run)| run.is_live())
                .map(|(session, _)| id_of[session]),
        );
        let expected: HashSet<usize> = (0..model.sessions.len())
            .filter(|id| model.sessions[*id].live && model.sessions[*id].kind != Kind::Root)
            .collect();
        assert_eq!(live, expected, "live activations and runs");
        // Catalogs, in start order.
        for (index, session) in self.sessions.iter().enumerate() {
            let listed: Vec<usize> = self
                .tokio
                .block_on(self.runtime().list_children(*session))
                .expect("the catalog lists")
                .iter()
                .map(|listed| id_of[&listed.entry.child_id])
                .collect();
            let modeled: Vec<usize> = (0..model.sessions.len())
                .filter(|id| model.sessions[*id].parent == Some(index))
                .collect();
            assert_eq!(listed, modeled, "catalog of session {index}");
        }
        // Incremental projections equal a fold of the whole log.
        let records: Vec<_> = self
            .runtime()
            .log()
            .read_all(1)
            .map(|record| record.expect("the log reads back"))
            .collect();
        // The whole history is one `decide` could have produced, and the
        // projections folded through that check agree with a fold written
        // apart from `Projections::apply` (a `Projections::fold` would only
        // run the check's own loop of `apply` again).
        let rebuilt = HistoryCheck::history(&records)
            .unwrap_or_else(|violation| panic!("an impossible history: {violation}"));
        ReferenceFold::fold(&records).assert_agrees(&rebuilt, "checked vs. the reference");
        assert_eq!(
            rebuilt,
            self.runtime().projections(),
            "incremental == rebuilt"
        );
        // Inbox accounting and depth caps.
        for (session, inbox) in &rebuilt.inboxes {
            assert_eq!(
                inbox.accepted as usize,
                inbox.pending.len() + inbox.claimed.len() + inbox.dropped.len(),
                "{session}: a message was lost or duplicated"
            );
        }
        let mut claimed = HashSet::new();
        for record in &records {
            if let Event::MessagesClaimed { ids, .. } = &record.event {
                assert!(ids.iter().all(|id| claimed.insert(*id)), "claimed twice");
            }
        }
        for record in rebuilt.sessions.values() {
            if let Some(cap) = record.descriptor.as_ref().and_then(|d| d.max_depth) {
                assert!(record.depth <= cap, "a child deeper than its cap");
            }
        }
        assert_log_invariants(&records, &rebuilt);
        assert_calls_answered_around_their_children(&records, &rebuilt);
        // Invariant 9: the descendant listing is a pre-order with consistent
        // parents and depths.
        for root in &rebuilt.roots {
            let listing = self
                .tokio
                .block_on(self.runtime().list_descendants(*root))
                .expect("the tree lists");
            let mut seen: HashMap<SessionId, u64> = HashMap::from([(*root, 0)]);
            for entry in &listing {
                let parent_depth = seen
                    .get(&entry.parent_id)
                    .copied()
                    .expect("a parent is listed before its children");
                assert_eq!(entry.depth, parent_depth + 1, "descendant depth");
                seen.insert(entry.entry.entry.child_id, entry.depth);
            }
        }
    }
}

/// Tool calls, read off the log at quiescence (no turn runs):
/// - every call has its result (answered, refused or marked abandoned by
///   the turn's end or a recovery), never left hanging;
/// - every child an agent's call started sits, in its parent's stream,
///   after that call and before its result.
fn assert_calls_answered_around_their_children(
    records: &[subagent_core::RecordedEvent],
    state: &Projections,
) {
    // (session, turn, call id) -> positions of the call and of its result.
    let mut calls: HashMap<(SessionId, u64, String), (u64, Option<u64>)> = HashMap::new();
    let mut cataloged: HashMap<SessionId, u64> = HashMap::new();
    for record in records {
        let subagent_core::StreamId::Session(session) = record.stream else {
            continue;
        };
        match &record.event {
            Event::ToolCalled { turn, call_id, .. } => {
                calls.insert((session, *turn, call_id.clone()), (record.position, None));
            }
            Event::ToolReturned { turn, call_id, .. } => {
                let call = calls
                    .get_mut(&(session, *turn, call_id.clone()))
                    .unwrap_or_else(|| panic!("{session}: a result of no call {call_id}"));
                call.1.get_or_insert(record.position);
            }
            Event::ChildCataloged { child, .. } => {
                cataloged.insert(*child, record.position);
            }
            _ => {}
        }
    }
    for ((session, turn, call_id), (_, returned)) in &calls {
        assert!(
            returned.is_some(),
            "{session}: call {call_id} of turn {turn} left hanging"
        );
    }
    for record in state.sessions.values() {
        let (Some(call), Some(parent)) = (&record.requested_by, record.parent) else {
            continue;
        };
        let (called, returned) = calls[&(parent, call.turn, call.call_id.clone())];
        let at = cataloged[&record.id];
        assert!(
            called < at && returned.is_some_and(|returned| at < returned),
            "{}: not between the call {} that started it and its result",
            record.id,
            call.call_id
        );
    }
}

/// DESIGN invariants read off the log itself, position by position:
/// 1. a child has at most one live activation at any position;
/// 6. a disposal releases a session only after every child below it was
///    released or disposed (child-first);
/// 7. a result is settled at most once per activation epoch and per run.
fn assert_log_invariants(records: &[subagent_core::RecordedEvent], state: &Projections) {
    let mut live: HashMap<SessionId, u64> = HashMap::new();
    let mut running_runs: HashSet<SessionId> = HashSet::new();
    let mut settled: HashSet<(SessionId, u64)> = HashSet::new();
    let mut settled_runs: HashSet<SessionId> = HashSet::new();
    for record in records {
        let subagent_core::StreamId::Session(session) = record.stream else {
            continue;
        };
        match &record.event {
            Event::ActivationRequested { epoch, .. } => {
                assert!(
                    live.insert(session, *epoch).is_none(),
                    "invariant 1: {session} has two live activations at {}",
                    record.position
                );
            }
            Event::ActivationReleased { .. } => {
                let children_live = state.sessions.values().any(|child| {
                    child.parent == Some(session)
                        && (live.contains_key(&child.id) || running_runs.contains(&child.id))
                });
                assert!(
                    !children_live,
                    "invariant 6: {session} released before its children at {}",
                    record.position
                );
                live.remove(&session);
            }
            Event::ActivationAbandoned { .. } => {
                live.remove(&session);
            }
            Event::ActivationSettled { epoch, .. } => {
                assert!(
                    settled.insert((session, *epoch)),
                    "invariant 7: {session} epoch {epoch} settled twice"
                );
            }
            Event::RunRequested { .. } => {
                running_runs.insert(session);
            }
            Event::RunSettled { .. } => {
                assert!(
                    settled_runs.insert(session),
                    "invariant 7: run {session} settled twice"
                );
            }
            Event::RunDisposed { .. } | Event::RunStartFailed { .. } => {
                running_runs.remove(&session);
            }
            _ => {}
        }
    }
}

impl<B: Backend> Drop for System<B> {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            let _ = self.tokio.block_on(runtime.close());
        }
        self.activations.clear();
    }
}

struct RuntimeTest<B>(std::marker::PhantomData<B>);

impl<B: Backend + Default> StateMachineTest for RuntimeTest<B> {
    type SystemUnderTest = System<B>;
    type Reference = ModelMachine;

    fn init_test(_model: &Model) -> System<B> {
        System::new()
    }

    fn apply(mut system: System<B>, model: &Model, transition: Transition) -> System<B> {
        let answered = system.run(&transition);
        if std::env::var_os("MODEL_TRACE").is_some() {
            eprintln!("{transition:?} -> {answered:?}");
        }
        assert_eq!(answered, model.expected, "{transition:?}");
        system
    }

    fn check_invariants(system: &System<B>, model: &Model) {
        system.check(model);
    }
}

/// `default` cases, or `SUBAGENTS_MODEL_CASES` when set (longer runs).
fn cases(default: u32) -> u32 {
    std::env::var("SUBAGENTS_MODEL_CASES")
        .ok()
        .and_then(|cases| cases.parse().ok())
        .unwrap_or(default)
}

type OverMemory = RuntimeTest<Memory>;
type OverRocks = RuntimeTest<Rocks>;
type OverPostgres = RuntimeTest<Postgres>;
type AsSharedHost = RuntimeTest<SharedPostgres>;

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(256),
        max_shrink_iters: 2048,
        .. ProptestConfig::default()
    })]

    #[test]
    fn the_runtime_over_memory_answers_like_the_model(sequential 1..50 => OverMemory);
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(256) / 5,
        max_shrink_iters: 512,
        .. ProptestConfig::default()
    })]

    #[test]
    fn the_runtime_over_rocksdb_answers_like_the_model(sequential 1..40 => OverRocks);
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: (cases(256) / 8).max(1),
        max_shrink_iters: 256,
        .. ProptestConfig::default()
    })]

    #[test]
    fn the_runtime_over_postgres_answers_like_the_model(sequential 1..30 => OverPostgres);
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: (cases(256) / 8).max(1),
        max_shrink_iters: 256,
        .. ProptestConfig::default()
    })]

    #[test]
    fn the_runtime_as_a_shared_host_on_postgres_answers_like_the_model(sequential 1..30 => AsSharedHost);
}
