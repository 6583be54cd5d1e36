//! Span export for `demo` and `serve`: OpenTelemetry over OTLP/HTTP
//! (protobuf), off by default.
//!
//! On when `--otel-endpoint URL` is given (the collector's base URL, as
//! `OTEL_EXPORTER_OTLP_ENDPOINT` takes it; `/v1/traces` is appended) or
//! when `OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! is set; off again when `OTEL_SDK_DISABLED=true` or
//! `OTEL_TRACES_EXPORTER=none`. The other standard variables
//! (`OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_SERVICE_NAME`,
//! `OTEL_RESOURCE_ATTRIBUTES`, ...) apply as the SDK reads them; the
//! service name defaults to `subagents`. Spans at `info` and above are
//! exported, in batches from a thread of the SDK's, through the layer
//! [`subagent_runtime::otel::layer`] sets up; [`Exporting`] flushes what is
//! left when dropped, so a command's last spans are not lost.

use std::error::Error;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::WithExportConfig as _;
use opentelemetry_sdk::trace::SdkTracerProvider;
use opentelemetry_sdk::Resource;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::{Layer, Registry};

/// The command-line side of span export.
#[derive(clap::Args, Clone, Debug, Default)]
pub(crate) struct TelemetryArgs {
    /// Export spans over OTLP/HTTP to the collector at URL (its base URL,
    /// e.g. http://127.0.0.1:4318). Also on when OTEL_EXPORTER_OTLP_ENDPOINT
    /// or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set.
    #[arg(long, value_name = "URL")]
    pub(crate) otel_endpoint: Option<String>,
}

/// What the environment says, read once (so tests can pass their own).
#[derive(Clone, Debug, Default)]
pub(crate) struct OtelEnvironment {
    endpoint_set: bool,
    disabled: bool,
}

impl OtelEnvironment {
    /// The process's environment.
    pub(crate) fn from_process() -> Self {
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Self {
        let set = |name: &str| lookup(name).is_some_and(|value| !value.trim().is_empty());
        OtelEnvironment {
            endpoint_set: set("OTEL_EXPORTER_OTLP_ENDPOINT")
                || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"),
            disabled: lookup("OTEL_SDK_DISABLED")
                .is_some_and(|value| value.trim().eq_ignore_ascii_case("true"))
                || lookup("OTEL_TRACES_EXPORTER")
                    .is_some_and(|value| value.trim().eq_ignore_ascii_case("none")),
        }
    }
}

/// Where spans go, decided from the flag and the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Export {
    /// Not exported.
    Off,
    /// To this traces URL (from `--otel-endpoint`).
    To(String),
    /// Where the standard variables say (the SDK resolves them).
    FromEnvironment,
}

impl TelemetryArgs {
    /// Where spans go.
    pub(crate) fn export(&self, environment: &OtelEnvironment) -> Export {
        if environment.disabled {
            return Export::Off;
        }
        match &self.otel_endpoint {
            Some(base) => Export::To(traces_url(base)),
            None if environment.endpoint_set => Export::FromEnvironment,
            None => Export::Off,
        }
    }
}

/// `base` with the OTLP/HTTP traces path, as the SDK does for
/// `OTEL_EXPORTER_OTLP_ENDPOINT`.
fn traces_url(base: &str) -> String {
    let base = base.trim().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Why span export could not be set up.
#[derive(Debug, thiserror::Error)]
#[error("--otel-endpoint: {0}")]
pub(crate) struct ExportSetupError(String);

/// Span export in progress: flushes and stops when dropped.
pub(crate) struct Exporting {
    provider: SdkTracerProvider,
}

impl Drop for Exporting {
    fn drop(&mut self) {
        if let Err(err) = self.provider.shutdown() {
            eprintln!("warning: exporting the last spans failed: {err}");
        }
    }
}

/// Installs the process's subscriber: `extra` (the demo's failure layer,
/// if any) and, when `export` is on, the OpenTelemetry layer. Nothing is
/// installed when both are off.
///
/// # Errors
/// [`ExportSetupError`] for an endpoint the exporter refuses.
pub(crate) fn install(
    export: &Export,
    extra: Option<Box<dyn Layer<Registry> + Send + Sync>>,
) -> Result<Option<Exporting>, Box<dyn Error>> {
    let (exporting, layer) = match export {
        Export::Off => (None, None),
        Export::To(_) | Export::FromEnvironment => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder().with_http();
            if let Export::To(url) = export {
                builder = builder.with_endpoint(url.clone());
            }
            let exporter = builder
                .build()
                .map_err(|err| ExportSetupError(err.to_string()))?;
            let mut resource = Resource::builder();
            if std::env::var_os("OTEL_SERVICE_NAME").is_none() {
                resource = resource.with_service_name("subagents");
            }
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(resource.build())
                .build();
            let layer = subagent_runtime::otel::layer(provider.tracer("subagents"))
                .with_filter(LevelFilter::INFO);
            (Some(Exporting { provider }), Some(layer))
        }
    };
    if extra.is_some() || layer.is_some() {
        let subscriber = tracing_subscriber::registry().with(extra).with(layer);
        // Only the first subscriber of the process is installed; a command runs once.
        let _ = tracing::subscriber::set_global_default(subscriber);
    }
    Ok(exporting)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn environment(pairs: &[(&str, &str)]) -> OtelEnvironment {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(name, value)| ((*name).to_owned(), (*value).to_owned()))
            .collect();
        OtelEnvironment::from_lookup(|name| {
            pairs
                .iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        })
    }

    fn args(endpoint: Option<&str>) -> TelemetryArgs {
        TelemetryArgs {
            otel_endpoint: endpoint.map(str::to_owned),
        }
    }

    #[test]
    fn export_is_off_by_default_and_on_with_the_flag_or_the_standard_variables() {
        assert_eq!(args(None).export(&environment(&[])), Export::Off);
        assert_eq!(
            args(Some("http://127.0.0.1:4318")).export(&environment(&[])),
            Export::To("http://127.0.0.1:4318/v1/traces".into())
        );
        assert_eq!(
            args(Some("http://c:4318/")).export(&environment(&[])),
            Export::To("http://c:4318/v1/traces".into())
        );
        assert_eq!(
            args(Some("http://c:4318/v1/traces")).export(&environment(&[])),
            Export::To("http://c:4318/v1/traces".into())
        );
        for variable in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            assert_eq!(
                args(None).export(&environment(&[(variable, "http://c:4318")])),
                Export::FromEnvironment
            );
            assert_eq!(
                args(None).export(&environment(&[(variable, "  ")])),
                Export::Off,
                "an empty variable is unset"
            );
        }
    }

    #[test]
    fn the_sdk_switches_turn_export_off_even_with_the_flag() {
        for (variable, value) in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let env = environment(&[
                (variable, value),
                ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c"),
            ]);
            assert_eq!(args(Some("http://c")).export(&env), Export::Off);
            assert_eq!(args(None).export(&env), Export::Off);
        }
        let env = environment(&[("OTEL_SDK_DISABLED", "false")]);
        assert_eq!(
            args(Some("http://c")).export(&env),
            Export::To("http://c/v1/traces".into())
        );
    }

    #[test]
    fn an_endpoint_the_exporter_refuses_is_a_typed_error() {
        let refused = install(&Export::To("not a url".into()), None)
            .err()
            .expect("refused");
        assert!(
            refused.to_string().starts_with("--otel-endpoint: "),
            "{refused}"
        );
    }
}
