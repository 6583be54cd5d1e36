//! The OpenTelemetry layer the project installs (`subagents demo` and
//! `serve` with `--otel-endpoint`, and the tests and the bench that check
//! or measure what they export), and the one it recommends to a host.
//!
//!
//! It is `tracing-opentelemetry`'s layer with four of its defaults off:
//! three attributes or clock readings that say nothing about a delegation,
//! and one per-enter cost.
//! - No code location (`code.file.path`, `code.module.name`,
//!   `code.line.number`): every span of the runtime would name a line of
//!   its own source, not of the host's or the agent's.
//! - No thread (`thread.id`, `thread.name`): an activation's span opens on
//!   whichever tokio worker decided its start, and its steps run on others.
//! - No busy and idle times (`busy_ns`, `idle_ns`): an activation's span is
//!   entered only around its provider's steps, so "busy" would be the
//!   time spent polling them, not the child's work. The span's start and
//!   end are its times.
//! - No OpenTelemetry context attached on enter
//!   (`with_context_activation(false)`): entering a span does not make it
//!   OpenTelemetry's `Context::current()`. Code inside a provider's step
//!   that propagates the trace itself (an HTTP client injecting
//!   `traceparent`, a child process given `TRACEPARENT`) takes the context
//!   from the `tracing` span it runs in, `tracing::Span::current().context()`
//!   (`tracing_opentelemetry::OpenTelemetrySpanExt`), as `tracing-opentelemetry`
//!   documents; `tracing` spans and events it emits nest under the run's
//!   span either way. Attaching the context on each of the three enters of
//!   a one-shot run was most of what the layer added to an activation.
//!
//! What each costs is in BENCHMARKS.md ("Tracing overhead", "The project's
//! layer"). Span names, attributes, parents, links and the trace context
//! the events keep are the same as with the layer's defaults. A host that
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
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_context_activation(false)
}
