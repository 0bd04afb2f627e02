"""One process per SQLite file: a lock file beside the database, unless the operator opts in.

SQLite serves one process. A second one on the same file works at the SQL level, but
what the first does in process (pushing assignment changes to connected nodes, the
write lock that orders bookings) silently misses the second's writes. So opening a
SQLite file takes `<file>.lock` with `flock`, held until the Database is disposed or
the process ends (the kernel drops it then, even after a crash). Databases of one
process share the lock. `BC_SQLITE_SHARED=1` lets a second process in anyway.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from better_compute.core.errors import ComputeError, ErrorCode

__all__ = ["SHARED_ENV", "claim", "release"]

SHARED_ENV = "BC_SQLITE_SHARED"

_held: dict[Path, tuple[int, int]] = {}  # database file -> (lock file descriptor, Databases holding it)


def claim(database_file: Path) -> Path | None:
    """Take the file's lock for this process; returns the key to `release`, or None when not locked."""
    if os.environ.get(SHARED_ENV) == "1":
        return None
    key = database_file.resolve()
    if key in _held:
        fd, count = _held[key]
        _held[key] = (fd, count + 1)
        return key
    lock_path = key.with_name(key.name + ".lock")
    try:
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    except OSError:  # a directory we cannot write to: the driver will say what is wrong
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise ComputeError(
            ErrorCode.INVALID_STATE,
            f"another process (pid {holder}) has the SQLite database {key} open; SQLite serves one process: "
            f"stop it, use a postgresql:// database for several, or set {SHARED_ENV}=1 to share the file anyway",
        ) from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, str(os.getpid()).encode(), 0)
    _held[key] = (fd, 1)
    return key


def release(key: Path | None) -> None:
    """Let go of one claim; the last one of the process unlocks the file."""
    if key is None or key not in _held:
        return
    fd, count = _held[key]
    if count > 1:
        _held[key] = (fd, count - 1)
        return
    del _held[key]
    os.close(fd)
