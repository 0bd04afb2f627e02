"""OpenTelemetry spans (core.tracing): one per HTTP request and per reconcile run when an OTLP
endpoint is set, exported by `better-compute serve` to a collector; nothing mounted when not."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode
from stub_modules import StubModule
from typer.testing import CliRunner

from better_compute.api import create_app
from better_compute.api.tracing import TracingMiddleware
from better_compute.cli.main import app as cli
from better_compute.core import tracing
from better_compute.core.clock import SimClock
from better_compute.core.ids import new_id
from better_compute.core.redaction import redact_value
from better_compute.engine import Outcome, RunContext
from better_compute.server import Compute, better_compute
from better_compute.store import Database
from better_compute.testing.loopback import LoopbackServer

SECRET = "a-test-secret-of-at-least-32-characters"
HIDDEN = "hunter2-the-provider-said-this-token-zz"


class Failing:
    """A reconciler whose run fails quoting a secret, as a provider's error might."""

    kind = "traced"

    async def run(self, ctx: RunContext, key: str) -> Outcome:
        if key == "boom":
            raise RuntimeError(f"the provider refused token {HIDDEN}")
        return Outcome.done()


class Traced(StubModule):
    name = "traced"

    def __init__(self) -> None:
        super().__init__(Failing())

        @self.router.get("/v1/traced/{thing_id}")
        async def thing(thing_id: str) -> dict[str, str]:
            return {"id": thing_id}


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.install(provider)
    yield exporter
    tracing.install(None)


def compute_for(database_url: str) -> Compute:
    return better_compute(database=database_url, secret=SECRET, modules=[Traced()], clock=SimClock())


async def key_of(compute: Compute) -> tuple[str, str]:
    tenant = await compute.iam.create_tenant(new_id("tenant").replace("_", "-"))
    _, plain = await compute.iam.create_api_key(tenant.id)
    return tenant.id, plain


@pytest.fixture
async def client(database: Database, database_url: str, spans: InMemorySpanExporter) -> AsyncIterator[Any]:
    compute = compute_for(database_url)
    application = create_app(compute)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application)
        async with httpx.AsyncClient(transport=transport, base_url="http://api") as http:
            yield compute, http


def named(exporter: InMemorySpanExporter, prefix: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name.startswith(prefix)]


async def test_each_request_is_a_span_named_by_its_route_never_its_values(
    client: tuple[Compute, httpx.AsyncClient], spans: InMemorySpanExporter
) -> None:
    compute, http = client
    tenant_id, plain = await key_of(compute)
    auth = {"Authorization": f"Bearer {plain}"}
    assert (await http.get("/v1/traced/th-1234?q=private-value", headers=auth)).status_code == 200
    assert (await http.get("/v1/traced/th-1", headers={"Authorization": "Bearer bck_wrong"})).status_code == 401
    assert (await http.get("/no/such/route", headers=auth)).status_code == 404

    (ok,) = named(spans, "GET /v1/traced/")
    assert ok.name == "GET /v1/traced/{thing_id}"
    assert ok.attributes is not None and dict(ok.attributes) == {
        "http.request.method": "GET",
        "http.route": "/v1/traced/{thing_id}",
        "http.response.status_code": 200,
        "bc.tenant": tenant_id,
        "bc.api_key": ok.attributes["bc.api_key"],
    }
    refused, unrouted = [dict(s.attributes or {}) for s in spans.get_finished_spans() if s.name == "GET"]
    assert refused["http.response.status_code"] == 401, "refused before routing: named by its method alone"
    assert "bc.tenant" not in refused and "http.route" not in refused
    assert unrouted["http.response.status_code"] == 404 and "http.route" not in unrouted
    everything = repr([(s.name, dict(s.attributes or {})) for s in spans.get_finished_spans()])
    assert "th-1234" not in everything and "private-value" not in everything and plain not in everything


