//! The engine's periodic checkpoints, through its own commits: when they
//! are taken ([`subagent_projections::CheckpointCadence`]).

use std::sync::Arc;

use subagent_core::SessionId;
use subagent_projections::{Command, MapSizes};
use subagent_store::MemoryLog;

use super::Engine;

/// Through an engine's own commits: every checkpoint taken comes at
/// the first commit that brings the events since the last one to at
/// least its entries (and the minimum), so the gaps grow with the
/// state. A fixed cadence of 2 would have taken one nearly every
/// commit.
#[tokio::test]
async fn an_engine_checkpoints_as_often_as_its_state_is_large() {
    const MINIMUM: u64 = 2;
    let (engine, _) = Engine::open(Arc::new(MemoryLog::new()), MINIMUM).unwrap();
    // (position, entries of the state it holds, events of the commit that took it)
    let mut taken = vec![(0, 0, 0)];
    let commits = 64;
    for n in 0..commits {
        let events = engine
            .commit(Command::OpenRoot {
                session: SessionId::new(),
                label: format!("root {n}"),
                agent_options: None,
                claim: None,
            })
            .await
            .unwrap();
        // Held by the background save from the snapshot to the write.
        drop(engine.checkpointing.lock().await);
        let position = engine.checkpoint_position();
        if position != taken.last().unwrap().0 {
            assert_eq!(position, events.last().unwrap().position);
            let entries = MapSizes::of(&engine.pipeline().state).entries();
            taken.push((position, entries, events.len() as u64));
        }
    }
    assert!(taken.len() > 3, "{taken:?}");
    assert!(taken.len() < commits / 4, "{taken:?}");
    for pair in taken.windows(2) {
        let [(before, entries, _), (at, _, last_commit)] = pair else {
            unreachable!()
        };
        let threshold = MINIMUM.max(*entries);
        assert!(at - before >= threshold, "{pair:?}");
        assert!(
            at - before - last_commit < threshold,
            "not at the first commit: {pair:?}"
        );
    }
}
