"""MultiWorkerMirroredStrategy with 2 worker processes on localhost (`TF_CONFIG`, free ports):
ICT, REALM pre-training with the asynchronous index refresh and Open-QA fine-tuning give the
single-worker losses on the same global batch, only the chief writes, every worker swaps to the
same index at the same step, and a `kill -9` of a worker fails the job with a clear message,
after which a restart resumes from the last checkpoint."""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from realm_tf import tiny_world

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TIMEOUT_S = 900


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("localhost", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def _env(tf_config=None):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  if tf_config is not None:
    env["TF_CONFIG"] = json.dumps(tf_config)
  return env


def _start_workers(command, log_dir, num_workers=2):
  """Starts `command` as each worker of a `num_workers`-worker job; returns (processes, logs)."""
  workers = [f"localhost:{port}" for port in _free_ports(num_workers)]
  processes, logs = [], []
  for index in range(num_workers):
    logs.append(os.path.join(log_dir, f"worker-{index}.log"))
    env = _env({"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}})
    env["TMPDIR"] = os.path.join(log_dir, f"tmp-{index}")  # where a non-chief's scratch goes
    os.makedirs(env["TMPDIR"], exist_ok=True)
    with open(logs[-1], "w") as log:
      processes.append(subprocess.Popen(
          command + ["--strategy=multi_worker_mirrored"], cwd=ROOT, stdout=log,
          stderr=subprocess.STDOUT, env=env))
  return processes, logs


def _assert_scratch_removed(log_dir):
  """No worker left its scratch output directory behind."""
  for name in os.listdir(log_dir):
    if name.startswith("tmp-"):
      left = [n for n in os.listdir(os.path.join(log_dir, name)) if "realm-tf-worker" in n]
      assert not left, (name, left)


def _read(path):
  with open(path) as f:
    return f.read()


def _wait(processes, logs, timeout=TIMEOUT_S):
  """Waits for every worker; returns their logs after checking they all succeeded."""
  try:
    for process in processes:
      process.wait(timeout=max(1.0, timeout))
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
        process.wait()
  texts = [_read(log) for log in logs]
  for process, text in zip(processes, texts):
    assert process.returncode == 0, text[-3000:]
  return texts


def _run_multi_worker(command, log_dir):
  return _wait(*_start_workers(command, log_dir))


def _run_single(command):
  result = subprocess.run(command, cwd=ROOT, env=_env(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
  assert result.returncode == 0, result.stderr[-3000:]
  return result.stdout + result.stderr


def _metrics(path):
  """The last record of each step of a metrics.jsonl, in step order."""
  by_step = {}
  with open(path) as f:
    for line in f:
      record = json.loads(line)
      by_step[record["step"]] = record
  return [by_step[s] for s in sorted(by_step)]


def _ict_command(world, model_dir, *extra):
  directory, vocab = world
  return [sys.executable, "-m", "realm_tf.ict", f"--corpus={directory}",
          f"--model_dir={model_dir}", f"--vocab_file={vocab}", "--encoder=tiny",
          "--init_weights=", "--dropout=0", "--batch_size=8", "--query_length=16", "--block_length=24",
          "--learning_rate=1e-3", "--seed=3", "--compute_dtype=float32", *extra]


@pytest.mark.slow
def test_ict_two_workers_match_one_and_only_the_chief_writes(world, tmp_path):
  _run_single(_ict_command(world, tmp_path / "single", "--num_steps=4",
                           "--checkpoint_every=2"))
  _run_multi_worker(_ict_command(world, tmp_path / "multi", "--num_steps=4",
                                 "--checkpoint_every=2"), tmp_path / "logs")
  single = [m["loss"] for m in _metrics(tmp_path / "single" / "metrics.jsonl")]
  multi = [m["loss"] for m in _metrics(tmp_path / "multi" / "metrics.jsonl")]
  assert len(single) == len(multi) == 4
  np.testing.assert_allclose(multi, single, rtol=0, atol=1e-4)
  # One writer: one TensorBoard event file, the same outputs as one worker's.
  assert len(os.listdir(tmp_path / "multi" / "train")) == 1
  assert sorted(os.listdir(tmp_path / "multi")) == sorted(os.listdir(tmp_path / "single"))
  _assert_scratch_removed(tmp_path / "logs")


def _pretrain_command(world, model_dir, *extra):
  directory, vocab = world
  return [sys.executable, "-m", "realm_tf.pretrain", f"--corpus_dir={directory}",
          f"--examples_dir={directory}", f"--model_dir={model_dir}", f"--vocab_file={vocab}",
          "--encoder=tiny", "--init_weights=", "--dropout=0", "--batch_size=8",
          "--num_candidates=4", "--query_length=16", "--block_length=24",
          "--learning_rate=1e-3", "--refresh=async", "--index_kind=brute_force", "--seed=3",
          "--compute_dtype=float32", *extra]


def _swaps(log_text):
  """[(step, version)] of the index swaps a worker logged."""
  return re.findall(r"Step (\d+): swapped to index (step-\d+)", log_text)


@pytest.mark.slow
def test_pretraining_two_workers_match_one_and_swap_indexes_together(world, tmp_path):
  flags = ["--num_steps=24", "--checkpoint_every=8"]
  # One worker with the step-0 index throughout, the reference for the steps before a swap.
  _run_single(_pretrain_command(world, tmp_path / "single", *flags, "--refresh=sync",
                                "--refresh_every=24"))
  logs = _run_multi_worker(_pretrain_command(world, tmp_path / "multi", *flags,
                                             "--refresh_every=4"), tmp_path / "logs")
  single = _metrics(tmp_path / "single" / "metrics.jsonl")
  multi = _metrics(tmp_path / "multi" / "metrics.jsonl")
  assert [m["step"] for m in multi] == [m["step"] for m in single] == list(range(1, 25))
  # Equal while both used the same index (when a build finishes decides the first swap, after
  # the first snapshot at step 4).
  same_index = 0
  while same_index < 24 and (single[same_index]["index_snapshot_step"] ==
                             multi[same_index]["index_snapshot_step"]):
    same_index += 1
  assert same_index >= 4
  np.testing.assert_allclose([m["loss"] for m in multi[:same_index]],
                             [m["loss"] for m in single[:same_index]], rtol=0, atol=1e-4)
  chief, other = (_swaps(text) for text in logs)
  assert chief and chief == other, (chief, other)
  for step, version in chief:  # the step after a swap (if any) uses the new index
    assert all(m["index_snapshot_step"] == int(version.split("-")[1])
               for m in multi if m["step"] == int(step) + 1)
  assert len(os.listdir(tmp_path / "multi" / "train")) == 1
  assert set(os.listdir(tmp_path / "multi")) == set(os.listdir(tmp_path / "single")) | {
      "snapshots"}  # the asynchronous refresh's doc-embedder snapshots
  _assert_scratch_removed(tmp_path / "logs")


@pytest.mark.slow
def test_kill_9_of_a_worker_fails_the_job_clearly_and_a_restart_resumes(world, tmp_path):
  model_dir = tmp_path / "run"
  command = _ict_command(world, model_dir, "--num_steps=60", "--checkpoint_every=4")
  processes, logs = _start_workers(command, tmp_path / "logs")
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
  chief_log = _read(logs[0])
  assert re.search(r"WorkerLostError: a worker of this 2-worker job stopped during step \d+ "
                   r".*Restart every worker with the same flags: each resumes from the last "
                   r"checkpoint in ", chief_log), chief_log[-3000:]
  killed_at = max(m["step"] for m in _metrics(model_dir / "metrics.jsonl"))
  assert 8 <= killed_at < 60

  texts = _run_multi_worker(command, tmp_path / "restart")
  resumed = [int(s) for s in re.findall(r"Resumed from \S+ at step (\d+)", texts[0])]
  assert resumed and resumed[0] >= 8 and resumed == [
      int(s) for s in re.findall(r"Resumed from \S+ at step (\d+)", texts[1])]
  assert [m["step"] for m in _metrics(model_dir / "metrics.jsonl")] == list(range(1, 61))
  assert 'model_checkpoint_path: "ckpt-60"' in (checkpoints / "checkpoint").read_text()


def _finetune_command(world, model_dir, *extra):
  sizes = [f"--{k}={v}" for k, v in tiny_world.MODEL_FLAGS.items()]
  return [sys.executable, "-m", "realm_tf.finetune", f"--model_dir={model_dir}",
          f"--corpus={world.corpus}", f"--train_data={world.train}",
          f"--vocab_file={world.vocab_file}", "--encoder=tiny",
          "--dropout=0", *sizes, "--batch_size=4", "--learning_rate=3e-3",
          "--warmup_steps=1", "--retriever_top_k=16", "--index_kind=brute_force",
          "--log_every=1", "--checkpoint_every=2", "--seed=3", "--compute_dtype=float32",
          "--embedding_dtype=float32", *extra]


@pytest.mark.slow
def test_finetuning_two_workers_match_one_and_only_the_chief_writes(tmp_path):
  world = tiny_world.write_open_qa(str(tmp_path / "world"))
  _run_single(_finetune_command(world, tmp_path / "single", "--num_steps=4"))
  _run_multi_worker(_finetune_command(world, tmp_path / "multi", "--num_steps=4"),
                    tmp_path / "logs")
  single = _metrics(tmp_path / "single" / "metrics.jsonl")
  multi = _metrics(tmp_path / "multi" / "metrics.jsonl")
  assert [m["step"] for m in multi] == [m["step"] for m in single] == [1, 2, 3, 4]
  np.testing.assert_allclose([m["loss"] for m in multi], [m["loss"] for m in single],
                             rtol=0, atol=1e-4)
  assert len(os.listdir(tmp_path / "multi" / "train")) == 1
  assert sorted(os.listdir(tmp_path / "multi")) == sorted(os.listdir(tmp_path / "single"))
  _assert_scratch_removed(tmp_path / "logs")
