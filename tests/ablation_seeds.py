"""The seeds of the small knowledge-world ablation (`bench/ablations.py --size=small`), run once
per test session and shared by the test files that read them.

Each seed runs in a fresh process with one intra-op thread, the setting of the study behind
the assertions (docs/ablations.md, "What `make test` asserts"). A seed is its own test file
(`ablations_seed<N>_test.py`), so that pytest-xdist's workers (`--dist loadfile`) run the seeds
side by side; `ablations_small_test.py` then reads the finished seeds. The runs go under the
session's base temporary directory, which every xdist worker of the session shares, one lock
file per seed: the first file to need a seed runs it, the others wait for it and reuse its
result (`ablation_runner.run_seeds` reuses a seed directory holding a result with the same
settings). In a session without xdist workers, the first file to need a seed runs every seed
the session's files need at once, a process each, as the statistics file does alone.
"""
import contextlib
import dataclasses
import os
from typing import List

import numpy as np
import pytest

import session_shared
from realm_tf.knowledge_world import ablation_config
from realm_tf.knowledge_world import ablation_runner
from realm_tf.knowledge_world.ablation_result import AblationResult


def shared_directory(tmp_path_factory) -> str:
  """The session's ablation directory, the same for every xdist worker of the session."""
  return session_shared.shared_directory(tmp_path_factory, "ablations_small")


def small_config(tmp_path_factory) -> ablation_config.AblationConfig:
  return ablation_config.small_config(os.path.join(shared_directory(tmp_path_factory), "run"))


def _session_seeds(session, config: ablation_config.AblationConfig) -> List[int]:
  """The seeds the session's test files read: every seed for the statistics file."""
  names = {item.path.name for item in session.items}
  if "ablations_small_test.py" in names:
    return list(config.seeds)
  return [seed for seed in config.seeds if f"ablations_seed{seed}_test.py" in names]


def seed_results(request, seeds) -> List[AblationResult]:
  """The results of `seeds` (run, or reused), for the test `request`."""
  tmp_path_factory = request.getfixturevalue("tmp_path_factory")
  config = small_config(tmp_path_factory)
  run = set(seeds)
  if not os.environ.get("PYTEST_XDIST_WORKER"):  # no other worker runs the other seeds
    run |= set(_session_seeds(request.session, config))
  run = sorted(run)  # one locking order for every caller: no deadlock
  with contextlib.ExitStack() as stack:
    for seed in run:
      stack.enter_context(session_shared.locked(os.path.join(shared_directory(tmp_path_factory),
                                               f"seed-{seed}.lock")))
    # processes > 1: every seed in a fresh process with one thread, even a seed alone
    results = ablation_runner.run_seeds(dataclasses.replace(config, seeds=tuple(run)),
                                        processes=max(2, len(run)), log=lambda message: None)
  by_seed = {result.seed: result for result in results}
  return [by_seed[seed] for seed in seeds]


@pytest.mark.slow
class SeedChecks:
  """What one seed's file asserts: every variant ran, and a reader reading only the null
  document answers no test question (the world's facts cannot be guessed), which held on every
  seed of the study (docs/ablations.md). A seed file subclasses it with its `SEED`."""
  SEED = 0

  @pytest.fixture(scope="class")
  def result(self, request):
    (seed_result,) = seed_results(request, [self.SEED])
    return seed_result

  def test_seed_ran_every_variant(self, result, tmp_path_factory):
    config = small_config(tmp_path_factory)
    assert result.seed == self.SEED
    assert [row["variant"] for row in result.rows] == list(config.variants)
    assert 0.0 <= result.ict_recall <= 1.0

  def test_facts_cannot_be_answered_without_retrieval(self, result):
    (no_retrieval,) = [row for row in result.rows if row["variant"] == "no_retrieval"]
    np.testing.assert_array_equal(no_retrieval["exact_match"], 0.0)
