"""MultiWorkerMirroredStrategy with 2 worker processes on localhost (`multi_worker_jobs`): ICT
gives the single-worker losses on the same global batch and only the chief writes; a `kill -9`
of a worker fails the job with a clear message, after which a restart resumes from the last
checkpoint. Pre-training and fine-tuning: `multi_worker_training_test.py`."""
import os
import re
import signal
import time

import numpy as np
import pytest

from multi_worker_jobs import assert_scratch_removed
from multi_worker_jobs import ict_command
from multi_worker_jobs import metrics
from multi_worker_jobs import read
from multi_worker_jobs import run_multi_worker
from multi_worker_jobs import run_single
from multi_worker_jobs import start_workers
from multi_worker_jobs import TIMEOUT_S
from realm_tf import tiny_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))


@pytest.mark.slow
def test_ict_two_workers_match_one_and_only_the_chief_writes(world, tmp_path):
  run_single(ict_command(world, tmp_path / "single", "--num_steps=4", "--checkpoint_every=2"))
  run_multi_worker(ict_command(world, tmp_path / "multi", "--num_steps=4",
                               "--checkpoint_every=2"), tmp_path / "logs")
  single = [m["loss"] for m in metrics(tmp_path / "single" / "metrics.jsonl")]
  multi = [m["loss"] for m in metrics(tmp_path / "multi" / "metrics.jsonl")]
  assert len(single) == len(multi) == 4
  np.testing.assert_allclose(multi, single, rtol=0, atol=1e-4)
  # One writer: one TensorBoard event file, the same outputs as one worker's.
  assert len(os.listdir(tmp_path / "multi" / "train")) == 1
  assert sorted(os.listdir(tmp_path / "multi")) == sorted(os.listdir(tmp_path / "single"))
  assert_scratch_removed(tmp_path / "logs")


@pytest.mark.slow
def test_kill_9_of_a_worker_fails_the_job_clearly_and_a_restart_resumes(world, tmp_path):
  model_dir = tmp_path / "run"
  command = ict_command(world, model_dir, "--num_steps=60", "--checkpoint_every=4")
  processes, logs = start_workers(command, tmp_path / "logs")
  checkpoints = model_dir / "checkpoints"
  deadline = time.time() + TIMEOUT_S
  try:
    while time.time() < deadline and all(p.poll() is None for p in processes):
      if checkpoints.exists() and any(n.startswith("ckpt-8.") for n in os.listdir(checkpoints)):
        break
      time.sleep(0.2)
    assert all(p.poll() is None for p in processes), "the job ended before a worker was killed"
    os.kill(processes[1].pid, signal.SIGKILL)
    processes[0].wait(timeout=TIMEOUT_S)  # the chief fails instead of hanging
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
      process.wait()
  assert processes[0].returncode not in (0, None)
  chief_log = read(logs[0])
  assert re.search(r"WorkerLostError: a worker of this 2-worker job stopped during step \d+ "
                   r".*Restart every worker with the same flags: each resumes from the last "
                   r"checkpoint in ", chief_log), chief_log[-3000:]
  killed_at = max(m["step"] for m in metrics(model_dir / "metrics.jsonl"))
  assert 8 <= killed_at < 60

  texts = run_multi_worker(command, tmp_path / "restart")
  resumed = [int(s) for s in re.findall(r"Resumed from \S+ at step (\d+)", texts[0])]
  assert resumed and resumed[0] >= 8 and resumed == [
      int(s) for s in re.findall(r"Resumed from \S+ at step (\d+)", texts[1])]
  assert [m["step"] for m in metrics(model_dir / "metrics.jsonl")] == list(range(1, 61))
  assert 'model_checkpoint_path: "ckpt-60"' in (checkpoints / "checkpoint").read_text()
