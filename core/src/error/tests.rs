//! Unit tests of `error`, beside it so the module stays short.

use super::*;
use std::collections::HashSet;

#[test]
fn every_code_is_unique_and_matches_its_serde_name() {
    let mut seen = HashSet::new();
    for code in ErrorCode::ALL {
        assert!(seen.insert(code.as_str()), "duplicate code {code}");
        let json = serde_json::to_value(code).unwrap();
        assert_eq!(json, serde_json::Value::String(code.as_str().to_owned()));
    }
}

#[test]
fn errors_map_to_their_codes() {
    assert_eq!(
        SubagentError::Unauthorized("stale".into()).code().as_str(),
        "subagent/unauthorized"
    );
    assert_eq!(
        SubagentError::Cancelled.code().as_str(),
        "gateway/cancelled"
    );
    let unsupported = SubagentError::CapabilityUnsupported {
        provider: "acp".into(),
        capability: "outputSchema",
    };
    assert_eq!(unsupported.code(), ErrorCode::CapabilityUnsupported);
    assert!(unsupported.to_string().contains("outputSchema"));
}

#[test]
fn an_aggregate_names_its_first_causes_with_their_codes_then_counts_the_rest() {
    let disk_full = || SubagentError::internal("storage failure: No space left on device");
    let one = SubagentError::Aggregate(Causes(vec![disk_full()]));
    assert_eq!(
        one.to_string(),
        "1 branch failed: [gateway/internal] internal error: storage failure: \
         No space left on device"
    );
    let three = SubagentError::Aggregate(Causes(vec![
        disk_full(),
        SubagentError::Unauthorized("no live agent x".into()),
        SubagentError::Closed,
    ]));
    assert_eq!(
        three.to_string(),
        "3 branches failed: [gateway/internal] internal error: storage failure: \
         No space left on device; [subagent/unauthorized] unauthorized: no live agent x; \
         [subagent/closed] the runtime is closed"
    );
    let many = SubagentError::Aggregate(Causes((0..7).map(|_| disk_full()).collect()));
    let text = many.to_string();
    assert!(
        text.starts_with("7 branches failed: [gateway/internal]"),
        "{text}"
    );
    assert_eq!(text.matches("No space left on device").count(), 3, "{text}");
    assert!(text.ends_with("; and 4 more"), "{text}");
}

#[test]
fn a_nested_aggregate_stays_bounded() {
    let leaf = || SubagentError::internal("x".repeat(100));
    let inner = || SubagentError::Aggregate(Causes((0..50).map(|_| leaf()).collect()));
    let outer = SubagentError::Aggregate(Causes((0..50).map(|_| inner()).collect()));
    let text = outer.to_string();
    // 3 inner aggregates of 3 leaves each, never 2,500.
    assert_eq!(text.matches(&"x".repeat(100)).count(), 9);
    assert!(text.len() < 2_000, "{} bytes", text.len());
    assert!(text.contains("and 47 more"));
}

#[test]
fn an_internal_error_keeps_its_source_chain() {
    #[derive(Debug)]
    struct Outer(std::io::Error);
    impl std::fmt::Display for Outer {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("writing the batch")
        }
    }
    impl std::error::Error for Outer {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.0)
        }
    }
    let error =
        SubagentError::internal_from(Outer(std::io::Error::other("No space left on device")));
    assert_eq!(error.code(), ErrorCode::Internal);
    assert_eq!(
        error.to_string(),
        "internal error: writing the batch: No space left on device"
    );
    // A source its parent already prints is not repeated.
    let io = std::io::Error::other("disk full");
    assert_eq!(
        SubagentError::internal_from(io).to_string(),
        "internal error: disk full"
    );
}
