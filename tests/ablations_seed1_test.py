"""Seed 1 of the small knowledge-world ablation (`ablation_seeds`): it runs every variant,
and a reader reading only the null document answers no test question (the world's facts cannot
be guessed), which held on every seed of the study (docs/ablations.md)."""
# bazel-size: large
import numpy as np
import pytest

import ablation_seeds

SEED = 1


@pytest.fixture(scope="module")
def result(request):
  (seed_result,) = ablation_seeds.seed_results(request, [SEED])
  return seed_result


@pytest.mark.slow
def test_seed_ran_every_variant(result, tmp_path_factory):
  config = ablation_seeds.small_config(tmp_path_factory)
  assert result.seed == SEED
  assert [row["variant"] for row in result.rows] == list(config.variants)
  assert 0.0 <= result.ict_recall <= 1.0


@pytest.mark.slow
def test_facts_cannot_be_answered_without_retrieval(result):
  (no_retrieval,) = [row for row in result.rows if row["variant"] == "no_retrieval"]
  np.testing.assert_array_equal(no_retrieval["exact_match"], 0.0)
