"""Experiment configs: overrides and their errors, config files, and the ICT -> REALM
pre-training -> Open-QA chain run through `run_experiment` on the tiny world, each stage
initialised from the previous one's model directory (and classification from ICT or REALM)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import errors
from realm_tf import presets
from realm_tf import tiny_world
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiments.base_task import previous_run
from realm_tf.experiment_config import EXPERIMENT_FILE
from realm_tf.experiments.classification_task import ClassificationTask
from realm_tf.experiments.pretrain_task import PretrainTask
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.models.saving import load_model
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.training.train_loop import BEST_DIR
from realm_tf.training.train_loop import EVAL_LOG
from realm_tf.training.train_loop import read_step_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The tiny world's towers: 2-layer 32-wide BERT, short inputs, random initialisation.
TINY = ("task.model.encoder=tiny,task.model.encoder.dropout_rate=0,task.init.bert_weights=,"
        "task.model.query_length=16,task.model.block_length=24,task.model.reader_length=40,"
        "runtime.compute_dtype=float32,runtime.seed=3")


def test_overrides_parse_typed_values_in_order():
  config = overrides.override(registry.get("pretrain"), (
      "trainer.num_steps=10,trainer.warmup_steps=none,trainer.learning_rate=1e-3,"
      "task.null_document=false,task.builder_args=[--runner=DirectRunner,--x=1],"
      "task.model.encoder=tiny,task.model.encoder.dropout_rate=0,task.scann.reorder_k=7"))
  assert config.trainer.num_steps == 10 and config.trainer.warmup_steps is None
  assert config.trainer.learning_rate == 1e-3 and config.task.null_document is False
  assert config.task.builder_args == ("--runner=DirectRunner", "--x=1")
  assert config.task.model.encoder.hidden_size == 32  # the tiny preset
  assert config.task.model.encoder.dropout_rate == 0.0  # applied after the preset
  assert config.task.scann.reorder_k == 7
  assert registry.get("pretrain").trainer.num_steps == 1000  # the defaults stay
  typed = overrides.override(config, {"trainer.batch_size": 4, "trainer.learning_rate": 1})
  assert typed.trainer.batch_size == 4 and typed.trainer.learning_rate == 1.0


def test_an_older_experiment_files_shard_size_is_read_where_it_moved(tmp_path):
  """task.scann.shard_size (before the shard size left the ScaNN settings) sets
  task.sharding.shard_size, so an earlier run's experiment.json still loads."""
  path = tmp_path / EXPERIMENT_FILE
  path.write_text(json.dumps({"task": {"scann": {"num_leaves": 4, "shard_size": 25}}}))
  config = overrides.override(registry.get("pretrain"), overrides.read_file(str(path)))
  assert (config.task.scann.num_leaves, config.task.sharding.shard_size) == (4, 25)
  assert overrides.override(config, "task.sharding.shard_size=7").task.sharding.shard_size == 7


@pytest.mark.parametrize("text,message", [
    ("trainer.num_stepz=1", "trainer.num_stepz: not a setting of TrainerConfig. Known: "
                            "trainer.model_dir, trainer.num_steps"),
    ("task.model.encoder.width=3", "task.model.encoder.width: not a setting of EncoderConfig"),
    ("trainer.num_steps=ten", "trainer.num_steps: expects int, got 'ten'"),
    ("task.null_document=maybe", "task.null_document: expects bool, got 'maybe'"),
    ("task.model.encoder=huge", "task.model.encoder: encoder must be one of"),
    ("task.model=tiny", "task.model: is a group of settings"),
    ("task=ict", "task: is a group of settings"),
    ("trainer.num_steps.x=1", "trainer.num_steps.x: num_steps is a setting"),
    ("task.refresh=never", "task.refresh: refresh must be 'async' or 'sync'"),
    ("task.model.reader_length=3", "task.model.reader_length: reader_length 3 must be >="),
    ("trainer.num_steps", "trainer.num_steps: not a key=value setting"),
])
def test_override_errors_name_the_key(text, message):
  with pytest.raises(errors.InputError) as raised:
    overrides.override(registry.get("pretrain"), text)
  assert message in str(raised.value)


def test_typed_values_are_checked():
  with pytest.raises(errors.InputError, match="trainer.num_steps: expects int, got 1.5"):
    overrides.override(registry.get("ict"), {"trainer.num_steps": 1.5})
  with pytest.raises(errors.InputError, match="task.share_towers: expects bool, got 1"):
    overrides.override(registry.get("ict"), {"task.share_towers": 1})


