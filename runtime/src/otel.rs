//! The OpenTelemetry layer the project installs (`subagents demo` and
//! `serve` with `--otel-endpoint`, and the tests and the bench that check
//! or measure what they export), and the one it recommends to a host.
//!
//! It is `tracing-opentelemetry`'s layer with five of its defaults off:
//! four attributes or clock readings that say nothing about a delegation,
//! and one per-enter cost.
//! - No code location (`code.file.path`, `code.module.name`,
//!   `code.line.number`) and no `target`: every span of the runtime would
//!   name a line and a module of its own source, not of the host's or the
//!   agent's.
//! - No thread (`thread.id`, `thread.name`): an activation's span opens on
//!   whichever tokio worker decided its start, and its steps run on others.
//! - No busy and idle times (`busy_ns`, `idle_ns`): an activation's span is
//!   entered only around its provider's steps, so "busy" would be the
//!   time spent polling them, not the child's work. The span's start and
//!   end are its times (the layer ends a span at its last exit, whatever
//!   its settings: for a run, the end of its `dispose`).
//! - No OpenTelemetry context attached on enter
//!   (`with_context_activation(false)`): entering a span does not make it
//!   OpenTelemetry's `Context::current()`. Code inside a provider's step
//!   that propagates the trace itself (an HTTP client injecting
//!   `traceparent`, a child process given `TRACEPARENT`) takes the context
//!   from the `tracing` span it runs in, `tracing::Span::current().context()`
//!   (`tracing_opentelemetry::OpenTelemetrySpanExt`), as `tracing-opentelemetry`
//!   documents; `tracing` spans and events it emits nest under the run's
//!   span either way. Two consequences: inside a span this layer does not
//!   export (a `debug` span under an `info` filter) that context is empty,
//!   where `Context::current()` would have been the nearest exported span;
//!   and a `tracing` span opened inside an OpenTelemetry span that the
//!   provider's own code attached is the run's child, not that span's.
//!   Attaching the context on each of the three enters of a one-shot run
//!   cost an activation about 2 to 7 points of throughput (two series),
//!   against about 4 for the attributes and timings above.
//!
//! What they cost is in BENCHMARKS.md ("Tracing overhead", "Where the
//! overhead line stands"). Span names, the runtime's own attributes,
//! parents, links and the trace context the events keep are the same as
//! with the layer's defaults. A host that
//! wants any of them back sets it on the layer this returns (it is
//! `tracing-opentelemetry`'s own type), e.g.
//! `layer(tracer).with_context_activation(true)`.

use tracing_opentelemetry::OpenTelemetryLayer;
use tracing_subscriber::registry::LookupSpan;

/// The layer that exports the runtime's spans through `tracer`, set up as
/// the module says. A host installs it as it would
/// `tracing_opentelemetry::layer().with_tracer(tracer)`, usually with a
/// filter at `info` (the runtime's machinery spans are at `debug`).
#[must_use]
pub fn layer<S, T>(tracer: T) -> OpenTelemetryLayer<S, T>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    T: opentelemetry::trace::Tracer + 'static,
    T::Span: Send + Sync,
{
    tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_target(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
}

/// Whether `key` names an attribute `tracing-opentelemetry`'s layer adds to
/// every span by itself with its defaults (code location, target, thread,
/// busy and idle times; and the level, which it can be asked for), none of
/// which [`layer`] sets: what a check that spans were exported through it
/// looks for.
#[must_use]
pub fn added_by_layer_defaults(key: &str) -> bool {
    key.starts_with("code.")
        || key.starts_with("thread.")
        || matches!(key, "target" | "level" | "busy_ns" | "idle_ns")
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{TraceContextExt as _, TracerProvider as _};
    use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};
    use tracing_subscriber::layer::SubscriberExt as _;

    use super::*;

    /// One span exported through the layer `install` builds, entered
    /// once; whether OpenTelemetry's current context was that span while
    /// it was entered.
    fn one_span<L>(
        install: impl FnOnce(opentelemetry_sdk::trace::SdkTracer) -> L,
    ) -> (SpanData, bool)
    where
        L: tracing_subscriber::Layer<tracing_subscriber::Registry> + Send + Sync,
    {
        let exporter = InMemorySpanExporter::default();
        let provider = SdkTracerProvider::builder()
            .with_simple_exporter(exporter.clone())
            .build();
        let subscriber = tracing_subscriber::registry().with(install(provider.tracer("test")));
        let current = tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("run", { "gen_ai.agent.name" } = "child");
            let _entered = span.enter();
            opentelemetry::Context::current()
                .span()
                .span_context()
                .is_valid()
        });
        provider.force_flush().unwrap();
        let mut spans = exporter.get_finished_spans().unwrap();
        assert_eq!(spans.len(), 1);
        (spans.remove(0), current)
    }

    #[test]
    fn the_layer_adds_no_attribute_and_attaches_no_context() {
        let (span, current) = one_span(layer);
        let keys: Vec<&str> = span.attributes.iter().map(|kv| kv.key.as_str()).collect();
        assert_eq!(keys, ["gen_ai.agent.name"]);
        assert!(!current, "entering does not make it Context::current()");
    }

    #[test]
    fn the_layers_defaults_add_what_the_check_looks_for() {
        let (span, current) = one_span(|tracer| tracing_opentelemetry::layer().with_tracer(tracer));
        let added: Vec<&str> = span
            .attributes
            .iter()
            .map(|kv| kv.key.as_str())
            .filter(|key| added_by_layer_defaults(key))
            .collect();
        for key in [
            "code.file.path",
            "code.line.number",
            "target",
            "thread.id",
            "busy_ns",
            "idle_ns",
        ] {
            assert!(added.contains(&key), "{key} in {added:?}");
        }
        assert!(!added_by_layer_defaults("gen_ai.agent.name"));
        assert!(current, "the defaults attach the span's context on enter");
    }
}
