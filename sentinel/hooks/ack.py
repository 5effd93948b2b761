"""The checkpoint handshake between the actuator and a job, as two small files in a shared directory.

A job opts in first: its hook writes ``<dir>/<job>.ready`` when it starts; a job without it is never signalled
(the signal's default action would kill it). The actuator writes ``<dir>/<job>.request`` (a fresh ``request_id``),
then signals the job (``scancel
--signal=USR1 --batch``). The job's hook sees the signal or the file at its next step boundary, saves a
checkpoint, and writes ``<dir>/<job>.ack`` carrying the same ``request_id``; the actuator waits for exactly that
id, so an old acknowledgement (a previous request, a previous run of a requeued job) never counts. Files are
written to a temporary name and renamed, so a reader sees a whole file or none. The directory must be shared by
the actuator's host and the job's nodes (it usually sits beside the checkpoints, on the shared filesystem).
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from pathlib import Path
from typing import TypeVar

import msgspec

SAFE_JOB = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,127}\Z")  # becomes a file name: no dots, no slashes
T = TypeVar("T", bound=msgspec.Struct)
MAX_BYTES = 64 * 1024  # a request or an acknowledgement is a few hundred bytes


class Request(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str
    job_id: str
    ts: float  # when the actuator asked (seconds since the epoch)
    node: str = ""
    reason: str = ""


class Ack(msgspec.Struct, frozen=True, kw_only=True):
    request_id: str  # "" when the job saved on a signal that came without a request file
    job_id: str
    step: int  # training steps completed when the checkpoint was taken
    checkpoint: str  # where it is
    ts: float  # when the save completed
    save_s: float = 0.0  # how long the save took


def _path(directory: str | Path, job_id: str, suffix: str) -> Path:
    if not SAFE_JOB.match(job_id):
        raise ValueError(f"job id {job_id!r} cannot name an acknowledgement file")
    return Path(directory) / f"{job_id}.{suffix}"


def request_path(directory: str | Path, job_id: str) -> Path:
    return _path(directory, job_id, "request")


def ack_path(directory: str | Path, job_id: str) -> Path:
    return _path(directory, job_id, "ack")


def _write(path: Path, record: msgspec.Struct) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.encode(record))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _read(path: Path, kind: type[T], owner: int | None = None) -> T | None:
    """The record in ``path``, or None when it is absent, torn, or not a regular file of its own: a symlink is not
    followed, a FIFO or a directory planted under the name is neither waited on nor read, and when ``owner`` is
    given a file of any other user does not count (issue 19)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:  # absent, a symlink (ELOOP), or unreadable
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or (owner is not None and info.st_uid != owner):
            return None
        data = os.read(fd, MAX_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        return msgspec.json.decode(data, type=kind)
    except msgspec.DecodeError:  # torn by a writer that did not rename, or not ours
        return None


def ready_path(directory: str | Path, job_id: str) -> Path:
    return _path(directory, job_id, "ready")


def write_ready(directory: str | Path, job_id: str) -> None:
    """The job's opt-in: its hook is installed and answers checkpoint requests (a signal then saves, not kills)."""
    path = ready_path(directory, job_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch()


def is_ready(directory: str | Path, job_id: str, owner: int | None = None) -> bool:
    """Whether the job opted in: ``<job>.ready`` is a regular file (a symlink is not followed) and, with
    ``owner``, the job's user wrote it."""
    try:
        info = os.lstat(ready_path(directory, job_id))
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and (owner is None or info.st_uid == owner)


def write_request(directory: str | Path, request: Request) -> None:
    _write(request_path(directory, request.job_id), request)


def read_request(directory: str | Path, job_id: str) -> Request | None:
    return _read(request_path(directory, job_id), Request)


def clear_request(directory: str | Path, job_id: str) -> None:
    request_path(directory, job_id).unlink(missing_ok=True)


def write_ack(directory: str | Path, ack: Ack) -> None:
    _write(ack_path(directory, ack.job_id), ack)


def read_ack(directory: str | Path, job_id: str, owner: int | None = None) -> Ack | None:
    """The job's acknowledgement; with ``owner`` (the job's uid), only a file that user wrote."""
    return _read(ack_path(directory, job_id), Ack, owner)
