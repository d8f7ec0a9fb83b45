"""Tests for realm_tf.mips.index_publisher: metadata, verification, kills at every step."""
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from realm_tf.mips import index_publisher
from realm_tf.mips import manifest as manifest_lib
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.retrieval.async_refresh import AsynchronousRefresher
from realm_tf.retrieval.index_refresh import SynchronousRefresher

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _index(seed, n=40):
  return BruteForceIndex(np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32))


def test_metadata_lives_in_the_manifest_builder_params(tmp_path):
  root = str(tmp_path)
  directory = index_publisher.publish(_index(0), root, index_publisher.version_for_step(1200),
                                      {"corpus_fingerprint": "abc", "snapshot_step": 1200})
  assert directory == os.path.join(root, "step-00001200")
  builder = manifest_lib.IndexManifest.read(directory).builder
  assert builder["corpus_fingerprint"] == "abc" and builder["snapshot_step"] == 1200
  assert builder["chunk_size"] == _index(0).chunk_size  # the index's own params stay
  version, index, metadata = index_publisher.load_latest(root)
  assert (version, index.num_docs) == ("step-00001200", 40)
  assert metadata == {"corpus_fingerprint": "abc", "snapshot_step": 1200}
  assert index_publisher.read_metadata(root, version) == metadata
  with open(os.path.join(root, index_publisher.LATEST)) as f:
    assert f.read() == "step-00001200\n"
  assert sorted(os.listdir(root)) == ["LATEST", "step-00001200"]  # no temporary left


def test_rejected_publications_leave_nothing(tmp_path):
  root = str(tmp_path)
  index_publisher.publish(_index(0), root, "step-00000001")
  with pytest.raises(ValueError, match="clash"):
    index_publisher.publish(_index(1), root, "step-00000002", {"chunk_size": 3})
  with pytest.raises(FileExistsError):
    index_publisher.publish(_index(1), root, "step-00000001")
  with pytest.raises(ValueError, match="invalid index version"):
    index_publisher.publish(_index(1), root, "step-1.tmp-x")

  class CorruptingIndex(BruteForceIndex):
    def save(self, directory):
      super().save(directory)
      with open(os.path.join(directory, "embeddings.npy"), "r+b") as f:
        f.seek(-4, os.SEEK_END)
        f.write(b"\x00\x01\x02\x03")

  with pytest.raises(index_publisher.PublishError, match="does not verify"):
    index_publisher.publish(CorruptingIndex(_index(2).embeddings), root, "step-00000003")
  assert sorted(os.listdir(root)) == ["LATEST", "step-00000001"]
  assert index_publisher.latest_version(root) == "step-00000001"


def _run_killed(root, script):
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
  result = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, timeout=600, check=False)
  assert result.returncode == -signal.SIGKILL, result.stderr.decode()[-2000:]


def test_killed_between_rename_and_latest_keeps_the_old_index_published(tmp_path):
  root = str(tmp_path)
  index_publisher.publish(_index(0), root, "step-00000010", {"snapshot_step": 10})
  _run_killed(root, f"""
      import os, signal
      import numpy as np
      from realm_tf.mips import index_publisher
      from realm_tf.mips.brute_force_index import BruteForceIndex
      def die(path, content):
        os.kill(os.getpid(), signal.SIGKILL)
      index_publisher._write_atomically = die
      index_publisher.publish(BruteForceIndex(np.ones((5, 8), np.float32)), {root!r},
                              "step-00000020", {{"snapshot_step": 20}})
      """)
  assert index_publisher.latest_version(root) == "step-00000010"
  version, index, metadata = index_publisher.load_latest(root)
  assert (index.num_docs, metadata) == (40, {"snapshot_step": 10})
  assert index_publisher.list_versions(root) == ["step-00000010", "step-00000020"]
  assert index_publisher.load_version(root, "step-00000020").num_docs == 5  # complete
  # Retention keeps the newest and, always, the published one.
  index_publisher.publish(_index(3), root, "step-00000030")
  assert index_publisher.keep_last(root, 1) == ["step-00000010", "step-00000020"]
  assert index_publisher.list_versions(root) == ["step-00000030"]


def test_killed_while_writing_leaves_only_a_tmp_dir(tmp_path):
  root = str(tmp_path)
  index_publisher.publish(_index(0), root, "step-00000010")
  _run_killed(root, f"""
      import os, signal
      import numpy as np
      from realm_tf.mips import index_publisher, manifest
      from realm_tf.mips.brute_force_index import BruteForceIndex
      def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)
      manifest.IndexManifest.write = die  # after the data files, before the manifest
      index_publisher.publish(BruteForceIndex(np.ones((5, 8), np.float32)), {root!r},
                              "step-00000020")
      """)
  partial = [n for n in os.listdir(root) if ".tmp-" in n]
  assert len(partial) == 1 and partial[0].startswith("step-00000020.tmp-")
  assert index_publisher.list_versions(root) == ["step-00000010"]
  assert index_publisher.load_latest(root)[0] == "step-00000010"
  assert index_publisher.cleanup_partial(root, older_than_s=3600) == []  # too fresh
  os.utime(os.path.join(root, partial[0]), (time.time() - 7200, time.time() - 7200))
  assert index_publisher.cleanup_partial(root, older_than_s=3600) == partial
  assert sorted(os.listdir(root)) == ["LATEST", "step-00000010"]


