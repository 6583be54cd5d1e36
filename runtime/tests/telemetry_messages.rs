//! Message deliveries in their tree's one trace: a `subagents.message`
//! span sent from a host's own request (a span of another trace) or from
//! no span at all is parented by the log's rule on the sender, with the
//! host's span as a link; one sent from inside the tree's trace is the
//! caller's child.
//!
//! One test in its own binary: the subscriber is process-global.

mod common;

use opentelemetry::trace::{SpanId, TraceContextExt as _};
use opentelemetry_sdk::trace::SpanData;
use subagent_core::telemetry::{attr, span};
use subagent_core::{ContentBlock, Delivery, Event};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use common::{records, spec, string_attr, Harness};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_join_their_trees_trace_whatever_span_sends_them() {
    let (exporter, provider) = common::export_in_memory();
    // `slow` stays in its first turn: its deliveries are parented on that
    // turn by the rule.
    let h = Harness::open(common::delegation_host()).await;
    let child = h
        .runtime
        .start_activation(
            &h.root,
            spec("spawn", "slow", Delivery::Caller),
            CancellationToken::new(),
        )
        .await
        .unwrap();
    common::until("the child's turn to start", || {
        h.fold()
            .activations
            .get(&child.child_id())
            .and_then(|activation| activation.live.as_ref())
            .is_some_and(|live| live.turn_trace.is_some())
    })
    .await;
    let send = |label: &'static str| {
        let runtime = h.runtime.clone();
        let (sender, target) = (child.agent(), h.root.session());
        async move {
            runtime
                .send_message(
                    &sender,
                    target,
                    vec![ContentBlock::text(label)],
                    CancellationToken::new(),
                )
                .await
                .unwrap()
        }
    };
    // From a host's request, a trace of its own.
    send("from the host's request")
        .instrument(tracing::info_span!(parent: None, "host.request"))
        .await;
    // From no span at all.
    send("from no span").await;
    // From a span inside the tree's trace: a child of the root's span,
    // as the log names it.
    let root_trace = records(&h.log)
        .into_iter()
        .find_map(|record| match record.event {
            Event::SessionCreated { parent: None, .. } => record.trace,
            _ => None,
        })
        .expect("the root's creation keeps its span");
    let in_tree = tracing::info_span!(parent: None, "in.tree");
    let _ = in_tree.set_parent(opentelemetry::Context::new().with_remote_span_context(
        opentelemetry::trace::SpanContext::new(
            opentelemetry::trace::TraceId::from_bytes(root_trace.trace_id),
            SpanId::from_bytes(root_trace.span_id),
            opentelemetry::trace::TraceFlags::SAMPLED,
            true,
            opentelemetry::trace::TraceState::default(),
        ),
    ));
    send("from inside the tree").instrument(in_tree).await;

    h.runtime.close().await.unwrap();
    provider.force_flush().unwrap();
    let exported = exporter.get_finished_spans().unwrap();
    let named = |name: &str| -> &SpanData {
        exported
            .iter()
            .find(|s| s.name == name)
            .unwrap_or_else(|| panic!("{name} was exported"))
    };
    let root_span = exported
        .iter()
        .find(|s| s.name.starts_with(span::CREATE_AGENT))
        .expect("the root's span was exported");
    let turn = exported
        .iter()
        .find(|s| s.name.starts_with(span::INVOKE_AGENT))
        .expect("the child's turn was exported");
    let (host_request, in_tree) = (named("host.request"), named("in.tree"));
    let deliveries: Vec<&SpanData> = exported
        .iter()
        .filter(|s| s.name == span::DELIVER_MESSAGE)
        .collect();
    assert_eq!(deliveries.len(), 3, "{deliveries:#?}");
    let root_id = h.root.session().to_string();
    for delivery in &deliveries {
        assert_eq!(
            delivery.span_context.trace_id(),
            root_span.span_context.trace_id(),
            "a delivery is in its tree's trace"
        );
        assert_eq!(
            string_attr(delivery, attr::CONVERSATION_ID).as_deref(),
            Some(root_id.as_str())
        );
    }
    let linked = |delivery: &SpanData, to: &SpanData| {
        delivery
            .links
            .iter()
            .any(|link| link.span_context.span_id() == to.span_context.span_id())
    };
    // The two from outside the tree: children of the sender's turn by the
    // rule, the host's request kept as a link.
    let by_rule: Vec<&&SpanData> = deliveries
        .iter()
        .filter(|d| d.parent_span_id == turn.span_context.span_id())
        .collect();
    assert_eq!(by_rule.len(), 2, "{deliveries:#?}");
    assert_eq!(
        by_rule.iter().filter(|d| linked(d, host_request)).count(),
        1,
        "the host's request is a link of its delivery"
    );
    assert_eq!(
        by_rule.iter().filter(|d| d.links.is_empty()).count(),
        1,
        "the delivery sent from no span links nothing"
    );
    // The one from inside: the caller's child, with no link.
    let inside = deliveries
        .iter()
        .find(|d| d.parent_span_id == in_tree.span_context.span_id())
        .expect("a delivery sent inside the tree is its caller's child");
    assert!(inside.links.is_empty());
    // Each delivery was recorded in its span, of the tree's trace: the
    // accepted messages keep no context of their own.
    let accepted: Vec<_> = records(&h.log)
        .into_iter()
        .filter(|record| matches!(record.event, Event::MessageAccepted { .. }))
        .collect();
    assert!(accepted.len() >= 3, "{accepted:#?}");
    assert!(accepted.iter().all(|record| record.trace.is_none()));
    child.dispose().await.ok();
}
