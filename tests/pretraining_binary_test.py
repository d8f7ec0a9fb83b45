"""The `realm-pretrain` binary: MirroredStrategy on 2 logical CPUs matches the default strategy,
and a `kill -9` at any moment resumes from the last checkpoint and finishes the run."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from realm_tf import tiny_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))


def _command(world, model_dir, *extra):
  directory, vocab = world
  return [sys.executable, "-m", "realm_tf.pretrain", f"--corpus_dir={directory}",
          f"--examples_dir={directory}", f"--model_dir={model_dir}", f"--vocab_file={vocab}",
          "--encoder=tiny", "--init_weights=", "--dropout=0", "--batch_size=8",
          "--num_candidates=4", "--query_length=16", "--block_length=24",
          "--learning_rate=1e-3", "--refresh=sync", "--refresh_every=5",
          "--index_kind=brute_force", "--seed=3", *extra]


def _run(command, timeout=900):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)
  assert result.returncode == 0, result.stderr[-3000:]
  return result


def _metrics(model_dir):
  by_step = {}
  with open(os.path.join(model_dir, "metrics.jsonl")) as f:
    for line in f:
      record = json.loads(line)
      by_step[record["step"]] = record
  return [by_step[s] for s in sorted(by_step)]


@pytest.mark.slow
def test_mirrored_strategy_matches_single_device(world, tmp_path):
  _run(_command(world, tmp_path / "single", "--num_steps=6"))
  _run(_command(world, tmp_path / "mirrored", "--num_steps=6", "--strategy=mirrored",
                "--num_cpu_devices=2"))
  single = [m["loss"] for m in _metrics(tmp_path / "single")]
  mirrored = [m["loss"] for m in _metrics(tmp_path / "mirrored")]
  assert len(single) == len(mirrored) == 6
  np.testing.assert_allclose(mirrored, single, rtol=1e-3, atol=1e-4)


@pytest.mark.slow
def test_kill_9_then_restart_resumes_and_finishes(world, tmp_path):
  model_dir = tmp_path / "run"
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  process = subprocess.Popen(_command(world, model_dir, "--num_steps=24", "--checkpoint_every=4"),
                             cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
  deadline = time.time() + 240
  checkpoints = model_dir / "checkpoints"
  while time.time() < deadline and process.poll() is None:
    if checkpoints.exists() and any(n.startswith("ckpt-8.") for n in os.listdir(checkpoints)):
      break
    time.sleep(0.2)
  assert process.poll() is None, "the run ended before it could be killed"
  os.kill(process.pid, signal.SIGKILL)
  process.wait()
  killed_at = max(m["step"] for m in _metrics(model_dir))
  assert 8 <= killed_at < 24
  _run(_command(world, model_dir, "--num_steps=24", "--checkpoint_every=4"))
  metrics = _metrics(model_dir)
  assert [m["step"] for m in metrics] == list(range(1, 25))
  assert all(np.isfinite(m["loss"]) for m in metrics)
  state = (checkpoints / "checkpoint").read_text()
  assert 'model_checkpoint_path: "ckpt-24"' in state