def test_registered_defaults_are_the_binaries():
  ict, pretrain, open_qa = (registry.get(n) for n in ("ict", "pretrain", "open_qa"))
  assert (ict.trainer.batch_size, ict.trainer.learning_rate, ict.task.remove_prob) == (
      32, 1e-4, 0.9)
  assert (pretrain.trainer.batch_size, pretrain.task.model.query_length,
          pretrain.task.refresh_every) == (16, 96, 500)
  assert (open_qa.trainer.num_steps, open_qa.trainer.checkpoint_every,
          open_qa.task.init.bert_weights) == (10000, 1000, "minilm")
  with pytest.raises(errors.InputError, match="qa: not a registered experiment"):
    registry.get("qa")


def test_the_three_trainers_start_alike_and_a_random_start_is_never_silent(caplog):
  assert {registry.get(n).task.init.bert_weights for n in ("ict", "pretrain", "open_qa")} == {
      "minilm"}
  # BERT weights fill only the towers no other source fills: no second source to refuse.
  presets.check_init_sources(presets.InitConfig(checkpoint="c", bert_weights="minilm"))
  with pytest.raises(errors.InputError, match="2 sources of the retriever"):
    presets.check_init_sources(presets.InitConfig(checkpoint="c", orqa="o"))
  config = tiny_world.model_config()
  for init in (presets.InitConfig(), tiny_world.INIT):
    caplog.clear()
    presets.initialize(*presets.build_models(config), config, init)
    lines = [r.getMessage() for r in caplog.records if "random weights" in r.getMessage()]
    assert lines == ["The retriever and the reader start from random weights "
                     "(--init_weights=random): fine for toy worlds and tests, not for real "
                     "text; pass --init_weights=minilm (or other BERT weights) to start from "
                     "trained ones"]


def test_config_file_round_trip(tmp_path):
  config = overrides.override(registry.get("open_qa"), TINY + ",trainer.model_dir=/x,"
                              "task.dev_data=dev.jsonl,trainer.retriever_learning_rate=0.5")
  path = str(tmp_path / EXPERIMENT_FILE)
  overrides.write_file(config, path, experiment="open_qa")
  assert registry.build("open_qa", path) == config
  assert registry.build("open_qa", path, "trainer.num_steps=3").trainer.num_steps == 3
  with pytest.raises(errors.InputError, match="holds a 'open_qa' experiment, not 'ict'"):
    registry.build("ict", path)
  (tmp_path / "bad.json").write_text('{"trainer": {"num_steps": "x"}}')
  with pytest.raises(errors.InputError, match="bad.json: trainer.num_steps: expects int"):
    registry.build("ict", str(tmp_path / "bad.json"))
  (tmp_path / "broken.json").write_text('{"trainer": ')
  with pytest.raises(errors.InputError, match="broken.json:1: not JSON"):
    registry.build("ict", str(tmp_path / "broken.json"))


def test_missing_settings_are_named(tmp_path):
  with pytest.raises(errors.InputError, match="trainer.model_dir: not set"):
    run_experiment(registry.get("ict"))
  config = overrides.override(registry.get("ict"), f"{TINY},trainer.model_dir={tmp_path}")
  with pytest.raises(errors.InputError, match="task.corpus: not set"):
    run_experiment(config)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
  """ICT -> pre-training -> Open-QA, each `init.checkpoint` the previous `model_dir`."""
  world, vocab = tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))
  root = tmp_path_factory.mktemp("runs")
  questions = tiny_world.write_open_qa(str(root / "open_qa")).train  # 12, about the blocks
  data = f"{TINY},task.corpus={world},task.vocab_file={vocab}"
  runs = {}
  runs["ict"] = registry.build("ict", params_override=(
      f"{data},trainer.model_dir={root / 'ict'},trainer.num_steps=2,trainer.batch_size=4,"
      "task.model.retriever_head=realm,task.model.projection_size=16,"
      f"task.dev_data={questions},trainer.eval_every=1,trainer.eval_max_examples=6"))
  runs["pretrain"] = registry.build("pretrain", params_override=(
      f"{data},trainer.model_dir={root / 'realm'},task.examples_dir={world},"
      f"task.init.checkpoint={root / 'ict'},trainer.num_steps=2,trainer.batch_size=4,"
      "task.num_candidates=4,task.refresh=sync,task.refresh_every=5,"
      f"task.index_kind=brute_force,task.dev_data={questions},trainer.eval_every=1"))
  runs["open_qa"] = registry.build("open_qa", params_override=(
      f"{data},trainer.model_dir={root / 'qa'},task.train_data={questions},"
      f"task.init.checkpoint={root / 'realm'},trainer.num_steps=2,trainer.batch_size=2,"
      "task.retriever_top_k=8,task.index_kind=brute_force,task.embedding_dtype=float32"))
  metrics = {name: run_experiment(config) for name, config in runs.items()}
  return runs, metrics


