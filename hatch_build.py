"""Build hook: generate the protobuf stubs from the .proto files at build time.

The kubelet device plugin API (messages and gRPC services) and the Kubernetes messages the
API emulator decodes (messages only). The generated files (`*_pb2.py`, `*_pb2_grpc.py` and
their `.pyi`) are not committed: the .proto is the source, and every build, `pip install -e .` included, writes the stubs next to
it with grpcio-tools' bundled protoc and mypy-protobuf's plugins (both in
`[build-system] requires`). The wheel carries them as artifacts, since .gitignore hides them.
To regenerate them in a working tree: `pip install -e . --no-deps`.
"""

from __future__ import annotations

import stat
import sys
import tempfile
from pathlib import Path
from typing import Any

from hatchling.builders.hooks.plugin.interface import BuildHookInterface

SOURCE_ROOT = Path("src")
_KUBE = Path("better_compute/testing/kube/proto")
# each .proto, and whether it declares gRPC services (then the _grpc stubs are generated too)
PROTOS: dict[Path, bool] = {
    Path("better_compute/bcd/proto/deviceplugin_v1beta1.proto"): True,
    **{
        _KUBE / f"{name}.proto": False
        for name in ("meta", "core", "apps", "admissionregistration", "rbac", "authentication", "authorization", "policy")
    },
}
SUFFIXES = ["_pb2.py", "_pb2.pyi"]
GRPC_SUFFIXES = ["_pb2_grpc.py", "_pb2_grpc.pyi"]


def _plugin(directory: Path, name: str, function: str) -> Path:
    """An executable protoc plugin that runs mypy-protobuf with this interpreter.

    protoc needs a program on disk; the console scripts of an isolated build
    environment are not always on PATH, so the hook writes its own.
    """
    path = directory / f"protoc-gen-{name}"
    path.write_text(f"#!{sys.executable}\nfrom mypy_protobuf.main import {function}\n{function}()\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


def generate(root: Path) -> list[Path]:
    """Run protoc over every .proto; returns the files written, relative to `root`."""
    from grpc_tools import protoc

    source = root / SOURCE_ROOT
    written: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="bc-protoc-") as tmp:
        mypy = _plugin(Path(tmp), "mypy", "main")
        mypy_grpc = _plugin(Path(tmp), "mypy_grpc", "grpc")
        for proto, services in PROTOS.items():
            args = [
                "grpc_tools.protoc",
                f"--proto_path={source}",
                f"--plugin=protoc-gen-mypy={mypy}",
                f"--python_out={source}",
                f"--mypy_out={source}",
            ]
            if services:
                args += [
                    f"--plugin=protoc-gen-mypy_grpc={mypy_grpc}",
                    f"--grpc_python_out={source}",
                    f"--mypy_grpc_out={source}",
                ]
            if protoc.main([*args, str(source / proto)]) != 0:
                raise RuntimeError(f"protoc failed on {proto}")
            stem = str(proto.with_suffix(""))
            suffixes = SUFFIXES + GRPC_SUFFIXES if services else SUFFIXES
            written.extend(SOURCE_ROOT / f"{stem}{suffix}" for suffix in suffixes)
    missing = [str(p) for p in written if not (root / p).is_file()]
    if missing:
        raise RuntimeError(f"protoc did not write {', '.join(missing)}")
    return written


class CustomBuildHook(BuildHookInterface[Any]):
    """Generates the stubs for every target (wheel, editable wheel, sdist)."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        written = generate(Path(self.root))
        build_data.setdefault("artifacts", []).extend(p.as_posix() for p in written)