def test_version_names():
  assert index_publisher.version_for_step(0) < index_publisher.version_for_step(999)
  assert index_publisher.version_for_step(99_999_999) == "step-99999999"
  with pytest.raises(ValueError):
    index_publisher.version_for_step(-1)


def test_discard_after_deletes_versions_of_a_lost_future_and_repoints_latest(tmp_path):
  root = str(tmp_path / "index")
  for step in (0, 5, 10):
    index_publisher.publish(_index(step), root, index_publisher.version_for_step(step))
  assert index_publisher.discard_after(root, 8) == ["step-00000010"]
  assert index_publisher.list_versions(root) == ["step-00000000", "step-00000005"]
  assert index_publisher.latest_version(root) == "step-00000005"
  # the resumed run can publish step 10 again
  index_publisher.publish(_index(10), root, index_publisher.version_for_step(10))
  assert index_publisher.discard_after(root, 10) == []
  assert index_publisher.step_of_version("step-00000010") == 10
  assert index_publisher.step_of_version("manual") is None


def _write_latest(root, content):
  with open(os.path.join(root, index_publisher.LATEST), "w") as f:
    f.write(content)


@pytest.mark.parametrize("content", ["../elsewhere\n", "/abs/step-00000005", "..",
                                     "step-00000005/../..", "sub\\step-00000005"])
def test_latest_naming_a_path_outside_the_root_is_rejected(tmp_path, content):
  root = str(tmp_path / "index")
  index_publisher.publish(_index(0), root, "step-00000005")
  _write_latest(root, content)
  latest = os.path.join(root, index_publisher.LATEST)
  for read in (index_publisher.latest_version, index_publisher.load_latest,
               lambda r: index_publisher.discard_after(r, 0),
               lambda r: index_publisher.keep_last(r, 1)):
    with pytest.raises(ValueError) as error:
      read(root)
    assert latest in str(error.value) and repr(content) in str(error.value)
    assert f"write 'step-00000005' into {latest}" in str(error.value)
  assert index_publisher.list_versions(root) == ["step-00000005"]  # nothing was deleted


def test_latest_naming_a_missing_version_names_the_newest_earlier_one(tmp_path):
  root = str(tmp_path / "index")
  for step in (0, 5, 20):
    index_publisher.publish(_index(step), root, index_publisher.version_for_step(step))
  _write_latest(root, "step-00000010\n")  # e.g. its directory was deleted by hand
  latest = os.path.join(root, index_publisher.LATEST)
  for read in (index_publisher.latest_version, index_publisher.load_latest):
    with pytest.raises(FileNotFoundError) as error:
      read(root)
    message = str(error.value)
    assert f"{latest} names version 'step-00000010', which does not exist" in message
    assert f"write 'step-00000005' into {latest}" in message
    assert "newest complete earlier version" in message
  _write_latest(root, "step-00000005\n")  # the advice works
  assert index_publisher.load_latest(root)[0] == "step-00000005"


def test_repoint_latest_and_the_advice_without_earlier_versions(tmp_path):
  root = str(tmp_path / "index")
  index_publisher.publish(_index(5), root, "step-00000005")
  _write_latest(root, "step-00000001")
  with pytest.raises(FileNotFoundError, match=r"no complete version precedes it: "
                     r"index_publisher.repoint_latest\(.*\) publishes the newest, "
                     "'step-00000005'"):
    index_publisher.latest_version(root)
  assert index_publisher.repoint_latest(root) == "step-00000005"
  assert index_publisher.latest_version(root) == "step-00000005"
  shutil.rmtree(os.path.join(root, "step-00000005"))
  with pytest.raises(FileNotFoundError, match="no complete version is left .*: delete .*LATEST"):
    index_publisher.load_latest(root)
  assert index_publisher.repoint_latest(root) is None
  assert not os.path.exists(os.path.join(root, index_publisher.LATEST))


def test_refreshers_read_latest_through_the_validated_reader(tmp_path):
  root = str(tmp_path / "index")
  index_publisher.publish(_index(0), root, "step-00000000")
  index_publisher.publish(_index(5), root, "step-00000005")
  _write_latest(root, "step-00000003")
  refresher = SynchronousRefresher(root, 10, None, (2, 3, 0), kind="brute_force")
  with pytest.raises(FileNotFoundError, match="'step-00000003', which does not exist.*write "
                     "'step-00000000'"):
    refresher.start(5, None)
  _write_latest(root, "../step-00000005")
  refresher = AsynchronousRefresher(root, 10, None, (2, 3, 0), str(tmp_path / "corpus"),
                                    str(tmp_path / "snapshots"), kind="brute_force")
  with pytest.raises(ValueError, match="holds '../step-00000005', not the name of a version"):
    refresher.maybe_refresh(3, None)
