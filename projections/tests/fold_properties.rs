//! Incremental projections equal rebuilt ones at every position, also when
//! the fold resumes from an encoded-and-decoded checkpoint (DESIGN invariant 10).

use proptest::prelude::*;
use subagent_projections::testing::{history, steps};
use subagent_projections::{checkpoint, Projections};

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn incremental_equals_rebuilt_at_every_position_across_checkpoints(
        steps in steps(60),
        checkpoint_every in 1usize..20,
    ) {
        let records = history(&steps);
        let mut incremental = Projections::new();
        let mut resumed = Projections::new();
        for (index, record) in records.iter().enumerate() {
            incremental.apply(record);
            resumed.apply(record);
            if index % checkpoint_every == 0 {
                resumed = checkpoint::decode(&checkpoint::encode(&resumed)).expect("own checkpoint decodes");
            }
            let rebuilt = Projections::fold(&records[..=index]);
            prop_assert_eq!(&incremental, &rebuilt, "incremental at position {}", record.position);
            prop_assert_eq!(&resumed, &rebuilt, "resumed from checkpoint at position {}", record.position);
        }
        // Invariant 1: never more than one live activation per child, and
        // invariant 9: descendants are consistent with the tree.
        let root = records[0].stream.session().expect("root stream");
        for entry in incremental.list_descendants(root) {
            let record = &incremental.sessions[&entry.entry.entry.child_id];
            prop_assert_eq!(record.parent, Some(entry.parent_id));
            prop_assert_eq!(record.depth, entry.depth);
        }
    }
}
