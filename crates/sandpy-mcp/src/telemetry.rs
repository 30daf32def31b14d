//! OpenTelemetry traces of runs, exported by OTLP: off unless the standard environment
//! asks for them (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`).
//!
//! The spans are `tracing` spans (`run_python`, `admission`, `execute`, `tool_call`, ...);
//! [`Telemetry::from_env`] gives the layer that exports them, for a front end to put in its
//! subscriber. The exporter honours the standard variables: the protocol
//! (`OTEL_EXPORTER_OTLP_PROTOCOL` or `..._TRACES_PROTOCOL`: `http/protobuf`, the default,
//! or `grpc`), the endpoint, headers and timeout (read by the exporter itself), and the
//! service name (`OTEL_SERVICE_NAME`, else `sandpy`). An `https` endpoint is checked
//! against the system's roots (`SSL_CERT_FILE` included). Spans are exported in batches
//! from a thread of their own, through a bounded queue: a slow or dead collector never
//! holds up a run (spans past the queue are dropped, and the SDK reports how many). The
//! gRPC client (tonic) needs a tokio runtime of its own: one worker thread, kept with the
//! exporter, so that the process's own runtime (or its absence: the CLI's one-shot runs,
//! the Python package) does not matter.
//!
//! A client's trace is joined through the W3C trace context in a request's `_meta`
//! (`traceparent`, `tracestate`; MCP SEP-414), and passed on the same way to upstream
//! servers in the `_meta` of each tool call.

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::tonic_types::transport::ClientTlsConfig;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithTonicConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use std::collections::HashMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::LevelFilter;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Traces cannot be exported as the environment asks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TelemetryError {
    /// The protocol is not one sandpy exports with.
    #[error("{variable}={value:?} is not a protocol sandpy exports traces with: use http/protobuf (a collector's port 4318) or grpc (port 4317)")]
    Protocol {
        /// The variable that named it.
        variable: &'static str,
        /// What it said.
        value: String,
    },
    /// The exporter could not be built (a malformed endpoint, say).
    #[error("cannot export traces by OTLP")]
    Exporter(#[source] opentelemetry_otlp::ExporterBuildError),
    /// The gRPC exporter's thread could not be started.
    #[error("cannot start the thread that exports traces by gRPC")]
    Runtime(#[source] std::io::Error),
}

/// The trace exporter of a process: keep it while the process serves, and
/// [`Telemetry::shutdown`] it at the end so the last spans are sent.
pub struct Telemetry {
    provider: SdkTracerProvider,
    /// The gRPC exporter's runtime (its connection lives there); `None` over HTTP.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Telemetry {
    /// The exporter and the `tracing` layer that feeds it (sandpy's own spans), when the
    /// environment names an OTLP endpoint; `None` when it does not (traces are off).
    pub fn from_env<S>(
    ) -> Result<Option<(Telemetry, impl tracing_subscriber::Layer<S>)>, TelemetryError>
    where
        S: tracing::Subscriber + for<'span> LookupSpan<'span>,
    {
        // The signal's own variable first, as the exporter reads them.
        let Some((_, endpoint)) = first_set([
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
            "OTEL_EXPORTER_OTLP_ENDPOINT",
        ]) else {
            return Ok(None);
        };
        let (variable, value) = first_set([
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ])
        .unwrap_or(("", "http/protobuf".to_string()));
        // The exporter's TLS (reqwest's or tonic's) is rustls with no provider of its own.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = opentelemetry_otlp::SpanExporter::builder();
        let (exporter, runtime) = match value.as_str() {
            "http/protobuf" => {
                let exporter = builder
                    .with_http()
                    .with_protocol(Protocol::HttpBinary)
                    .build();
                (exporter, None)
            }
            "grpc" => {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name("sandpy-otlp-grpc")
                    .enable_all()
                    .build()
                    .map_err(TelemetryError::Runtime)?;
                let mut builder = builder.with_tonic();
                if endpoint.starts_with("https://") {
                    builder = builder.with_tls_config(ClientTlsConfig::new().with_enabled_roots());
                }
                // The channel (connected lazily) spawns its worker on the runtime entered.
                let exporter = {
                    let _entered = runtime.enter();
                    builder.build()
                };
                (exporter, Some(runtime))
            }
            _ => return Err(TelemetryError::Protocol { variable, value }),
        };
        let exporter = exporter.map_err(TelemetryError::Exporter)?;
        let mut resource = opentelemetry_sdk::Resource::builder();
        if first_set(["OTEL_SERVICE_NAME"]).is_none() {
            resource = resource.with_service_name("sandpy");
        }
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource.build())
            .build();
        let tracer = provider.tracer("sandpy");
        // sandpy's own spans, at `info`: a run, its admission, instantiation, execution and
        // tool calls; not its dependencies'.
        let own = tracing_subscriber::filter::Targets::new()
            .with_target("sandpy", LevelFilter::INFO)
            .with_target("sandpy_mcp", LevelFilter::INFO);
        let layer = tracing_opentelemetry::layer()
            .with_tracer(tracer)
            .with_filter(own);
        Ok(Some((Telemetry { provider, runtime }, layer)))
    }

    /// Send the spans still queued (waiting at most the exporter's timeout) and stop.
    pub fn shutdown(self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!("traces: {e}");
        }
        // Not a drop: the caller may be inside a runtime of its own.
        if let Some(runtime) = self.runtime {
            runtime.shutdown_background();
        }
    }
}

/// The first of `names` set to a non-empty value, and that value.
fn first_set<const N: usize>(names: [&'static str; N]) -> Option<(&'static str, String)> {
    names
        .into_iter()
        .find_map(|name| Some((name, std::env::var(name).ok().filter(|v| !v.is_empty())?)))
}

/// Make the trace context in a request's `_meta` (`traceparent`, `tracestate`) the parent
/// of `span`; nothing when there is none or traces are off.
pub(crate) fn join(span: &tracing::Span, meta: &rmcp::model::RequestMetaObject) {
    let Some(traceparent) = meta.0.get("traceparent").and_then(|v| v.as_str()) else {
        return;
    };
    let mut carrier = HashMap::from([("traceparent".to_string(), traceparent.to_string())]);
    if let Some(state) = meta.0.get("tracestate").and_then(|v| v.as_str()) {
        carrier.insert("tracestate".into(), state.into());
    }
    let context = TraceContextPropagator::new().extract(&carrier);
    let _ = span.set_parent(context);
}

/// The current span's trace context as `_meta` entries (`traceparent`, `tracestate`), to
/// pass on to an upstream; empty when traces are off.
pub(crate) fn current() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    let context = tracing::Span::current().context();
    TraceContextPropagator::new().inject_context(&context, &mut carrier);
    carrier
}