def test_each_stage_trains_and_writes_its_config(chain):
  runs, metrics = chain
  assert np.isfinite(metrics["ict"]["loss"]) and np.isfinite(metrics["pretrain"]["loss"])
  assert metrics["open_qa"]["step"] == 2
  for name, config in runs.items():
    path = os.path.join(config.trainer.model_dir, EXPERIMENT_FILE)
    with open(path, encoding="utf-8") as f:
      assert json.load(f)["experiment"] == name
    assert registry.build(name, path) == config


def test_pretraining_starts_from_the_ict_retriever(chain):
  runs, _ = chain
  ict, realm = (previous_run(runs[n].trainer.model_dir) for n in ("ict", "pretrain"))
  assert realm.structure["task"] == "pretrain"
  # The ICT run's retriever (head "realm", D = 16), not a new one of the pretrain defaults.
  assert realm.structure["retriever"] == ict.structure["retriever"]
  assert realm.retriever_head == "realm" and realm.structure["retriever"]["projection_size"] == 16
  assert runs["pretrain"].task.model.projection_size == 128


def test_dev_data_gives_ict_and_pretraining_held_out_recall(chain):
  """`task.dev_data`: recall@k over the whole corpus at the start and every `eval_every`
  steps (`eval.jsonl`), the best checkpoint in `best/`."""
  runs, _ = chain
  for name in ("ict", "pretrain"):
    model_dir = runs[name].trainer.model_dir
    evaluations = read_step_records(os.path.join(model_dir, EVAL_LOG))
    assert [e["step"] for e in evaluations] == [0, 1, 2], name
    # 16 blocks: recall@20 is dropped (`retrieval_recall.usable_ks`).
    assert all(0.0 <= e["recall@5"] <= 1.0 and "recall@20" not in e for e in evaluations), name
    assert tf.train.latest_checkpoint(os.path.join(model_dir, BEST_DIR)), name
  with pytest.raises(ValueError, match="empty.jsonl: no questions"):
    empty = os.path.join(os.path.dirname(runs["ict"].trainer.model_dir), "empty.jsonl")
    open(empty, "w", encoding="utf-8").close()
    run_experiment(overrides.override(runs["ict"], {
        "task.dev_data": empty,
        "trainer.model_dir": runs["ict"].trainer.model_dir + "_empty"}))


def test_fine_tuning_starts_from_the_pretraining_model_dir(chain):
  runs, _ = chain
  model = QAModel.load(find_model_dir(runs["open_qa"].trainer.model_dir))
  assert model.info.model.retriever_head == "realm"  # "auto": the pre-training run's head
  assert model.info.model.projection_size == 16
  with open(os.path.join(runs["open_qa"].trainer.model_dir, "metrics.jsonl")) as f:
    assert [json.loads(line)["step"] for line in f] == [1, 2]


def test_fine_tuning_goes_on_from_a_fine_tuned_model_dir(chain, tmp_path):
  """`init.checkpoint=<QA model dir>` (a second fine-tuning, as after the cloze warm-up): both
  retriever towers and the reader from its last checkpoint, its head and projection."""
  runs, _ = chain
  first = runs["open_qa"].trainer.model_dir
  previous = previous_run(first)
  assert previous.fine_tuned and previous.checkpoint_dir == first
  assert previous.retriever_head == "realm" and previous.projection_size == 16
  assert not previous.share_towers
  assert previous_run(os.path.join(first, BEST_DIR)) is None  # no run_config.json there
  second = str(tmp_path / "qa2")
  run_experiment(overrides.override(runs["open_qa"], {
      "task.init.checkpoint": first, "trainer.model_dir": second, "trainer.num_steps": 1,
      "trainer.learning_rate": 0.0}))
  with pytest.raises(errors.InputError, match="not the model directory of an ICT or pre-"):
    run_experiment(overrides.override(runs["pretrain"], {  # pre-training cannot start there
        "task.init.checkpoint": first, "trainer.model_dir": str(tmp_path / "realm2")}))
  before, after = (QAModel.load(d) for d in (first, second))
  assert after.info.model == before.info.model
  for name in ("retriever", "reader"):  # learning rate 0: the first run's weights, unchanged
    for old, new in zip(getattr(before, name).weights, getattr(after, name).weights):
      np.testing.assert_array_equal(old.numpy(), new.numpy(), err_msg=f"{name}: {new.name}")


