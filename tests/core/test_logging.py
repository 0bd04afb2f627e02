"""A canary secret never reaches the log, whichever way it travels to a log call."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from better_compute.core.clock import SimClock
from better_compute.core.ids import new_token
from better_compute.core.logging import configure_logging
from better_compute.core.redaction import REDACTED, redact_value
from better_compute.engine import Engine, Outcome, RunContext
from better_compute.store import Database


@pytest.fixture
def captured() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(logging.DEBUG, stream=stream)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        logging.captureWarnings(False)


def test_a_registered_value_is_redacted_from_messages_args_and_tracebacks(captured: io.StringIO) -> None:
    canary = "canary-" + new_token("x", 12)
    redact_value(canary)
    log = logging.getLogger("better_compute.test")
    log.info("as an argument: %s", canary)
    log.info(f"inside the message: {canary}")
    log.info("inside a mapping: %(value)s", {"value": canary})
    try:
        raise RuntimeError(f"the provider said {canary}")
    except RuntimeError:
        log.exception("with a traceback")
    logging.getLogger("some.library").warning("a library logger: %r", {"token": canary})
    output = captured.getvalue()
    assert output.count(REDACTED) >= 5
    assert canary not in output
    assert "with a traceback" in output and "RuntimeError" in output


def test_token_shapes_are_redacted_without_registration(captured: io.StringIO) -> None:
    join_token = new_token("bcj")
    bearer = "Bearer abcdefghijklmnop0123456789"
    logging.getLogger("better_compute.test").warning("joined with %s using %s", join_token, bearer)
    output = captured.getvalue()
    assert join_token not in output
    assert "abcdefghijklmnop0123456789" not in output


async def test_a_reconciler_error_carrying_a_secret_is_logged_redacted(
    captured: io.StringIO, database: Database
) -> None:
    canary = "canary-" + new_token("y", 12)
    redact_value(canary)

    class Leaky:
        kind = "leaky"

        async def run(self, ctx: RunContext, key: str) -> Outcome:
            raise ValueError(f"credential {canary} rejected")

    engine = Engine(database, SimClock(), [Leaky()])
    await engine.submit("leaky", "k")
    await engine.run_until_idle()
    output = captured.getvalue()
    assert "leaky/k failed" in output
    assert canary not in output
    async with database.session() as session:
        stored = (await session.execute(text("SELECT last_error FROM work_items"))).scalar_one()
    assert canary not in stored


def test_a_lone_surrogate_from_input_is_logged_escaped_on_a_strict_utf8_stream() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    root = logging.getLogger()
    level = root.level
    handler = configure_logging(logging.DEBUG, stream=stream)
    try:
        logging.getLogger("better_compute.test").warning("refused the key %s", "\ud800")
    finally:
        root.removeHandler(handler)
        handler.close()
        root.setLevel(level)
        logging.captureWarnings(False)
    assert "refused the key \\ud800" in raw.getvalue().decode("utf-8")
