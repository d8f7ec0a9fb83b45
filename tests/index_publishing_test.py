"""Versioned index publication: atomic LATEST, partial builds invisible and cleaned."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _index(seed, n=50):
  return BruteForceIndex(np.random.default_rng(seed).standard_normal((n, 8)).astype(np.float32))


def test_publish_and_load_latest(tmp_path):
  root = str(tmp_path)
  assert index_publisher.latest_version(root) is None
  with pytest.raises(FileNotFoundError, match="no index has been published"):
    index_publisher.load_latest(root)
  index_publisher.publish(_index(0), root, "step-00000000", {"snapshot_step": 0})
  second = _index(1)
  index_publisher.publish(second, root, "step-00000010", {"snapshot_step": 10})
  version, index, metadata = index_publisher.load_latest(root)
  assert (version, metadata) == ("step-00000010", {"snapshot_step": 10})
  probe = np.ones((1, 8), np.float32)
  np.testing.assert_array_equal(index.search(probe, 3)[1], second.search(probe, 3)[1])
  assert index_publisher.list_versions(root) == ["step-00000000", "step-00000010"]
  assert index_publisher.keep_last(root, 1) == ["step-00000000"]
  assert index_publisher.list_versions(root) == ["step-00000010"]
  with pytest.raises(ValueError, match="invalid index version"):
    index_publisher.publish(second, root, "a/b")


def test_builder_killed_mid_publication_leaves_previous_index(tmp_path):
  root = str(tmp_path)
  index_publisher.publish(_index(0), root, "step-00000000")
  script = textwrap.dedent(f"""
      import threading
      import numpy as np
      from realm_tf.mips import index_publisher
      from realm_tf.mips.brute_force_index import BruteForceIndex
      index = BruteForceIndex(np.ones((50, 8), np.float32))
      save = index.save
      def slow_save(directory):
        save(directory)
        threading.Event().wait()  # until the test kills it: the kill lands mid-publication
      index.save = slow_save
      index_publisher.publish(index, {root!r}, "step-00000005")
      """)
  env = dict(os.environ, PYTHONPATH=ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  builder = subprocess.Popen([sys.executable, "-c", script], env=env)
  deadline = time.time() + 600  # only a hang fails here: the loop waits for the partial
  partial = []
  while time.time() < deadline and not partial:
    partial = [n for n in os.listdir(root) if ".tmp-" in n and
               os.path.exists(os.path.join(root, n, "manifest.json"))]
    time.sleep(0.1)
  assert partial, "the builder never started writing"
  os.kill(builder.pid, signal.SIGKILL)
  builder.wait()
  assert index_publisher.latest_version(root) == "step-00000000"
  assert index_publisher.list_versions(root) == ["step-00000000"]
  assert index_publisher.load_latest(root)[1].num_docs == 50
  assert index_publisher.cleanup_partial(root) == partial
  index_publisher.publish(_index(2), root, "step-00000005")  # a restarted builder succeeds
  assert index_publisher.latest_version(root) == "step-00000005"