def test_a_new_pretraining_reader_has_its_own_seed_and_span_head(chain, tmp_path):
  """`task.reader_seed`: a new reader's initialisation whatever `runtime.seed` (None: the
  stream `runtime.seed` starts); its span head is `task.model`'s."""
  runs, _ = chain

  def new_reader(seed, reader_seed):
    config = overrides.override(runs["pretrain"], {
        "task.init.checkpoint": "", "runtime.seed": seed, "task.reader_seed": reader_seed,
        "task.retriever_dir": os.path.join(runs["ict"].trainer.model_dir, "retriever"),
        "task.model.span_hidden_size": 8, "trainer.model_dir": str(tmp_path / "realm")})
    _, reader = PretrainTask(config, tf.distribute.get_strategy(), verbose=False).build_model()
    return reader

  readers = [new_reader(seed, reader_seed) for seed, reader_seed in (
      (1, 7), (2, 7), (1, None), (2, None))]
  assert all(r.span_scorer.span_hidden_size == 8 for r in readers)
  weights = [np.concatenate([w.ravel() for w in r.get_weights()]) for r in readers]
  np.testing.assert_array_equal(weights[0], weights[1])
  assert not np.array_equal(weights[2], weights[3])
  assert not np.array_equal(weights[0], weights[2])


def test_realm_train_binary_prints_the_final_config(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "realm_tf.train", "--experiment=ict", "--mode=print_config",
       "--params_override=trainer.num_steps=7,task.model.encoder=tiny"],
      capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert result.returncode == 0, result.stderr[-3000:]
  printed = json.loads(result.stdout)
  assert printed["experiment"] == "ict" and printed["trainer"]["num_steps"] == 7
  result = subprocess.run(
      [sys.executable, "-m", "realm_tf.train", "--experiment=ict",
       "--params_override=trainer.num_stepz=7"],
      capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert result.returncode == errors.EXIT_BAD_INPUT
  assert "realm-train: trainer.num_stepz: not a setting of TrainerConfig" in result.stderr


@pytest.mark.parametrize("stage", ["ict", "pretrain"])
def test_classification_starts_from_an_ict_or_pretraining_run(chain, tmp_path, stage):
  """`task.init.checkpoint`: an ICT run's saved retriever, or a pre-training run's retriever
  and reader; the frozen doc tower (the index's) stays that run's."""
  runs, _ = chain
  data = tmp_path / "claims.jsonl"
  data.write_text("".join(json.dumps({"text": f"{p.name} lives in {p.city} .", "label": label})
                          + "\n" for p, label in zip(tiny_world.PEOPLE, ["true", "false"] * 8)))
  config = registry.build("classification", params_override=(
      f"{TINY},task.corpus={runs['ict'].task.corpus},"
      f"task.vocab_file={runs['ict'].task.vocab_file},"
      f"task.train_data={data},task.init.checkpoint={runs[stage].trainer.model_dir},"
      f"trainer.model_dir={tmp_path / 'run'},trainer.num_steps=1,trainer.batch_size=4,"
      "task.reader_top_k=2"))
  task = ClassificationTask(config, tf.distribute.get_strategy(), verbose=False)
  retriever, _ = task.initialize(task.build_model())
  source = previous_run(runs[stage].trainer.model_dir)
  assert task.from_ict == (stage == "ict") and retriever.projection_size == 16
  saved = load_model(source.saved("retriever"))  # the run's last weights, as its checkpoint's
  for got, expected in zip(retriever.doc_encoder.get_weights(), saved.doc_encoder.get_weights()):
    np.testing.assert_array_equal(got, expected)
  assert task.run()["loss"] > 0
