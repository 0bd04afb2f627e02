"""OpenTelemetry spans for each HTTP request and each reconcile run, exported over OTLP when asked.

Off unless the operator names an OTLP endpoint with OpenTelemetry's own variables
(`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, or `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces` added;
`OTEL_SERVICE_NAME`, `OTEL_EXPORTER_OTLP_HEADERS` and the rest are read by the SDK as usual). Off,
`span()` hands back one shared `nullcontext` and the app mounts no tracing middleware, so a
request or a run pays one global read. On, the SDK and its OTLP/HTTP exporter (the `otel` extra)
batch the spans in a thread of their own.

What a span carries is chosen here, not left to instrumentation: the route's template, never
the query string, a header or a body; an exception's type and its message through the
redaction filter (core.redaction), never its traceback's locals.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

from better_compute.core.errors import ComputeError, ErrorCode
from better_compute.core.redaction import redact

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Span, Tracer

__all__ = ["Attributes", "enabled", "failed", "flush", "install", "shutdown", "span", "start_from_env", "tracer"]

Attributes = Mapping[str, str | int | float | bool]
ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
SCOPE = "better_compute"

_OFF: AbstractContextManager[None] = nullcontext()
_tracer: Tracer | None = None
_provider: TracerProvider | None = None


def enabled() -> bool:
    return _tracer is not None


def tracer() -> Tracer | None:
    """The tracer spans are made with; None while tracing is off."""
    return _tracer


def span(name: str, attributes: Attributes | None = None) -> AbstractContextManager[Span | None]:
    """A span around the block, the current one's child; the shared null context while tracing is off."""
    if _tracer is None:
        return _OFF
    return _tracer.start_as_current_span(name, attributes=attributes, record_exception=False)


def failed(current: Span | None, error: BaseException) -> None:
    """Mark the span failed with the error's type and its redacted message (no traceback, no locals)."""
    if current is None:
        return
    from opentelemetry.trace import Status, StatusCode

    current.set_attribute("error.type", type(error).__name__)
    current.set_status(Status(StatusCode.ERROR, redact(str(error))[:512]))


def start_from_env(env: Mapping[str, str]) -> bool:
    """Turn tracing on when the environment names an OTLP endpoint; whether it did.

    An endpoint without the `otel` extra installed is the operator's error, said before
    anything starts, rather than spans silently lost."""
    if not any(env.get(name) for name in ENDPOINT_VARIABLES):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        variable = next(name for name in ENDPOINT_VARIABLES if env.get(name))
        raise ComputeError(
            ErrorCode.INVALID_INPUT,
            f"{variable} is set, but OpenTelemetry's SDK is not installed ({exc.name}): "
            "install better-compute[otel], or unset it",
            f"/env/{variable}",
        ) from None
    provider = TracerProvider(resource=Resource.create({"service.name": env.get("OTEL_SERVICE_NAME", SCOPE)}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    install(provider)
    return True


def install(provider: TracerProvider | None) -> None:
    """Make spans with this provider (None: tracing off). Tests install one with an in-memory exporter."""
    global _tracer, _provider
    _provider = provider
    _tracer = provider.get_tracer(SCOPE) if provider is not None else None


def flush() -> None:
    """Export what is batched now (as `serve` shuts down: uvicorn then ends the process by the signal)."""
    if _provider is not None:
        _provider.force_flush()


def shutdown() -> None:
    """Export what is batched and turn tracing off (at the end of `serve`)."""
    provider = _provider
    install(None)
    if provider is not None:
        provider.shutdown()
