//! Several hosts on a shared log: each host's registry in its own stream,
//! a tree decided only by the host holding it, a takeover that records the
//! claim and settles the tree's live work, and the fences appends present.

use subagent_core::{
    AbandonReason, Delivery, ErrorCode, Event, HostId, SessionId, StreamId, SubagentError,
};
use subagent_projections::machine::{decide_as, tree_fences, Command};
use subagent_projections::{HistoryCheck, TreeClaim};

use crate::world::{prepared, send, start, types, World};

fn claim(host: HostId, holder: &str, fence: u64) -> TreeClaim {
    TreeClaim {
        host,
        holder: holder.into(),
        fence,
    }
}

fn spawn_registration() -> Event {
    Event::ProviderRegistered {
        name: "spawn".into(),
        capabilities: subagent_core::SubagentCapabilities::default(),
        inherits_parent_context: false,
        route_defaults: None,
        continuable: true,
        one_shot: false,
    }
}

/// An empty world with hosts `a` and `b`, each registering `spawn` in its
/// own stream, and a root held by `a` with a published child.
struct Shared {
    world: World,
    a: HostId,
    b: HostId,
    root: SessionId,
    child: SessionId,
}

fn shared() -> Shared {
    let mut world = World {
        history: subagent_projections::testing::HistoryBuilder::new(),
        state: subagent_projections::Projections::new(),
    };
    let (a, b) = (HostId::new(), HostId::new());
    for host in [a, b] {
        let recorded = world.run_as(
            host,
            Command::RegisterProvider {
                registration: spawn_registration(),
            },
        );
        assert_eq!(recorded[0].0, StreamId::Host(host));
    }
    let root = SessionId::new();
    let opened = world.run_as(
        a,
        Command::OpenRoot {
            session: root,
            label: "root".into(),
            agent_options: None,
            claim: Some(claim(a, "host-a", 1)),
        },
    );
    assert_eq!(types(&opened), ["SessionCreated", "TreeAcquired"]);
    let started = start(root, "spawn", Delivery::Caller);
    let child = started.child;
    world.run_as(a, Command::StartChild(started));
    world.run_as(a, prepared(child, subagent_core::MessageId::new()));
    Shared {
        world,
        a,
        b,
        root,
        child,
    }
}

#[test]
fn each_host_registers_in_its_own_stream_and_resolves_starts_in_its_own_registry() {
    let Shared {
        world, a, b, root, ..
    } = shared();
    let state = world.state();
    assert_eq!(state.registry(Some(a)).len(), 1);
    assert_eq!(state.registry(Some(b)).len(), 1);
    assert!(
        state.providers.is_empty(),
        "the runtime stream is untouched"
    );
    assert_eq!(state.owner_of(root).map(|owner| owner.host), Some(a));
    // A name is taken per host, not across hosts.
    let twice = world.refuse_as(
        Some(a),
        Command::RegisterProvider {
            registration: spawn_registration(),
        },
    );
    assert_eq!(twice.code(), ErrorCode::DuplicateProvider);
    assert!(HistoryCheck::history(world.history()).is_ok());
}

#[test]
fn a_tree_is_decided_only_by_the_host_holding_it() {
    let Shared {
        world,
        b,
        root,
        child,
        ..
    } = shared();
    for command in [
        send(root, child),
        Command::StartChild(start(root, "spawn", Delivery::Caller)),
        // Recorded in the host's own stream, but about the tree.
        Command::CloseAdmission { parent: child },
    ] {
        let refusal = world.refuse_as(Some(b), command);
        assert_eq!(
            refusal,
            SubagentError::TreeElsewhere {
                root,
                holder: Some("host-a".into())
            }
        );
    }
    // A single-writer runtime may not touch a tree a host holds either.
    let single = world.refuse_as(None, send(root, child));
    assert_eq!(single.code(), ErrorCode::TreeElsewhere);
}

