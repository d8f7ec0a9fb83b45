"""MultiWorkerMirroredStrategy with 2 worker processes on localhost (`multi_worker_jobs`):
REALM pre-training with the asynchronous index refresh and Open-QA fine-tuning give the
single-worker losses on the same global batch, only the chief writes, and every worker swaps to
the same index at the same step. The staleness is bounded (`--max_index_staleness`), so a swap
happens however slow the host: the test waits for what it asserts."""
import os
import re
import sys

import numpy as np
import pytest

from multi_worker_jobs import assert_scratch_removed
from multi_worker_jobs import metrics
from multi_worker_jobs import pretrain_command
from multi_worker_jobs import run_multi_worker
from multi_worker_jobs import run_single
from realm_tf import tiny_world


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  return tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))


def _pretrain_command(world, model_dir, *extra):
  return pretrain_command(world, model_dir, "--refresh=async", "--compute_dtype=float32", *extra)


def _swaps(log_text):
  """[(step, version)] of the index swaps a worker logged."""
  return re.findall(r"Step (\d+): swapped to index (step-\d+)", log_text)


@pytest.mark.slow
def test_pretraining_two_workers_match_one_and_swap_indexes_together(world, tmp_path):
  flags = ["--num_steps=24", "--checkpoint_every=8"]
  # One worker with the step-0 index throughout, the reference for the steps before a swap.
  run_single(_pretrain_command(world, tmp_path / "single", *flags, "--refresh=sync",
                               "--refresh_every=24"))
  logs = run_multi_worker(_pretrain_command(world, tmp_path / "multi", *flags,
                                            "--refresh_every=4", "--max_index_staleness=8"),
                         tmp_path / "logs")
  single = metrics(tmp_path / "single" / "metrics.jsonl")
  multi = metrics(tmp_path / "multi" / "metrics.jsonl")
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
  assert int(chief[0][0]) <= 9  # the step-4 build, waited for once the index is 9 steps old
  assert all(m["index_staleness"] <= 9 for m in multi)  # a step's staleness counts itself
  for step, version in chief:  # the step after a swap (if any) uses the new index
    assert all(m["index_snapshot_step"] == int(version.split("-")[1])
               for m in multi if m["step"] == int(step) + 1)
  assert len(os.listdir(tmp_path / "multi" / "train")) == 1
  assert set(os.listdir(tmp_path / "multi")) == set(os.listdir(tmp_path / "single")) | {
      "snapshots"}  # the asynchronous refresh's doc-embedder snapshots
  assert_scratch_removed(tmp_path / "logs")


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
  run_single(_finetune_command(world, tmp_path / "single", "--num_steps=4"))
  run_multi_worker(_finetune_command(world, tmp_path / "multi", "--num_steps=4"),
                   tmp_path / "logs")
  single = metrics(tmp_path / "single" / "metrics.jsonl")
  multi = metrics(tmp_path / "multi" / "metrics.jsonl")
  assert [m["step"] for m in multi] == [m["step"] for m in single] == [1, 2, 3, 4]
  np.testing.assert_allclose([m["loss"] for m in multi], [m["loss"] for m in single],
                             rtol=0, atol=1e-4)
  assert len(os.listdir(tmp_path / "multi" / "train")) == 1
  assert sorted(os.listdir(tmp_path / "multi")) == sorted(os.listdir(tmp_path / "single"))
  assert_scratch_removed(tmp_path / "logs")
