"""The PyTorch side of Sentinel's checkpoint handshake (optional extra ``torch``; docs/hooks.md).

A training loop calls ``hook.after_step(step)`` at every step boundary. When Sentinel asks for a checkpoint
(SIGUSR1, or the request file in the acknowledgement folder), every rank saves its shard with
torch.distributed.checkpoint at the next boundary, asynchronously where this PyTorch can, and rank 0 writes the
acknowledgement the actuator waits for once the checkpoint is complete. On restart (a requeued job runs its
script again) ``hook.restore()`` loads the latest complete checkpoint and returns the step to resume from.

Ranks agree on when to save through a tiny all-reduce at each boundary (a signal may reach only some of them);
checkpoints travel on their own gloo process group, so a save in the background never interleaves with the
training's collectives. A checkpoint counts only once rank 0 wrote its ``.sentinel-complete`` marker.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import msgspec
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

from sentinel.clock import Clock, SystemClock
from sentinel.hooks import ack

log = logging.getLogger(__name__)

MARKER = ".sentinel-complete"


class TrainState:
    """Model and optimizer as one DCP ``Stateful`` (the optimizer's state is created before loading into it)."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None = None) -> None:
        self.model = model
        self.optimizer = optimizer

    def state_dict(self) -> dict[str, Any]:
        model, optim = get_state_dict(self.model, self.optimizer or [])
        return {"model": model, "optim": optim}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        set_state_dict(self.model, self.optimizer or [], model_state_dict=state["model"],
                       optim_state_dict=state["optim"])


class CheckpointHook:
    def __init__(self, state: dict[str, Any], checkpoint_dir: str | Path, ack_dir: str | Path | None = None,
                 job_id: str | None = None, every_steps: int = 0, signal_name: str = "USR1",
                 async_save: bool = True, keep: int = 2, wait_on_request: bool = True,
                 clock: Clock | None = None) -> None:
        """``state`` maps names to tensors or Stateful objects (``TrainState``); ``ack_dir`` defaults to
        $SENTINEL_ACK_DIR and ``job_id`` to $SLURM_JOB_ID. ``every_steps`` > 0 also saves periodically (in the
        background). A save Sentinel asked for is waited for at its boundary (``wait_on_request``): the job is
        about to be requeued, and steps trained while it is written would be lost with the node.
        Construct it on every rank after ``init_process_group`` (it creates its own process groups)."""
        self.state = state
        self.clock = clock or SystemClock()
        self.dir = Path(checkpoint_dir)
        ack_dir = ack_dir if ack_dir is not None else os.environ.get("SENTINEL_ACK_DIR", "")
        self.ack_dir = Path(ack_dir) if ack_dir else None
        self.job_id = job_id if job_id is not None else os.environ.get("SLURM_JOB_ID", "")
        self.every_steps = every_steps
        self.async_save = async_save and hasattr(dcp, "async_save")
        self.keep = max(keep, 1)
        self.wait_on_request = wait_on_request
        self.rank = dist.get_rank() if dist.is_initialized() else 0
        self.flag_group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        self.save_group = dist.new_group(backend="gloo") if dist.is_initialized() else None
        self.signalled = threading.Event()
        self.pending: tuple[Future[Any], threading.Event] | None = None
        self.saved_step = -1
        last = ack.read_ack(self.ack_dir, self.job_id) if self.ack_dir and self.job_id else None
        self.handled = {last.request_id} if last else set()  # a requeued job must not answer an old request
        try:
            signal.signal(getattr(signal, f"SIG{signal_name}"), lambda *_: self.signalled.set())
        except ValueError:  # not the main thread: no opt-in, so the job is never signalled (it would die of it)
            log.warning("checkpoint hook: cannot install a SIG%s handler outside the main thread", signal_name)
        else:
            if self.rank == 0 and self.ack_dir is not None and self.job_id:
                try:
                    ack.write_ready(self.ack_dir, self.job_id)  # the opt-in: Sentinel may signal this job now
                except ack.HandshakeError as exc:  # a planted file: train on, never signalled (it would die of it)
                    log.error("checkpoint hook: cannot opt in to Sentinel's checkpoint requests: %s", exc)

    # --- restart --------------------------------------------------------------------------------------------------
    def latest(self) -> tuple[int, Path] | None:
        found = [(step, path) for step, path in self._steps() if (path / MARKER).exists()]
        return max(found) if found else None

    def _steps(self) -> list[tuple[int, Path]]:
        return sorted((int(p.name[5:]), p) for p in self.dir.glob("step-*") if p.name[5:].isdigit())

    def restore(self) -> int:
        """Load the latest complete checkpoint into ``state``; return the steps it had completed (0: none)."""
        latest = self.latest()
        if latest is None:
            return 0
        step, path = latest
        dcp.load(self.state, checkpoint_id=str(path), process_group=self.save_group,
                     no_dist=self.save_group is None)
        self.saved_step = step
        log.info("rank %d resumed from %s (step %d)", self.rank, path, step)
        return step

    # --- step boundary --------------------------------------------------------------------------------------------
    def _request(self) -> ack.Request | None:
        if self.rank != 0 or self.ack_dir is None or not self.job_id:
            return None
        request = ack.read_request(self.ack_dir, self.job_id)
        return request if request is not None and request.request_id not in self.handled else None

    def after_step(self, step: int) -> bool:
        """Call with the number of steps completed; returns True when a checkpoint was started here."""
        request = self._request()
        wanted = self.signalled.is_set() or request is not None
        periodic = self.every_steps > 0 and step % self.every_steps == 0
        flag = torch.tensor([int(wanted), int(periodic)], dtype=torch.int32)
        if self.flag_group is not None:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.flag_group)
        if not flag.any():
            return False
        self.signalled.clear()
        request_id = request.request_id if request is not None else ("" if flag[0] else None)
        if request is not None:
            self.handled.add(request.request_id)
        self.save(step, request_id)
        if flag[0] and self.wait_on_request:
            self.wait()  # the job is about to be moved: steps run during the save would be lost anyway
        return True

    def save(self, step: int, request_id: str | None = None) -> None:
        """Save ``state`` as ``step-<step>`` on every rank; acknowledge ``request_id`` when complete."""
        self.wait()
        path = self.dir / f"step-{step:09d}"
        started = self.clock.now()
        if step == self.saved_step and (path / MARKER).exists():
            self._complete(step, path, request_id, started)
            return
        if self.async_save:
            response = dcp.async_save(self.state, checkpoint_id=str(path), process_group=self.save_group,
                     no_dist=self.save_group is None)
            future = response if isinstance(response, Future) else response.upload_completion
            finished = threading.Event()  # set once the marker and ack are written, after the future resolved
            future.add_done_callback(lambda f: self._done(f, step, path, request_id, started, finished))
            self.pending = (future, finished)
        else:
            dcp.save(self.state, checkpoint_id=str(path), process_group=self.save_group,
                     no_dist=self.save_group is None)
            self._complete(step, path, request_id, started)

    def _done(self, future: Future[Any], step: int, path: Path, request_id: str | None, started: float,
              finished: threading.Event) -> None:
        try:
            if future.exception() is not None:
                log.error("checkpoint %s failed: %s", path, future.exception())
                return
            self._complete(step, path, request_id, started)
        finally:
            finished.set()

    def _complete(self, step: int, path: Path, request_id: str | None, started: float) -> None:
        self.saved_step = step
        if self.rank != 0:
            return
        (path / MARKER).write_bytes(msgspec.json.encode({"step": step, "ts": self.clock.now()}))
        if request_id is not None and self.ack_dir is not None and self.job_id:
            try:
                ack.write_ack(self.ack_dir, ack.Ack(request_id=request_id, job_id=self.job_id, step=step,
                                                    checkpoint=str(path), ts=self.clock.now(),
                                                    save_s=self.clock.now() - started))
            except ack.HandshakeError as exc:  # saved, but Sentinel is not told: it drains after its timeout
                log.error("checkpoint hook: saved step %d but cannot acknowledge it: %s", step, exc)
        log.info("checkpoint step %d complete in %.2f s: %s", step, self.clock.now() - started, path)
        for _, old in self._steps()[: -self.keep]:
            shutil.rmtree(old, ignore_errors=True)

    def wait(self) -> None:
        """Block until a save in the background has finished."""
        if self.pending is not None:
            future, finished = self.pending
            self.pending = None
            future.result()
            finished.wait()

    def close(self) -> None:
        self.wait()
