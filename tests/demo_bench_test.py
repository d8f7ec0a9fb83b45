"""`bench/demo_finetune.py` on the session's tiny demo run (`demo_run`): fine-tuning variants
over seeds, and a reader warmed up on cloze questions first, from the run's pre-trained model."""
# bazel-size: large
import json
import os
import subprocess
import sys

import pytest

import demo_run
from realm_tf.demo import stages
from realm_tf.demo import step_logs

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _bench(config, bench_dir: str, *flags: str) -> None:
  subprocess.run([sys.executable, os.path.join(ROOT, "bench", "demo_finetune.py"),
                  f"--demo_dir={config.output_dir}", f"--output_dir={bench_dir}", *flags],
                 check=True, cwd=ROOT)


@pytest.fixture(scope="module")
def demo(request, tmp_path_factory):
  """(config, the stages' figures, out(*parts) -> a path in the run), the demo's lock held."""
  demo_run.wait_for_first_run(request)
  config = demo_run.config(tmp_path_factory)
  with demo_run.locked(tmp_path_factory):
    report = stages.run_demo(config, log=lambda line: None)  # reused after demo_test.py
    yield (config, {s.name: s.figures for s in report.stages},
           lambda *parts: os.path.join(config.output_dir, *parts))


@pytest.mark.slow
@demo_run.needs_data
def test_variants_over_seeds_start_from_the_demos_pretrained_model(demo, tmp_path):
  config, _, out = demo
  bench_dir = str(tmp_path / "bench")
  _bench(config, bench_dir, "--seeds=0,1", "--variant=answer_block:finetune_steps=3,"
         "read_answer_block=true,finetune_retriever_learning_rate=2e-5,finetune_reader_top_k=2",
         "--name=variants")
  with open(os.path.join(bench_dir, "variants.json")) as f:
    (row,) = json.load(f)["rows"]
  assert row["variant"] == "answer_block"
  assert row["settings"] == {"finetune_steps": 3, "read_answer_block": True,
                             "finetune_retriever_learning_rate": 2e-5,
                             "finetune_reader_top_k": 2}
  assert [r["seed"] for r in row["runs"]] == [0, 1]
  for run in row["runs"]:
    run_dir = os.path.join(bench_dir, f"answer_block-seed{run['seed']}")
    assert run["step"] == 3 and run["num_questions"] == 3
    assert os.path.realpath(os.path.join(run_dir, "realm")) == out("realm")
    assert len(step_logs.read_step_log(os.path.join(run_dir, "qa", "metrics.jsonl"))) == 3
    experiment = step_logs.read_json(os.path.join(run_dir, "qa", "experiment.json"))
    task, trainer = experiment["task"], experiment["trainer"]
    assert task["read_answer_block"] and task["reader_top_k"] == 2
    with open(os.path.join(run_dir, "eval", "after_predictions.jsonl")) as f:
      assert {len(json.loads(line)["top_blocks"]) for line in f} == {config.k}  # reads k
    assert trainer["retriever_learning_rate"] == 2e-5  # the query tower's own rate
    assert trainer["learning_rate"] == config.finetune_learning_rate
    assert os.path.realpath(task["train_data"]) == os.path.realpath(out("questions",
                                                                      "train.jsonl"))
  mean = sum(r["exact_match"] for r in row["runs"]) / 2
  assert row["summary"]["exact_match"][0] == pytest.approx(mean)


@pytest.mark.slow
@demo_run.needs_data
def test_a_reader_warmed_up_on_cloze_questions_then_fine_tuned(demo, tmp_path):
  config, figures, _ = demo
  bench_dir = str(tmp_path / "bench")
  _bench(config, bench_dir, "--seeds=0",
         "--variant=cloze:cloze_steps=2,cloze_batch_size=4,finetune_steps=2", "--name=cloze")
  with open(os.path.join(bench_dir, "cloze.json")) as f:
    ((run,),) = [row["runs"] for row in json.load(f)["rows"]]
  assert run["step"] == 2 and 0 <= run["cloze_exact_match"] <= run["cloze_recall@5"] <= 1
  run_dir = os.path.join(bench_dir, "cloze-seed0")
  warmup = step_logs.read_json(os.path.join(run_dir, "cloze", "qa", "experiment.json"))
  assert warmup["task"]["train_data"] == os.path.join(bench_dir, "cloze.jsonl")
  assert warmup["task"]["reader_top_k"] == 1 and warmup["task"]["read_answer_block"]
  assert warmup["trainer"]["retriever_learning_rate"] == 0.0
  assert warmup["trainer"]["num_steps"] == 2 and warmup["trainer"]["batch_size"] == 4
  with open(os.path.join(bench_dir, "cloze.jsonl")) as f:
    cloze = [json.loads(line) for line in f]
  assert len(cloze) == figures["examples"]["examples"]  # every salient-span example
  finetuned = step_logs.read_json(os.path.join(run_dir, "qa", "experiment.json"))
  assert finetuned["task"]["init"]["checkpoint"] == os.path.join(run_dir, "cloze", "qa")
  assert finetuned["task"]["reader_top_k"] == config.k
