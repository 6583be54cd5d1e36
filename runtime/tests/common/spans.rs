//! Spans exported to the OpenTelemetry SDK's in-memory exporter, for the
//! tests that check them: the process-global subscriber they install (one
//! such test per binary) and the attributes they read.

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::Value;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
use tracing_subscriber::layer::SubscriberExt as _;

/// Installs, as the process's default, a subscriber that exports every
/// span through the layer the project installs (`subagent_runtime::otel`)
/// to an in-memory exporter, as each span ends; the exporter, and the
/// provider to flush before reading it.
pub(crate) fn export_in_memory() -> (InMemorySpanExporter, SdkTracerProvider) {
    let exporter = InMemorySpanExporter::default();
    // ANCHOR: otel_layer
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry().with(subagent_runtime::otel::layer(
        provider.tracer("subagents-test"),
    ));
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber");
    // ANCHOR_END: otel_layer
    (exporter, provider)
}

/// The attribute `key` of `span` as text.
pub(crate) fn string_attr(span: &SpanData, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| match &kv.value {
            Value::String(text) => text.as_str().to_owned(),
            other => other.to_string(),
        })
}
