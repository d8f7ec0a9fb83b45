"""The seeds of the small knowledge-world ablation (`bench/ablations.py --size=small`), run once
per test session and shared by the test files that read them.

Each seed runs in a fresh process with one intra-op thread, the setting of the study behind
the assertions (docs/ablations.md, "What `make test` asserts"). A seed is its own test file
(`ablations_seed<N>_test.py`), so that pytest-xdist's workers (`--dist loadfile`) run the seeds
side by side; `ablations_small_test.py` then reads the finished seeds. The runs go under the
session's base temporary directory, which every xdist worker of the session shares, one lock
file per seed: the first file to need a seed runs it, the others wait for it and reuse its
result (`ablation_runner.run_seeds` reuses a seed directory holding a result with the same
settings).
"""
import contextlib
import dataclasses
import fcntl
import os
from typing import List

from realm_tf.knowledge_world import ablation_config
from realm_tf.knowledge_world import ablation_runner
from realm_tf.knowledge_world.ablation_result import AblationResult


def shared_directory(tmp_path_factory) -> str:
  """The session's ablation directory, the same for every xdist worker of the session."""
  base = tmp_path_factory.getbasetemp()
  if os.environ.get("PYTEST_XDIST_WORKER"):
    base = base.parent  # the workers' base directories are children of the session's
  directory = os.path.join(str(base), "ablations_small")
  os.makedirs(directory, exist_ok=True)
  return directory


def small_config(tmp_path_factory) -> ablation_config.AblationConfig:
  return ablation_config.small_config(os.path.join(shared_directory(tmp_path_factory), "run"))


@contextlib.contextmanager
def _locked(path: str):
  with open(path, "w", encoding="utf-8") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(f, fcntl.LOCK_UN)


def seed_results(tmp_path_factory, seeds) -> List[AblationResult]:
  """The results of `seeds`, each run (all at once, a process each) or reused."""
  config = small_config(tmp_path_factory)
  with contextlib.ExitStack() as stack:
    for seed in sorted(seeds):  # one order for every caller: no deadlock
      stack.enter_context(_locked(os.path.join(shared_directory(tmp_path_factory),
                                               f"seed-{seed}.lock")))
    # processes > 1: every seed in a fresh process with one thread, even a seed alone
    return ablation_runner.run_seeds(dataclasses.replace(config, seeds=tuple(seeds)),
                                     processes=max(2, len(seeds)), log=lambda message: None)
