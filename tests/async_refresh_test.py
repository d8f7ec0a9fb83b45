"""Asynchronous index refresh: the builder runs in its own process, the trainer never waits,
and a builder killed mid-build leaves the previous index in use and recovers next time."""
import os
import sys

import numpy as np
import pytest

from realm_tf import tiny_world
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.index_builder import Sharding
from realm_tf.mips.sharded_index import ShardedIndex
from realm_tf.retrieval.async_refresh import AsynchronousRefresher
import tiny_models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tiny_refresher(tmp_path, refresher_class, **kwargs):
  """A started refresher (a snapshot every 5 steps) over the tiny world, and its retriever."""
  store, tok = tiny_world.write_pipeline(str(tmp_path / "corpus"))
  retriever = tiny_models.retriever()
  refresher = refresher_class(
      str(tmp_path / "index"), 5, store, (tok.cls_id, tok.sep_id, tok.pad_id),
      corpus_dir=str(tmp_path / "corpus"), snapshot_root=str(tmp_path / "snapshots"),
      kind="brute_force", block_length=24, **kwargs)
  refresher.start(0, retriever)
  return refresher, retriever


@pytest.mark.slow
def test_async_refresh_swaps_without_waiting_and_survives_a_killed_builder(tmp_path,
                                                                           monkeypatch):
  monkeypatch.setenv("PYTHONPATH", ROOT)
  refresher, retriever = _tiny_refresher(tmp_path, AsynchronousRefresher)
  assert refresher.version == "step-00000000"

  assert not refresher.maybe_refresh(5, retriever)  # snapshot + builder launched
  # The trainer did not wait: the builder (a Python process importing TensorFlow and Beam) is
  # still running and the step-0 index is still the published one. (No wall-clock bound: the
  # machine may be loaded.)
  builder = refresher._builder  # pylint: disable=protected-access
  assert builder.poll() is None, "the trainer waited for the builder"
  assert index_publisher.latest_version(str(tmp_path / "index")) == "step-00000000"
  refresher.wait(timeout=600)
  assert refresher.maybe_refresh(6, retriever)
  assert (refresher.version, refresher.snapshot_step) == ("step-00000005", 5)

  assert not refresher.maybe_refresh(10, retriever)
  refresher._builder.kill()  # pylint: disable=protected-access
  refresher.wait(timeout=900)
  assert not refresher.maybe_refresh(11, retriever)
  assert refresher.version == "step-00000005"  # the previous index stays in use
  assert index_publisher.latest_version(str(tmp_path / "index")) == "step-00000005"

  refresher.maybe_refresh(15, retriever)  # a new builder recovers
  refresher.wait(timeout=600)
  assert refresher.maybe_refresh(16, retriever)
  assert refresher.version == "step-00000015"
  refresher.close()
  assert not [n for n in os.listdir(tmp_path / "index") if ".tmp-" in n and
              n.startswith("step-00000015")]


@pytest.mark.slow
def test_async_refresh_publishes_and_swaps_in_a_sharded_index(tmp_path, monkeypatch):
  monkeypatch.setenv("PYTHONPATH", ROOT)
  refresher, retriever = _tiny_refresher(tmp_path, AsynchronousRefresher,
                                         sharding=Sharding(shard_size=10))
  num_blocks = len(refresher.store)
  shards = -(-num_blocks // 10)
  assert shards >= 2
  assert isinstance(refresher.index, ShardedIndex) and len(refresher.index.shards) == shards
  assert not refresher.maybe_refresh(5, retriever)  # the builder gets --index_shard_size=10
  refresher.wait(timeout=600)
  assert refresher.maybe_refresh(6, retriever)
  index = refresher.index
  assert refresher.version == "step-00000005" and isinstance(index, ShardedIndex)
  assert [b - a for a, b in index.row_ranges] == [len(r) for r in Sharding(
      shard_size=10).shard_ranges(num_blocks)]
  queries = index.document_embeddings()[:4]
  scores, _ = index.search(queries, num_blocks // 2)  # k > a shard: merged across shards
  want, _ = BruteForceIndex(index.document_embeddings()).search(queries, num_blocks // 2)
  np.testing.assert_allclose(scores, want, rtol=1e-5, atol=1e-5)
  refresher.close()


class _IdleBuilder(AsynchronousRefresher):
  """A builder that publishes nothing while the test runs."""

  def builder_command(self, snapshot_dir):
    return [sys.executable, "-c", "import time; time.sleep(300)"]


def test_no_snapshot_that_could_not_be_published_before_the_last_step(tmp_path):
  refresher, retriever = _tiny_refresher(tmp_path, _IdleBuilder)
  snapshots = lambda: sorted(n for n in os.listdir(tmp_path / "snapshots")
                             if n.startswith("step-"))
  try:
    refresher.maybe_refresh(5, retriever, last_step=20)  # a build from 5: launched
    refresher.maybe_refresh(10, retriever, last_step=20)  # 10 + the 5 steps so far < 20: queued
    assert snapshots() == ["step-00000000", "step-00000005", "step-00000010"]
    refresher.maybe_refresh(15, retriever, last_step=20)  # 15 + 10 steps so far >= 20: none
    refresher.maybe_refresh(20, retriever, last_step=20)  # the last step: none
    assert snapshots() == ["step-00000000", "step-00000005", "step-00000010"]
    refresher.maybe_refresh(15, retriever)  # without the last step: every N steps, as before
    assert snapshots()[-1] == "step-00000015"
  finally:
    refresher.close()