#[test]
fn a_takeover_records_the_claim_and_settles_the_trees_live_work_in_one_decision() {
    let Shared {
        mut world,
        a,
        b,
        root,
        child,
    } = shared();
    // The fence must exceed the holder's.
    let stale = world.refuse_as(
        Some(b),
        Command::TakeTree {
            root,
            claim: claim(b, "host-b", 1),
        },
    );
    assert_eq!(stale.code(), ErrorCode::BadRequest);
    // A claim is the acting host's own.
    let forged = world.refuse_as(
        Some(b),
        Command::TakeTree {
            root,
            claim: claim(a, "host-a", 2),
        },
    );
    assert_eq!(forged.code(), ErrorCode::BadRequest);
    let taken = world.run_as(
        b,
        Command::TakeTree {
            root,
            claim: claim(b, "host-b", 2),
        },
    );
    assert_eq!(
        taken[0],
        (
            StreamId::Session(root),
            Event::TreeAcquired {
                host: b,
                holder: "host-b".into(),
                fence: 2
            }
        )
    );
    assert!(taken
        .iter()
        .any(|(stream, event)| *stream == StreamId::Session(child)
            && matches!(
                event,
                Event::ActivationAbandoned {
                    reason: AbandonReason::HostRestart,
                    ..
                }
            )));
    let marker = taken.last().unwrap();
    assert_eq!(marker.0, StreamId::Host(b));
    assert!(matches!(
        marker.1,
        Event::HostRecovered {
            abandoned_activations: 1,
            failed_runs: 0,
            ..
        }
    ));
    assert!(world.state().live_activations().is_empty());
    // The old holder is out, the new one decides with its own registry.
    assert_eq!(
        world.refuse_as(Some(a), send(root, child)).code(),
        ErrorCode::TreeElsewhere
    );
    world.run_as(
        b,
        Command::StartChild(start(root, "spawn", Delivery::Caller)),
    );
    assert!(HistoryCheck::history(world.history()).is_ok());
}

#[test]
fn fences_name_each_tree_of_a_decision_once_with_its_holders_token() {
    let Shared {
        world,
        a,
        root,
        child,
        ..
    } = shared();
    let decision = decide_as(world.state(), Some(a), send(root, child)).unwrap();
    assert_eq!(tree_fences(world.state(), &decision), [(root, 1)]);
    // A new root presents its own claim's fence.
    let fresh = SessionId::new();
    let opening = decide_as(
        world.state(),
        Some(a),
        Command::OpenRoot {
            session: fresh,
            label: "r".into(),
            agent_options: None,
            claim: Some(claim(a, "host-a", 7)),
        },
    )
    .unwrap();
    assert_eq!(tree_fences(world.state(), &opening), [(fresh, 7)]);
}

#[test]
fn shared_hosts_open_roots_with_their_own_claim_and_recover_only_by_taking_trees() {
    let Shared { world, a, b, .. } = shared();
    let open = |claim| Command::OpenRoot {
        session: SessionId::new(),
        label: "r".into(),
        agent_options: None,
        claim,
    };
    for (acting, claimed) in [
        (Some(a), None),
        (Some(a), Some(claim(b, "host-b", 1))),
        (None, Some(claim(a, "host-a", 1))),
    ] {
        assert_eq!(
            world.refuse_as(acting, open(claimed)).code(),
            ErrorCode::BadRequest
        );
    }
    assert_eq!(
        world.refuse_as(Some(a), Command::Recover).code(),
        ErrorCode::BadRequest
    );
}

#[test]
fn a_single_writer_recovery_leaves_the_trees_hosts_hold_alone() {
    let Shared { mut world, .. } = shared();
    let unowned = world.root();
    world.register_capable("local");
    let child = world.start(unowned, "local", Delivery::Caller);
    world.run(prepared(child, subagent_core::MessageId::new()));
    let recovered = world.run(Command::Recover);
    let abandoned: Vec<StreamId> = recovered
        .iter()
        .filter(|(_, event)| matches!(event, Event::ActivationAbandoned { .. }))
        .map(|(stream, _)| *stream)
        .collect();
    assert_eq!(abandoned, [StreamId::Session(child)]);
    assert_eq!(world.state().live_activations().len(), 1);
}

#[test]
fn a_history_whose_take_does_not_raise_the_fence_is_impossible() {
    let Shared {
        mut world, b, root, ..
    } = shared();
    world.push_raw(
        StreamId::Session(root),
        Event::TreeAcquired {
            host: b,
            holder: "host-b".into(),
            fence: 1,
        },
    );
    let violation = HistoryCheck::history(world.history()).unwrap_err();
    assert_eq!(violation.event_type, "TreeAcquired");
    assert!(violation.reason.contains("must exceed"), "{violation}");
}
