//! External runs (the `process` provider and test providers) through the
//! runtime, each test named after the spec behaviour it checks: an external
//! run reports its final text and status to its parent and has no inbox; a
//! failing command settles `error` with a safe diagnostic and its partial
//! output; a cleanup failure is recorded beside the settled result and never
//! overwrites it; an external start cancelled before publication fails and
//! is recorded, and a removed registration blocks later lookups.

mod common;

use common::{delegation, spec};

use std::sync::Arc;
use std::time::Duration;

use subagent_core::{
    content::plain_text, ContentBlock, Delivery, ErrorCode, Event, MessageSource, SubagentError,
    SubagentStopReason,
};
use subagent_runtime::{BoxFuture, SubagentProvider};
use tokio_util::sync::CancellationToken;

#[tokio::test]
async fn an_external_run_reports_its_final_text_and_status_to_the_parent_and_accepts_no_inbox() {
    let h = delegation().open().await;
    let activation = h
        .start(spec("process", "shout", Delivery::Parent))
        .await
        .unwrap();
    assert!(
        activation.message_id().is_none(),
        "external runs have no inbox message"
    );
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Completed);
    assert_eq!(plain_text(&result.output), "HELLO WORLD");
    activation.dispose().await.unwrap();
    let report = h
        .events(h.root.session())
        .into_iter()
        .find_map(|event| match event {
            Event::MessageAccepted {
                source: MessageSource::SubagentReport { .. },
                content,
                ..
            } => Some(plain_text(&content)),
            _ => None,
        })
        .expect("the parent receives the external report");
    assert!(
        report.contains("HELLO WORLD") && report.contains("status: completed"),
        "{report}"
    );
    let types: Vec<_> = h
        .events(activation.child_id())
        .iter()
        .map(Event::type_name)
        .collect();
    assert_eq!(
        types,
        vec![
            "SessionCreated",
            "RunRequested",
            "RunStarted",
            "RunSettled",
            "RunDisposed"
        ]
    );
}

#[tokio::test]
async fn a_failing_command_settles_as_error_with_a_safe_diagnostic() {
    let h = delegation().open().await;
    let activation = h
        .start(spec("exit3", "fails", Delivery::Caller))
        .await
        .unwrap();
    let result = activation.result().await.unwrap();
    assert_eq!(result.stop_reason, SubagentStopReason::Error);
    assert_eq!(
        result.diagnostic.as_ref().map(|d| d.as_str()),
        Some("the process exited with status 3")
    );
    assert_eq!(
        plain_text(&result.output),
        "partial",
        "output may be partial"
    );
    activation.dispose().await.unwrap();
}

/// An external provider whose runs settle at once and whose cleanup fails,
/// or whose start waits for cancellation.
struct Flaky {
    name: &'static str,
    block_start: bool,
}

struct FlakyRun;

impl subagent_runtime::SubagentRun for FlakyRun {
    fn result(&mut self) -> BoxFuture<'_, Result<subagent_core::SubagentResult, SubagentError>> {
        Box::pin(async {
            Ok(subagent_core::SubagentResult::completed(vec![
                ContentBlock::text("kept"),
            ]))
        })
    }
    fn dispose(&mut self) -> BoxFuture<'_, Result<(), subagent_core::Diagnostic>> {
        Box::pin(async { Err(subagent_core::Diagnostic::new("socket still open")) })
    }
}

impl SubagentProvider for Flaky {
    fn name(&self) -> &str {
        self.name
    }
    fn capabilities(&self) -> subagent_core::SubagentCapabilities {
        subagent_core::SubagentCapabilities::default()
    }
    fn inherits_parent_context(&self) -> bool {
        false
    }
    fn start(
        &self,
        request: subagent_runtime::provider::ResolvedStartRequest,
    ) -> BoxFuture<'static, Result<Box<dyn subagent_runtime::SubagentRun>, SubagentError>> {
        let block = self.block_start;
        Box::pin(async move {
            if block {
                request.signal.cancelled().await;
                return Err(SubagentError::Cancelled);
            }
            Ok(Box::new(FlakyRun) as Box<dyn subagent_runtime::SubagentRun>)
        })
    }
}

#[tokio::test]
async fn a_cleanup_failure_is_recorded_beside_the_settled_result_and_never_overwrites_it() {
    let h = delegation()
        .provider(Arc::new(Flaky {
            name: "flaky",
            block_start: false,
        }))
        .open()
        .await;
    let activation = h
        .start(spec("flaky", "leaky", Delivery::Caller))
        .await
        .unwrap();
    assert_eq!(
        plain_text(&activation.result().await.unwrap().output),
        "kept"
    );
    activation.dispose().await.unwrap();
    let events = h.events(activation.child_id());
    assert!(matches!(
        events.last(),
        Some(Event::RunDisposed { cleanup_error: Some(diagnostic), .. }) if diagnostic.as_str() == "socket still open"
    ));
    assert_eq!(
        activation.result().await.unwrap().stop_reason,
        SubagentStopReason::Completed,
        "the result stands"
    );
}

#[tokio::test]
async fn an_external_start_cancelled_before_publication_fails_and_is_recorded() {
    let h = delegation().open().await;
    let registration = h
        .runtime
        .register_provider(Arc::new(Flaky {
            name: "blocked",
            block_start: true,
        }))
        .await
        .unwrap();
    let signal = CancellationToken::new();
    let cancel = signal.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(20)).await;
        cancel.cancel();
    });
    let err = h
        .runtime
        .start_activation(&h.root, spec("blocked", "never", Delivery::Parent), signal)
        .await
        .err()
        .unwrap();
    assert_eq!(err.code(), ErrorCode::Cancelled);
    let child = h.runtime.list_children(h.root.session()).await.unwrap()[0]
        .entry
        .child_id;
    let types: Vec<_> = h.events(child).iter().map(Event::type_name).collect();
    assert_eq!(
        types,
        vec!["SessionCreated", "RunRequested", "RunStartFailed"]
    );
    assert_eq!(registration.name(), "blocked");
    registration.remove().await.unwrap();
    assert!(h.runtime.get_provider("blocked").unwrap().is_none());
}
