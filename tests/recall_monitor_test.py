"""Held-out recall during training: the monitor against a brute-force oracle, and the train
loop's evaluation log, best checkpoint and ends-below-start warning."""
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf import tiny_world
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import IctTaskConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.models.saving import load_model
from realm_tf.presets import ModelConfig
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.tokenization.featurizers import QueryFeaturizer
from realm_tf.training.ict_lib import train_ict
from realm_tf.training.recall_monitor import RecallMonitor
from realm_tf.training.train_loop import Evaluation
from realm_tf.training.train_loop import TrainLoop

ENCODER = configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB))


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  store, tok = tiny_world.write_pipeline(str(tmp_path_factory.mktemp("world")))
  # "who works as a <job>": answered by the blocks of the entities with that job.
  jobs = sorted({text.split()[-1].rstrip(".") for text in store.texts})
  examples = [QAExample(f"who works as a {job}", (store.titles[row].title(),))
              for job in jobs for row in range(len(store)) if store.texts[row].endswith(f"{job}.")]
  return store, tok, examples


def _retriever(seed=0):
  tf.keras.utils.set_random_seed(seed)
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=ENCODER,
                                                              projection_size=16))
  retriever.build()
  return retriever


def _oracle(retriever, store, tok, examples, k):
  docs = embed_blocks(DocTower(retriever, tok.cls_id, tok.sep_id, tok.pad_id, block_length=24),
                      store.title_ids, store.body_ids)
  features = QueryFeaturizer(tok, seq_length=16)(tf.constant([e.question for e in examples]))
  queries = retriever.embed_query(features, training=False).numpy()
  ranked = np.argsort(-(queries @ docs.T), axis=1, kind="stable")[:, :k]
  return np.mean([any(AnswerMatcher(e.answers).has_answer(store.texts[r]) for r in rows)
                  for e, rows in zip(examples, ranked)])


def test_recall_matches_a_brute_force_oracle(world):
  store, tok, examples = world
  retriever = _retriever()
  monitor = RecallMonitor(store, examples, tok, every_n_steps=5, ks=(1, 3),
                          query_length=16, block_length=24)
  result = monitor(retriever)
  assert result == {"recall@1": pytest.approx(_oracle(retriever, store, tok, examples, 1)),
                    "recall@3": pytest.approx(_oracle(retriever, store, tok, examples, 3))}
  docs = embed_blocks(DocTower(retriever, tok.cls_id, tok.sep_id, tok.pad_id, block_length=24),
                      store.title_ids, store.body_ids)
  index = BruteForceIndex(docs)
  searched = monitor(retriever, lambda q, k: index.search(q, k=k)[1].numpy())
  assert searched == pytest.approx(result)


def test_monitor_arguments(world):
  store, tok, examples = world
  with pytest.raises(ValueError, match="at least one dev question"):
    RecallMonitor(store, [], tok, 5)
  with pytest.raises(ValueError, match="not one of the cut-offs"):
    RecallMonitor(store, examples, tok, 5, ks=(5,), metric="recall@20")


def test_loop_keeps_the_best_checkpoint_and_warns_when_it_ends_below_start(tmp_path, caplog):
  weight = tf.Variable(0.0)
  values = iter([0.5, 0.6, 0.4, 0.3])  # steps 0, 2, 4, 6: best at 2, ends below start

  def step_fn(step):
    weight.assign_add(1.0)
    return {"loss": 1.0 / (step + 1)}

  loop = TrainLoop(str(tmp_path), dict(weight=weight), num_steps=6, verbose=False)
  with caplog.at_level(logging.WARNING, logger="absl"):
    loop.run(step_fn, evaluation=Evaluation(lambda: {"recall@5": next(values)}, 2, "recall@5"))
  assert [e["step"] for e in loop.evaluations()] == [0, 2, 4, 6]
  assert loop.best()["step"] == 2 and loop.best()["recall@5"] == 0.6
  assert loop.ended_below_start and "ENDED BELOW ITS START" in caplog.text
  assert loop.restore_best() == 2 and float(weight.numpy()) == 2.0
  with pytest.raises(KeyError, match="not the metric"):
    TrainLoop(str(tmp_path / "other"), dict(weight=weight), 1, verbose=False).run(
        step_fn, evaluation=Evaluation(lambda: {"recall@20": 1.0}, 1, "recall@5"))


def test_resumed_loop_continues_the_evaluation_log(tmp_path):
  weight = tf.Variable(0.0)
  values = iter([0.1, 0.2, 0.3])
  evaluation = Evaluation(lambda: {"recall@5": next(values)}, 2, "recall@5")
  TrainLoop(str(tmp_path), dict(weight=weight), 2, verbose=False).run(
      lambda _: {"loss": 0.0}, evaluation=evaluation)
  loop = TrainLoop(str(tmp_path), dict(weight=weight), 4, verbose=False)
  loop.run(lambda _: {"loss": 0.0}, evaluation=evaluation)
  assert [(e["step"], e["recall@5"]) for e in loop.evaluations()] == [(0, 0.1), (2, 0.2),
                                                                     (4, 0.3)]
  assert not loop.ended_below_start and loop.best()["step"] == 4


def test_ict_with_a_monitor_writes_the_best_retriever(world, tmp_path):
  store, tok, examples = world
  retriever = _retriever()
  monitor = RecallMonitor(store, examples, tok, every_n_steps=4, ks=(1, 3),
                          query_length=16, block_length=24)
  train_ict(ExperimentConfig(task=IctTaskConfig(model=ModelConfig(query_length=16,
                                                                  block_length=24)),
                             trainer=TrainerConfig(model_dir=str(tmp_path), num_steps=8,
                                                   batch_size=8, learning_rate=1e-3,
                                                   checkpoint_every=4)),
            retriever, store, tok, verbose=False, monitor=monitor)
  with open(os.path.join(tmp_path, "eval.jsonl")) as f:
    evaluations = [json.loads(line) for line in f]
  assert [e["step"] for e in evaluations] == [0, 4, 8]
  best = max(evaluations, key=lambda e: (e["recall@1"], -e["step"]))
  saved = load_model(os.path.join(tmp_path, "retriever"))
  assert monitor(saved)["recall@1"] == pytest.approx(best["recall@1"])
