"""Fuzzed invocations of `better-compute`: any arguments, files, stdin and environment give an exit status
and at most a few lines, never a traceback or an internal error (exit 70)."""

from __future__ import annotations

import asyncio
import io
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from typer._click.core import Command, Context
from typer.core import TyperGroup

from better_compute.cli.main import app, main
from better_compute.server import better_compute

SECRET = "a-fuzz-test-secret-of-at-least-32-characters"
SKIPPED = {"serve", "demo"}  # serve listens until stopped; demo takes seconds and no input


def _commands(command: Command, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    if isinstance(command, TyperGroup):
        ctx = Context(command)
        found = []
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and name not in SKIPPED:
                found.extend(_commands(sub, (*path, name)))
        return found
    return [path]


COMMANDS = _commands(typer.main.get_command(app))


@pytest.fixture(scope="module")
def place(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated database with a tenant, an empty one, and files of every kind."""
    root = tmp_path_factory.mktemp("fuzz")

    async def prepare() -> None:
        compute = better_compute(database=f"sqlite:///{root / 'ready.db'}", secret=SECRET)
        try:
            await compute.migrate()
            await compute.iam.create_tenant("acme")
        finally:
            await compute.close()

    asyncio.run(prepare())
    (root / "doc.json").write_text('{"version": 1, "sites": [{"name": "k8s", "kind": "shared", "region": "tor1"}]}')
    (root / "list.json").write_text("[]")
    (root / "bad.json").write_text('{"version": ')
    (root / "binary").write_bytes(bytes(range(256)))
    (root / "empty").write_text("")
    (root / "dir").mkdir()
    return root


FILES = ["doc.json", "list.json", "bad.json", "binary", "empty", "dir", "missing", "-"]
VALUED = ["--tenant", "--pool", "--gpus", "--state", "--from-file", "--out", "--plan-file", "--app"]
SWITCHES = ["--json", "--json", "--yes", "--prune", "--spot", "--archived", "--retired", "--help", "--no-such"]
WORDS = ["acme", "nobody", "gpu-fleet", "0", "-1", "99999999999", "active", "secret://x/y", "sec_x", "", "é", "\x00"]


def _urls(place: Path) -> list[str | None]:
    return [
        f"sqlite:///{place / 'ready.db'}",
        f"sqlite:///{place / 'fresh.db'}",
        f"sqlite:///{place / 'no' / 'dir.db'}",
        "postgresql://postgres@127.0.0.1:9/none",
        "mysql://x",
        "::not a url::",
        None,
    ]


@contextmanager
def environment(values: dict[str, str | None]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in values}
    try:
        for name, value in values.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@contextmanager
def working_directory(path: Path) -> Iterator[None]:
    """Run in `path`, so that nothing an invocation writes lands in the checkout."""
    saved = Path.cwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(saved)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_fuzzed_invocations_never_trace_back(place: Path, data: st.DataObject) -> None:
    command = list(data.draw(st.sampled_from(COMMANDS)))
    word = st.one_of(
        st.sampled_from(WORDS),
        st.sampled_from(FILES).map(lambda name: name if name == "-" else str(place / name)),
        st.text(max_size=12),
    )
    option = st.one_of(
        st.tuples(st.sampled_from(VALUED), word).map(list),
        st.sampled_from(SWITCHES).map(lambda switch: [switch]),
        word.map(lambda positional: [positional]),
    )
    extra = [part for parts in data.draw(st.lists(option, max_size=3)) for part in parts]
    env = {
        "BC_DATABASE_URL": data.draw(st.sampled_from(_urls(place))),
        "BC_SECRET": data.draw(st.sampled_from([SECRET, "short", None])),
        "BC_TENANT": data.draw(st.sampled_from(["acme", "nobody", None])),
        "BC_DATA_DIR": str(place / "data"),
        "BC_APP": data.draw(st.sampled_from([None, None, None, "nope:nothing", "os:path"])),
        "COLUMNS": None,
    }
    stdin = data.draw(st.sampled_from(["", "y\n", "n\n", "value\n", '{"version": 1}', "[]"]))
    stdout, stderr = io.StringIO(), io.StringIO()
    cwd = place / "cwd"
    cwd.mkdir(exist_ok=True)
    with environment(env), working_directory(cwd), redirect_stdout(stdout), redirect_stderr(stderr):
        saved_stdin, sys.stdin = sys.stdin, io.StringIO(stdin)
        try:
            code = main([*command, *extra])
        finally:
            sys.stdin = saved_stdin
    output = stdout.getvalue() + stderr.getvalue()
    event(f"exit {code}")
    assert "Traceback" not in output, (command, extra, env, output)
    assert code in (0, 1, 2, 3, 130), (command, extra, env, code, output)
    assert not (cwd / "::not a url::").exists(), "a database that is not a URL became a file"
