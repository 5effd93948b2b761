"""The checkpoint handshake between the actuator and a job, as two small files in a shared directory.

A job opts in first: its hook writes ``<dir>/<job>.ready`` when it starts; a job without it is never signalled
(the signal's default action would kill it). The actuator writes ``<dir>/requests/<job>.request`` (a fresh
``request_id``; ``requests/`` is created and owned by the actuator and writable by nobody else, so no one can
plant or block a request there), then signals the job (``scancel --signal=USR1 --batch``). The job's hook sees
the signal or the file at its next step boundary, saves a checkpoint, and writes ``<dir>/<job>.ack`` carrying the
same ``request_id``; the actuator waits for exactly that id, so an old acknowledgement (a previous request, a
previous run of a requeued job) never counts. Files are written to a temporary name and renamed, so a reader sees
a whole file or none; a file planted under a name the writer cannot replace is a ``HandshakeError`` that says so.
The directory must be shared by the actuator's host and the job's nodes (it usually sits beside the checkpoints,
on the shared filesystem).
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


REQUESTS = "requests"  # the actuator's own subfolder of the handshake folder


class HandshakeError(Exception):
    """A handshake file cannot be written or trusted (a file planted under its name, a folder someone else owns):
    the message names the path, its owner and what to do."""


def _path(directory: str | Path, job_id: str, suffix: str) -> Path:
    if not SAFE_JOB.match(job_id):
        raise ValueError(f"job id {job_id!r} cannot name an acknowledgement file")
    return Path(directory) / f"{job_id}.{suffix}"


def request_path(directory: str | Path, job_id: str) -> Path:
    return _path(Path(directory) / REQUESTS, job_id, "request")


def own_requests_folder(directory: str | Path) -> Path:
    """Create ``<dir>/requests`` (mode 0755) for the actuator, or check the one there: a real folder of this
    process's user that nobody else may write. Raise ``HandshakeError`` otherwise (someone planted it)."""
    folder = Path(directory) / REQUESTS
    try:
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        info = os.lstat(folder)
    except OSError as exc:
        raise HandshakeError(f"cannot create the request folder {folder}: {exc.strerror}") from None
    if not stat.S_ISDIR(info.st_mode):
        raise HandshakeError(f"{folder} is not a folder (planted?); remove it so the actuator can create its own")
    if info.st_uid != os.geteuid() or stat.S_IMODE(info.st_mode) & 0o022:
        raise HandshakeError(
            f"{folder} belongs to uid {info.st_uid} with mode {stat.S_IMODE(info.st_mode):04o}; the actuator "
            f"(uid {os.geteuid()}) must own it and nobody else may write it: remove it and let the actuator make it")
    return folder


def ack_path(directory: str | Path, job_id: str) -> Path:
    return _path(directory, job_id, "ack")


def _planted(path: Path) -> str | None:
    """Why ``path`` is not ours to replace (not a regular file, or another user's), or None (absent or ours)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if not stat.S_ISREG(info.st_mode):
        return f"{path} exists and is not a regular file"
    if info.st_uid != os.geteuid():
        return f"{path} belongs to uid {info.st_uid}, not to this job's user (uid {os.geteuid()})"
    return None


def _write(path: Path, record: msgspec.Struct) -> None:
    """Write ``record`` to ``path`` whole (a temporary name, then a rename); ``HandshakeError`` when a file planted
    under that name cannot be replaced, or the folder cannot be written."""
    why = _planted(path)
    if why is not None:
        raise HandshakeError(f"{why}: planted? remove it (an administrator may need to) and try again")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    except OSError as exc:
        raise HandshakeError(f"cannot write {path}: {exc.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(msgspec.json.encode(record))
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise HandshakeError(f"cannot write {path}: {exc.strerror}") from None
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
    why = _planted(path)
    if why is not None:
        raise HandshakeError(f"{why}: planted? this job cannot opt in to checkpoint requests until it is removed")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError as exc:
        raise HandshakeError(f"cannot write {path}: {exc.strerror}") from None


def is_ready(directory: str | Path, job_id: str, owner: int | None = None) -> bool:
    """Whether the job opted in: ``<job>.ready`` is a regular file (a symlink is not followed) and, with
    ``owner``, the job's user wrote it."""
    try:
        info = os.lstat(ready_path(directory, job_id))
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and (owner is None or info.st_uid == owner)


def write_request(directory: str | Path, request: Request) -> None:
    """The actuator's request, in its own folder (``own_requests_folder`` checks it first)."""
    own_requests_folder(directory)
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
