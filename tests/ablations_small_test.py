"""The 3-minute knowledge-world ablation (`bench/ablations.py --size=small`): REALM beats the
no-retrieval floor on Open-QA exact match, and REALM pre-training raises zero-shot recall@5
over its ICT warm-start. One seeded run serves every assertion."""
# bazel-size: large
import os

import pytest

from realm_tf.knowledge_world import ablations_lib


@pytest.fixture(scope="module")
def small_run(tmp_path_factory):
  directory = tmp_path_factory.mktemp("ablations")
  config = ablations_lib.small_config(str(directory / "run"))
  result = ablations_lib.run_ablations(config, log=lambda message: None)
  return config, result, directory


@pytest.mark.slow
def test_realm_beats_no_retrieval_on_exact_match(small_run):
  _, result, _ = small_run
  rows = {row["variant"]: row for row in result.rows}
  assert set(rows) == {"no_retrieval", "realm"}
  assert rows["realm"]["exact_match"] > rows["no_retrieval"]["exact_match"], result.rows


@pytest.mark.slow
def test_realm_pretraining_raises_zero_shot_recall_over_ict(small_run):
  _, result, _ = small_run
  realm = next(row for row in result.rows if row["variant"] == "realm")
  assert realm["zero_shot_recall"] > result.ict_recall, (result.ict_recall, result.rows)


@pytest.mark.slow
def test_report_has_the_table_orderings_and_figure(small_run):
  config, result, directory = small_run
  paths = ablations_lib.write_report(result, config, str(directory / "results"),
                                     "python bench/ablations.py --size=small", "small")
  with open(paths["markdown"], encoding="utf-8") as f:
    report = f.read()
  assert "| REALM (salient spans) |" in report
  assert "EM: REALM > no retrieval: holds" in report
  assert "zero-shot recall: REALM > ICT warm-start: holds" in report
  assert os.path.getsize(paths["png"]) > 1000
