"""The PyTorch checkpoint hook in one process (no Slurm): it answers a request with a complete checkpoint and the
matching acknowledgement, resumes from the latest checkpoint, and never answers an old request twice.
(Two ranks over gloo, under Slurm, run in tests/test_slurm_e2e.py.)"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import torch

from sentinel.hooks import ack
from sentinel.hooks.torch import MARKER, CheckpointHook, TrainState

# One process without a process group: DCP says it assumes a single process, which is the point here.
pytestmark = pytest.mark.filterwarnings("ignore:torch.distributed is disabled:UserWarning")


def make(tmp_path: Path, seed: int, **kw: object) -> tuple[torch.nn.Module, torch.optim.Optimizer, CheckpointHook]:
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2)
    optim = torch.optim.AdamW(model.parameters(), lr=0.1)
    hook = CheckpointHook({"train": TrainState(model, optim)}, tmp_path / "ckpt", ack_dir=tmp_path / "ack",
                          job_id="42", **kw)  # type: ignore[arg-type]
    return model, optim, hook


def train(model: torch.nn.Module, optim: torch.optim.Optimizer) -> None:
    loss = model(torch.ones(3, 4)).pow(2).sum()
    optim.zero_grad()
    loss.backward()
    optim.step()


def test_a_request_file_gets_a_complete_checkpoint_and_the_matching_ack(tmp_path: Path) -> None:
    model, optim, hook = make(tmp_path, seed=0)
    train(model, optim)
    assert hook.after_step(1) is False  # nothing asked: nothing saved
    ack.write_request(tmp_path / "ack", ack.Request(request_id="r-1", job_id="42", ts=1.0))
    train(model, optim)
    assert hook.after_step(2) is True
    answer = ack.read_ack(tmp_path / "ack", "42")  # a requested save is complete when the boundary returns
    assert answer is not None and answer.request_id == "r-1" and answer.step == 2
    assert (Path(answer.checkpoint) / MARKER).exists()
    train(model, optim)
    assert hook.after_step(3) is False  # the same request is answered once


def test_restore_loads_the_latest_checkpoint_into_a_fresh_model_and_optimizer(tmp_path: Path) -> None:
    model, optim, hook = make(tmp_path, seed=0, every_steps=2, keep=1)
    for step in range(1, 5):
        train(model, optim)
        hook.after_step(step)
    hook.close()
    assert [p.name for p in (tmp_path / "ckpt").iterdir()] == ["step-000000004"]  # keep=1 pruned step 2

    fresh, fresh_optim, restarted = make(tmp_path, seed=1)
    assert not torch.equal(fresh.weight, model.weight)
    assert restarted.restore() == 4
    assert torch.equal(fresh.weight, model.weight) and torch.equal(fresh.bias, model.bias)
    assert fresh_optim.state_dict()["state"][0]["step"] == optim.state_dict()["state"][0]["step"]


def test_a_restarted_job_does_not_answer_the_request_its_previous_run_answered(tmp_path: Path) -> None:
    model, optim, hook = make(tmp_path, seed=0)
    ack.write_request(tmp_path / "ack", ack.Request(request_id="r-1", job_id="42", ts=1.0))
    train(model, optim)
    assert hook.after_step(1) is True
    hook.close()
    _, _, restarted = make(tmp_path, seed=0)  # the request file is still there (the actuator had not cleared it)
    assert restarted.restore() == 1
    assert restarted.after_step(2) is False


def test_sigusr1_asks_for_a_checkpoint_at_the_next_step_boundary(tmp_path: Path) -> None:
    model, optim, hook = make(tmp_path, seed=0, async_save=False)
    os.kill(os.getpid(), signal.SIGUSR1)
    train(model, optim)
    assert hook.after_step(7) is True
    assert (tmp_path / "ckpt" / "step-000000007" / MARKER).exists()
    answer = ack.read_ack(tmp_path / "ack", "42")
    assert answer is not None and answer.request_id == "" and answer.step == 7  # a signal without a request file
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)
