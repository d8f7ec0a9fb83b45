"""Supervision of the asynchronous index builder: its output goes to a log file (never to an
undrained pipe), a failed build is reported at once with the end of its log and the command that
reproduces it, consecutive failures stop training, close() reports and terminates, and a bounded
staleness makes the trainer wait for (and retry) a build. Builders that must still be running
when the test asserts wait for a gate file the test creates: no outcome depends on speed."""
import logging
import os
import shlex
import signal
import sys
import threading
import time

import numpy as np
import pytest

from realm_tf import tiny_world
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.retrieval.async_refresh import AsynchronousRefresher
from realm_tf.retrieval.index_refresh import IndexBuilderError
import tiny_models

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NUM_BLOCKS = 16  # tiny_world.write_pipeline's corpus

# Builder scripts, run as `python -c SCRIPT <index_root> <version>`.
FAIL = """
import sys
print("reading blocks", flush=True)
sys.exit("FATAL Flags parsing error: Unknown command line flag 'runer'")
"""
PUBLISH = f"""
import sys
import numpy as np
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
index = BruteForceIndex(np.ones(({NUM_BLOCKS}, 8), np.float32))
index_publisher.publish(index, sys.argv[1], sys.argv[2])
"""
FLOOD = """
import sys
for i in range(1024):
  sys.stderr.write(f"warning {i:04d} " + "x" * 1010 + "\\n")
"""
KILLED = """
import os, signal, sys
os.makedirs(os.path.join(sys.argv[1], sys.argv[2] + ".tmp-killed"))
print("embedding shard 1 of 4", flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
SLEEP = "import time; time.sleep(600)"
GATED = f"""
import os, sys, time
while not os.path.exists(os.path.join(sys.argv[1], "..", "gate")):
  time.sleep(0.05)
{PUBLISH}"""


class ScriptedRefresher(AsynchronousRefresher):
  """Runs `scripts` in turn as the builders. Snapshots are empty directories: exporting the doc
  embedder is covered by async_refresh_test."""

  def __init__(self, tmp_path, scripts, **kwargs):
    store, tok = tiny_world.write_pipeline(str(tmp_path / "corpus"))
    super().__init__(str(tmp_path / "index"), 5, store, (tok.cls_id, tok.sep_id, tok.pad_id),
                     corpus_dir=str(tmp_path / "corpus"),
                     snapshot_root=str(tmp_path / "snapshots"), kind="brute_force", **kwargs)
    self.scripts = list(scripts)
    self.commands = []
    index_publisher.publish(BruteForceIndex(np.zeros((NUM_BLOCKS, 8), np.float32)),
                            self.index_root, "step-00000000")
    self.start(0, None)

  def _snapshot(self, step, retriever):
    directory = os.path.join(self.snapshot_root, index_publisher.version_for_step(step))
    os.makedirs(directory, exist_ok=True)
    return directory

  def builder_command(self, snapshot_dir):
    self.commands.append([sys.executable, "-c", self.scripts.pop(0), self.index_root,
                          os.path.basename(snapshot_dir)])
    return self.commands[-1]


@pytest.fixture(autouse=True)
def _importable(monkeypatch):
  monkeypatch.setenv("PYTHONPATH", ROOT)


def _errors(caplog):
  errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
  caplog.clear()
  return errors


def test_failed_builds_are_reported_at_once_and_consecutive_ones_stop_training(tmp_path,
                                                                               caplog):
  refresher = ScriptedRefresher(tmp_path, [FAIL, PUBLISH, FAIL, FAIL])
  caplog.set_level(logging.INFO)
  assert not refresher.maybe_refresh(5, None)  # builder 1 launched
  refresher.wait(timeout=900)
  log = str(tmp_path / "snapshots" / "builder-step-00000005.log")
  [error] = _errors(caplog)
  assert "the index builder for step-00000005 failed with exit status 1" in error
  assert "(failure 1 in a row, at most 2)" in error
  assert f"Last lines of its log {log}:\nreading blocks\nFATAL Flags parsing error" in error
  assert f"Reproduce it with:\n  {shlex.join(refresher.commands[0])}" in error
  with open(log) as f:  # stdout and stderr
    assert f.read() == ("reading blocks\nFATAL Flags parsing error: Unknown command line flag "
                        "'runer'\n")
  assert not refresher.maybe_refresh(6, None)  # one failure: training goes on
  assert refresher.version == "step-00000000"

  refresher.maybe_refresh(10, None)  # builder 2 publishes: the count starts again
  refresher.wait(timeout=600)
  assert refresher.maybe_refresh(11, None) and refresher.version == "step-00000010"
  assert not _errors(caplog)
  refresher.maybe_refresh(15, None)
  refresher.wait(timeout=900)
  assert len(_errors(caplog)) == 1
  assert not refresher.maybe_refresh(16, None)

  refresher.maybe_refresh(20, None)
  refresher.wait(timeout=900)
  assert "(failure 2 in a row, at most 2)" in _errors(caplog)[0]
  for step in (21, 22):  # stays stopped
    with pytest.raises(IndexBuilderError) as stop:
      refresher.maybe_refresh(step, None)
    message = str(stop.value)
    assert "2 consecutive index builds failed" in message and "--max_builder_failures" in message
    assert "the index of step 10" in message
    assert str(tmp_path / "snapshots" / "builder-step-00000020.log") in message
    assert shlex.join(refresher.commands[-1]) in message
  refresher.close()


def test_a_builder_flooding_its_output_does_not_block(tmp_path, caplog):
  # 1 MiB on stderr: a pipe nobody reads holds 64 KiB, and the builder would block on it.
  refresher = ScriptedRefresher(tmp_path, [FLOOD], max_builder_failures=1)
  refresher.maybe_refresh(5, None)
  refresher.wait(timeout=900)
  log = tmp_path / "snapshots" / "builder-step-00000005.log"
  assert log.stat().st_size == 1024 * 1024
  [error] = _errors(caplog)
  assert ("the index builder for step-00000005 exited with status 0 but published no index "
          f"step-00000005 in {refresher.index_root}") in error
  assert "warning 1023 xxx" in error and "warning 1000 " not in error  # the end of the log
  assert len(error) < 30_000
  with pytest.raises(IndexBuilderError, match="1 consecutive index build failed"):
    refresher.maybe_refresh(6, None)


def test_a_builder_killed_mid_build_leaves_the_index_in_use_and_the_next_one_recovers(
    tmp_path, caplog):
  refresher = ScriptedRefresher(tmp_path, [KILLED, PUBLISH])
  refresher.maybe_refresh(5, None)
  refresher.wait(timeout=900)
  [error] = _errors(caplog)
  assert f"step-00000005 was killed by signal {int(signal.SIGKILL)}" in error
  assert "embedding shard 1 of 4" in error
  assert not refresher.maybe_refresh(6, None)
  assert refresher.version == "step-00000000"
  assert index_publisher.latest_version(refresher.index_root) == "step-00000000"
  refresher.maybe_refresh(10, None)
  refresher.wait(timeout=600)
  assert refresher.maybe_refresh(11, None) and refresher.version == "step-00000010"
  assert index_publisher.cleanup_partial(refresher.index_root) == ["step-00000005.tmp-killed"]


def test_close_reports_a_failed_builder_and_terminates_a_running_one(tmp_path, caplog):
  refresher = ScriptedRefresher(tmp_path, [FAIL, SLEEP])
  refresher.maybe_refresh(5, None)
  refresher._builder.wait()  # pylint: disable=protected-access
  refresher.close()  # the failure was not seen by maybe_refresh
  [error] = _errors(caplog)
  assert "the index builder for step-00000005 failed with exit status 1" in error

  refresher.maybe_refresh(10, None)
  builder = refresher._builder  # pylint: disable=protected-access
  refresher.close()
  assert builder.returncode == -signal.SIGTERM
  assert not _errors(caplog)  # terminated, not failed


@pytest.mark.slow
def test_a_mistyped_builder_flag_is_reported_with_the_real_builder(tmp_path, caplog):
  store, tok = tiny_world.write_pipeline(str(tmp_path / "corpus"))
  retriever = tiny_models.retriever()
  refresher = AsynchronousRefresher(
      str(tmp_path / "index"), 5, store, (tok.cls_id, tok.sep_id, tok.pad_id),
      corpus_dir=str(tmp_path / "corpus"), snapshot_root=str(tmp_path / "snapshots"),
      kind="brute_force", block_length=24, builder_args=["--runer=DataflowRunner"],
      max_builder_failures=1)
  index_publisher.publish(BruteForceIndex(np.zeros((NUM_BLOCKS, 8), np.float32)),
                          refresher.index_root, "step-00000000")
  refresher.start(0, retriever)
  refresher.maybe_refresh(5, retriever)
  refresher.wait(timeout=600)
  [error] = _errors(caplog)
  assert "failed with exit status 2" in error and "runer" in error  # a bad flag: exit 2
  assert "--runer: not a flag of this pipeline" in error
  assert "-m pipelines.build_index" in error and "--runer=DataflowRunner" in error
  with pytest.raises(IndexBuilderError):
    refresher.maybe_refresh(6, retriever)


def test_twelve_refreshes_keep_three_index_versions_and_their_snapshots(tmp_path):
  refresher = ScriptedRefresher(tmp_path, [], keep_versions=3)
  log_dir = tmp_path / "snapshots"
  for refresh in range(1, 13):
    version = index_publisher.version_for_step(5 * refresh)
    refresher._snapshot(5 * refresh, None)  # pylint: disable=protected-access
    (log_dir / f"builder-{version}.log").write_text("built\n")
    index_publisher.publish(BruteForceIndex(np.full((NUM_BLOCKS, 8), refresh, np.float32)),
                            refresher.index_root, version)
    refresher._load(version)  # pylint: disable=protected-access  (the swap maybe_refresh does)
  kept = ["step-00000050", "step-00000055", "step-00000060"]
  assert index_publisher.list_versions(refresher.index_root) == kept
  assert index_publisher.latest_version(refresher.index_root) == "step-00000060"
  assert sorted(os.listdir(log_dir)) == sorted(kept + [f"builder-{v}.log" for v in kept])
  assert refresher.index.embeddings[0, 0] == 12


def test_a_swap_does_not_rehash_the_published_index(tmp_path, monkeypatch):
  refresher = ScriptedRefresher(tmp_path, [])
  index_publisher.publish(BruteForceIndex(np.ones((NUM_BLOCKS, 8), np.float32)),
                          refresher.index_root, "step-00000005")
  from realm_tf.mips import manifest  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(manifest, "sha256_file", lambda path: pytest.fail(f"re-hashed {path}"))
  refresher._load("step-00000005")  # pylint: disable=protected-access
  assert refresher.version == "step-00000005"


def _open_gate(refresher):
  with open(os.path.join(refresher.index_root, "..", "gate"), "w"):
    pass


def test_unbounded_staleness_never_waits(tmp_path):
  refresher = ScriptedRefresher(tmp_path, [GATED])
  try:
    assert not refresher.maybe_refresh(5, None)
    assert not refresher.maybe_refresh(17, None)  # 17 steps old: the gated build still runs
    assert (refresher.version, refresher.wait_seconds) == ("step-00000000", 0.0)
    _open_gate(refresher)
    refresher.wait(timeout=600)
    assert refresher.maybe_refresh(18, None) and refresher.version == "step-00000005"
  finally:
    refresher.close()


def test_bounded_staleness_waits_for_the_running_build(tmp_path, caplog):
  refresher = ScriptedRefresher(tmp_path, [GATED], max_staleness=6)
  caplog.set_level(logging.INFO, logger="absl")
  try:
    assert not refresher.maybe_refresh(5, None)
    assert not refresher.maybe_refresh(6, None)  # 6 steps old: within the bound
    swapped = []
    trainer = threading.Thread(target=lambda: swapped.append(refresher.maybe_refresh(7, None)))
    trainer.start()
    waiting = "Step 7: index step-00000000 is 7 steps old (at most 6): waiting for the build"
    deadline = time.monotonic() + 600  # only a hang fails here: the wait is logged at once
    while not any(waiting in r.getMessage() for r in caplog.records):
      assert trainer.is_alive(), "step 7 returned without waiting for the build"
      assert time.monotonic() < deadline, "step 7 never logged its wait"
      trainer.join(0.05)
    assert not swapped  # still waiting: the build cannot publish before the gate opens
    _open_gate(refresher)
    trainer.join()
    assert swapped == [True] and refresher.version == "step-00000005"
    assert refresher.wait_seconds > 0
    assert any("Step 7: waited" in r.getMessage() for r in caplog.records)
    assert not refresher.maybe_refresh(8, None) and refresher.wait_seconds == 0.0
  finally:
    refresher.close()


def test_bounded_staleness_retries_a_failed_build_then_stops(tmp_path, caplog):
  refresher = ScriptedRefresher(tmp_path, [FAIL, PUBLISH, FAIL, FAIL], max_staleness=5)
  assert not refresher.maybe_refresh(5, None)
  assert refresher.maybe_refresh(6, None)  # waits: the failed build of step 5 is retried
  assert refresher.version == "step-00000005"
  assert [c[-1] for c in refresher.commands] == ["step-00000005", "step-00000005"]
  assert "step-00000005 failed with exit status 1 (failure 1 in a row" in _errors(caplog)[0]
  refresher.maybe_refresh(10, None)
  with pytest.raises(IndexBuilderError, match="2 consecutive index builds failed"):
    refresher.maybe_refresh(11, None)  # the build of 10 and its retry
  assert refresher.version == "step-00000005"
  assert [c[-1] for c in refresher.commands[2:]] == ["step-00000010", "step-00000010"]
