"""The tiny demo run of the test session, shared by the test files that read it.

`demo_test.py` runs the chain and checks it (and its resume); `demo_bench_test.py` runs the
fine-tuning variants bench on the run's pre-trained model. The run goes under the session's
base temporary directory, which every xdist worker of the session shares, behind a lock file:
the first file to need it runs the chain, a later one resumes it (every stage reused). The
bench file is ordered after the slow files (`conftest.py`), and waits for `demo_test.py`'s
first run when the session has that file (its first run must be the one that computes every
stage).
"""
import contextlib
import importlib.util
import os
import time

import pytest

import session_shared
from realm_tf.demo import data_stages
from realm_tf.demo import stages

TINY = dict(num_docs=20, encoder="tiny", eval_questions=3, ict_steps=2, ict_batch_size=4,
            pretrain_steps=2, pretrain_batch_size=2, refresh_every=2, finetune_steps=2,
            finetune_batch_size=2, num_asked=2)

needs_data = pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None for m in data_stages.DATA_PACKAGES),
    reason="real data comes with `make test` (the Makefile's data packages)")


def _shared_directory(tmp_path_factory) -> str:
  return session_shared.shared_directory(tmp_path_factory, "demo_run")


def config(tmp_path_factory) -> stages.DemoConfig:
  return stages.DemoConfig(output_dir=os.path.join(_shared_directory(tmp_path_factory), "demo"),
                           **TINY)


def locked(tmp_path_factory):
  """Held while a file runs or resumes the session's demo."""
  return session_shared.locked(os.path.join(_shared_directory(tmp_path_factory), "demo.lock"))


def _first_run_marker(tmp_path_factory) -> str:
  return os.path.join(_shared_directory(tmp_path_factory), "first_run.done")


@contextlib.contextmanager
def first_run(tmp_path_factory):
  """Around `demo_test.py`'s first run: marks it done (passed or not) for `wait_for_first_run`."""
  try:
    yield
  finally:
    with open(_first_run_marker(tmp_path_factory), "w", encoding="utf-8"):
      pass


def wait_for_first_run(request, timeout_s: float = 1800) -> None:
  """Waits for `demo_test.py`'s first run when another xdist worker of the session has it."""
  if not os.environ.get("PYTEST_XDIST_WORKER") or "demo_test.py" not in {
      item.path.name for item in request.session.items}:
    deadline = 0.0
  else:
    deadline = time.monotonic() + timeout_s
  marker = _first_run_marker(request.getfixturevalue("tmp_path_factory"))
  while time.monotonic() < deadline and not os.path.exists(marker):
    time.sleep(5)
