"""The `realm-pretrain` binary: MirroredStrategy on 2 logical CPUs matches the default strategy,
and a `kill -9` at any moment resumes from the last checkpoint and finishes the run."""
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from multi_worker_jobs import env
from multi_worker_jobs import metrics
from multi_worker_jobs import pretrain_command
from multi_worker_jobs import ROOT
from multi_worker_jobs import TIMEOUT_S
from multi_worker_jobs import run_single
from realm_tf import tiny_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))


def _command(world, model_dir, *extra):
  return pretrain_command(world, model_dir, "--refresh=sync", "--refresh_every=5", *extra)


@pytest.mark.slow
def test_mirrored_strategy_matches_single_device(world, tmp_path):
  run_single(_command(world, tmp_path / "single", "--num_steps=6"))
  run_single(_command(world, tmp_path / "mirrored", "--num_steps=6", "--strategy=mirrored",
                      "--num_cpu_devices=2"))
  single = [m["loss"] for m in metrics(tmp_path / "single" / "metrics.jsonl")]
  mirrored = [m["loss"] for m in metrics(tmp_path / "mirrored" / "metrics.jsonl")]
  assert len(single) == len(mirrored) == 6
  np.testing.assert_allclose(mirrored, single, rtol=1e-3, atol=1e-4)


@pytest.mark.slow
def test_kill_9_then_restart_resumes_and_finishes(world, tmp_path):
  model_dir = tmp_path / "run"
  process = subprocess.Popen(_command(world, model_dir, "--num_steps=40", "--checkpoint_every=4"),
                             cwd=ROOT, env=env(), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.time() + TIMEOUT_S  # only a hang fails here: the loop waits for ckpt-8
  checkpoints = model_dir / "checkpoints"
  while time.time() < deadline and process.poll() is None:
    if checkpoints.exists() and any(n.startswith("ckpt-8.") for n in os.listdir(checkpoints)):
      break
    time.sleep(0.2)
  assert process.poll() is None, "the run ended before it could be killed"
  os.kill(process.pid, signal.SIGKILL)
  process.wait()
  killed_at = max(m["step"] for m in metrics(model_dir / "metrics.jsonl"))
  assert 8 <= killed_at < 40
  run_single(_command(world, model_dir, "--num_steps=40", "--checkpoint_every=4"))
  records = metrics(model_dir / "metrics.jsonl")
  assert [m["step"] for m in records] == list(range(1, 41))
  assert all(np.isfinite(m["loss"]) for m in records)
  state = (checkpoints / "checkpoint").read_text()
  assert 'model_checkpoint_path: "ckpt-40"' in state