async def test_each_reconcile_run_is_a_span_and_a_failure_is_redacted(
    client: tuple[Compute, httpx.AsyncClient], spans: InMemorySpanExporter
) -> None:
    compute, _ = client
    redact_value(HIDDEN)
    await compute.engine.submit("traced", "fine")
    await compute.engine.submit("traced", "boom")
    async with asyncio.timeout(30):
        while len(named(spans, "reconcile traced")) < 2:
            await asyncio.sleep(0.01)
    by_key = {s.attributes["bc.reconcile.key"]: s for s in named(spans, "reconcile traced") if s.attributes}
    assert by_key["fine"].status.status_code is StatusCode.UNSET
    failed = by_key["boom"]
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes is not None and failed.attributes["error.type"] == "RuntimeError"
    assert failed.status.description is not None and "refused token" in failed.status.description
    assert HIDDEN not in repr(failed.to_json()), "the secret in the error never leaves in a span"
    assert failed.events == (), "no exception event: its traceback could carry locals"


async def test_with_tracing_off_nothing_is_mounted_and_a_span_is_the_shared_null_context(
    database: Database, database_url: str
) -> None:
    assert not tracing.enabled()
    application = create_app(compute_for(database_url))
    assert TracingMiddleware not in [m.cls for m in application.user_middleware]
    assert tracing.span("a") is tracing.span("b")
    with tracing.span("a") as current:
        assert current is None


def test_an_endpoint_without_the_sdk_installed_is_refused_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.trace_exporter", None)
    monkeypatch.setenv("BC_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    result = CliRunner().invoke(cli, ["serve", "--port", "0"])
    assert result.exit_code == 1
    assert result.stderr.startswith("error: INVALID_INPUT at /env/OTEL_EXPORTER_OTLP_ENDPOINT: ")
    assert "better-compute[otel]" in result.stderr and "Traceback" not in result.stderr
    assert not tracing.enabled()


class Collector:
    """An OTLP/HTTP trace receiver: what `POST /v1/traces` was sent, decoded."""

    def __init__(self) -> None:
        self.spans: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        if scope["path"] == "/v1/traces":
            request = ExportTraceServiceRequest.FromString(body)
            for resource in request.resource_spans:
                for scoped in resource.scope_spans:
                    for span in scoped.spans:
                        values = {a.key: a.value.WhichOneof("value") and _value(a.value) for a in span.attributes}
                        self.spans.append((span.name, values))
        await send(
            {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/x-protobuf")]}
        )
        await send({"type": "http.response.body", "body": b""})


def _value(value: Any) -> Any:
    return getattr(value, value.WhichOneof("value"))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def test_serve_exports_its_request_spans_over_otlp_to_the_configured_endpoint(tmp_path: Path) -> None:
    command = [sys.executable, "-c", "import sys; from better_compute.cli.main import main; sys.exit(main())"]
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("BC_", "OTEL_"))}
    environment["BC_DATA_DIR"] = str(tmp_path / "data")
    subprocess.run([*command, "tenants", "create", "acme"], env=environment, check=True, capture_output=True)
    made = subprocess.run(
        [*command, "api-keys", "create", "--tenant", "acme"],
        env=environment,
        check=True,
        capture_output=True,
        text=True,
    )
    plain = made.stdout.split()[0]
    collector = Collector()
    port = _free_port()
    async with LoopbackServer(collector, name="otlp-collector") as receiver:
        environment |= {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url,
            "OTEL_BSP_SCHEDULE_DELAY": "600000",
        }  # only the flush at shutdown exports
        server = await asyncio.create_subprocess_exec(
            *command, "serve", "--port", str(port), env=environment, stderr=subprocess.PIPE
        )
        try:
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
                async with asyncio.timeout(120):
                    while True:
                        try:
                            if (await http.get("/healthz")).status_code == 200:
                                break
                        except httpx.TransportError:
                            await asyncio.sleep(0.1)
                whoami = await http.get("/v1/whoami", headers={"Authorization": f"Bearer {plain}"})
                assert whoami.status_code == 200
        finally:
            server.send_signal(signal.SIGTERM)
            _, err = await asyncio.wait_for(server.communicate(), timeout=120)
        assert server.returncode in (0, -signal.SIGTERM), err  # uvicorn raises the signal again once shut down
    names = [name for name, _ in collector.spans]
    assert "GET /healthz" in names and "GET /v1/whoami" in names, names
    whoami_span = dict(collector.spans)["GET /v1/whoami"]
    assert whoami_span["http.response.status_code"] == 200 and whoami_span["bc.tenant"]
    assert plain not in repr(collector.spans)
