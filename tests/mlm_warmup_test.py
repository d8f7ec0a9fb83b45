"""The MLM-head warm-up before REALM: it raises the held-out MLM accuracy, resumes after an
interruption, and the pre-training task runs it only for a new reader without an MLM head."""
import dataclasses
import functools
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.checkpoints import variable_maps
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiments.pretrain_task import PretrainTask
from realm_tf.experiments.pretrain_task import WARMUP_DIR
from realm_tf.models.saving import save_model
from realm_tf.retrieval.corpus import Corpus
from realm_tf.training.mlm_warmup import METRIC
from realm_tf.training.mlm_warmup import MlmWarmup
from realm_tf.training.train_loop import EVAL_LOG
from realm_tf.training.train_loop import read_step_records

TOKENIZER = tiny_world.tokenizer()
ENCODER = configs.EncoderConfig.tiny(vocab_size=TOKENIZER.vocab_size)
SETTINGS = dict(batch_size=8, learning_rate=1e-2, block_length=24, max_predictions=4,
                held_out_blocks=32)


def _people(num_blocks=128, seed=0) -> Corpus:
  """People blocks ("Ada lives in Rome. Ada works as a pilot.") over the people vocabulary."""
  rng = np.random.default_rng(seed)
  names = [tiny_world.NAMES[i % len(tiny_world.NAMES)] for i in range(num_blocks)]
  texts = [f"{n.title()} lives in {rng.choice(tiny_world.CITIES).title()}. {n.title()} works "
           f"as a {rng.choice(tiny_world.JOBS)}." for n in names]
  return Corpus.from_blocks(range(1, num_blocks + 1), names, texts, source="people")


def _reader(seed=0, encoder=ENCODER):
  tf.keras.utils.set_random_seed(seed)
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder, span_hidden_size=8))
  reader.build()
  return reader


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_warm_up_raises_held_out_mlm_accuracy(tmp_path, seed):
  """Held-out blocks (never trained on): their 64 masked wordpieces go from chance (measured
  0.00-0.03 over seeds 0-3) to the template's words (0.55-0.73 after 60 steps, encoder
  trained; 0.55-0.73 over seeds 0-4 with the head alone over the random encoder)."""
  reader = _reader(seed)
  warmup = MlmWarmup(reader, _people(seed=seed), TOKENIZER, str(tmp_path), num_steps=60,
                     seed=seed, **SETTINGS)
  accuracy = warmup.train(verbose=False)
  assert len(warmup.held_out_rows) == 32 and not set(warmup.held_out_rows) & set(
      warmup.train_rows)
  assert accuracy["start"] < 0.15 and accuracy["end"] > 0.35, accuracy
  evaluations = read_step_records(os.path.join(tmp_path, EVAL_LOG))
  assert [e["step"] for e in evaluations] == [0, 60]
  assert evaluations[0]["held_out_masked_tokens"] >= 48


@pytest.mark.parametrize("train_encoder", [True, False])
def test_warm_up_trains_the_head_and_the_encoder_or_the_head_alone(tmp_path, train_encoder):
  reader = _reader()
  encoder = [(v, v.numpy().copy()) for v in reader.encoder.trainable_variables]
  table = reader.encoder.get_embedding_table()
  head = [(v, v.numpy().copy()) for v in reader.masked_lm.trainable_variables if v is not table]
  warmup = MlmWarmup(reader, _people(), TOKENIZER, str(tmp_path), num_steps=3,
                     train_encoder=train_encoder, **SETTINGS)
  warmup.train(verbose=False)
  assert warmup._train_step.experimental_get_tracing_count() == 1  # pylint: disable=protected-access
  changed = [v.name for v, before in head if not np.array_equal(before, v.numpy())]
  assert len(changed) == 5, changed  # Dense kernel and bias, LayerNorm γ and β, output bias
  changed = {v.name for v, before in encoder if not np.array_equal(before, v.numpy())}
  if train_encoder:  # all but the pooler, which masked-LM does not use
    assert table.name in changed and len(changed) == len(encoder) - 2, changed
  else:  # tied word embeddings included
    assert not changed, changed


def test_resume_after_interruption_continues_from_the_checkpoint(tmp_path):
  """A run stopped after its step-5 checkpoint resumes there and ends where an uninterrupted
  run ends: the same batches, masks and optimizer state (no dropout, whose draws are not
  checkpointed)."""
  store = _people()
  reader = functools.partial(_reader, encoder=dataclasses.replace(
      ENCODER, dropout_rate=0.0, attention_dropout_rate=0.0))
  whole = reader()
  MlmWarmup(whole, store, TOKENIZER, str(tmp_path / "whole"), num_steps=10,
            checkpoint_every=5, **SETTINGS).train(verbose=False)

  interrupted = MlmWarmup(reader(), store, TOKENIZER, str(tmp_path / "cut"), num_steps=10,
                          checkpoint_every=5, **SETTINGS)
  step = interrupted._step

  def stopping_step(batch):
    if interrupted.loop.step.numpy() == 7:
      raise RuntimeError("killed")
    return step(batch)

  interrupted._step = stopping_step
  with pytest.raises(RuntimeError, match="killed"):
    interrupted.train(verbose=False)
  resumed_reader = reader(seed=9)  # other initial weights: all of them come from the checkpoint
  resumed = MlmWarmup(resumed_reader, store, TOKENIZER, str(tmp_path / "cut"), num_steps=10,
                      checkpoint_every=5, **SETTINGS)
  resumed.train(verbose=False)
  assert [r["step"] for r in resumed.loop.history] == [6, 7, 8, 9, 10]
  assert [r["step"] for r in read_step_records(str(tmp_path / "cut" / "metrics.jsonl"))] == (
      list(range(1, 11)))
  for expected, actual in zip(whole.masked_lm.weights, resumed_reader.masked_lm.weights):
    np.testing.assert_allclose(actual.numpy(), expected.numpy(), rtol=1e-4, atol=1e-5)


def test_a_corpus_too_small_to_hold_blocks_out_is_refused(tmp_path):
  with pytest.raises(errors.InputError, match="3 blocks: the MLM warm-up holds a quarter"):
    MlmWarmup(_reader(), _people(num_blocks=3), TOKENIZER, str(tmp_path), num_steps=1)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  directory, vocab = tiny_world.write_pipeline_and_vocab(tmp_path_factory.mktemp("world"))
  weights = {}
  for head in (True, False):  # Google BERT TF1 checkpoints of the tiny size, with(out) a head
    reader = _reader(seed=5)
    arrays = checkpoints.tf1_arrays(variable_maps.bert_map(reader.encoder))
    if head:
      arrays.update(checkpoints.tf1_arrays(variable_maps.mlm_head_map(reader)))
    weights[head] = checkpoints.write_tf1_checkpoint(
        arrays, str(directory / f"bert_{head}" / "bert_model.ckpt"))
  saved_reader = str(directory / "saved_reader")
  save_model(_reader(), saved_reader)
  return directory, vocab, weights, saved_reader


def _task(tmp_path, world, bert_weights, reader_dir=""):
  directory, vocab, _, _ = world
  config = overrides.override(registry.get("pretrain"), (
      "task.model.encoder=tiny,task.model.encoder.dropout_rate=0,"
      "task.model.query_length=16,task.model.block_length=24,runtime.compute_dtype=float32,"
      f"task.corpus={directory},task.examples_dir={directory},task.vocab_file={vocab},"
      f"trainer.model_dir={tmp_path},task.init.bert_weights={bert_weights},"
      f"task.reader_dir={reader_dir},task.mlm_warmup_steps=4"))
  task = PretrainTask(config, tf.distribute.get_strategy(), verbose=False)
  _, reader = task.initialize(task.build_model())
  return task, reader


def test_pretraining_warms_up_a_new_reader_without_an_mlm_head(tmp_path, world, caplog):
  caplog.set_level(logging.INFO, logger="absl")  # absl.logging may sit at WARNING
  task, reader = _task(tmp_path, world, world[2][False])
  task.warm_up_reader(reader, task.build_inputs())
  evaluations = read_step_records(os.path.join(tmp_path, WARMUP_DIR, EVAL_LOG))
  assert [e["step"] for e in evaluations] == [0, 4]
  assert f"reader MLM accuracy at the start of REALM: {evaluations[-1][METRIC]:.4f}" in (
      caplog.text)
  with open(os.path.join(tmp_path, WARMUP_DIR, "checkpoints", "run_config.json")) as f:
    assert json.load(f)["task"] == "mlm_warmup"


@pytest.mark.parametrize("has_head, saved, reason", [
    (True, False, "has an MLM head"), (False, True, "the reader is a saved one")])
def test_pretraining_skips_the_warm_up(tmp_path, world, caplog, has_head, saved, reason):
  caplog.set_level(logging.INFO, logger="absl")  # absl.logging may sit at WARNING
  task, reader = _task(tmp_path, world, world[2][has_head], world[3] if saved else "")
  task.warm_up_reader(reader, task.build_inputs())
  assert f"MLM warm-up skipped: {world[2][has_head] if has_head else ''}" in caplog.text
  assert reason in caplog.text
  assert not os.path.exists(os.path.join(tmp_path, WARMUP_DIR))


def test_resumed_pretraining_does_not_warm_up_again(tmp_path, world, caplog):
  caplog.set_level(logging.INFO, logger="absl")  # absl.logging may sit at WARNING
  task, reader = _task(tmp_path, world, world[2][False])
  tf.train.Checkpoint(reader=reader).write(os.path.join(tmp_path, "checkpoints", "ckpt-3"))
  with open(os.path.join(tmp_path, "checkpoints", "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-3"\n')
  task.warm_up_reader(reader, task.build_inputs())
  assert "MLM warm-up skipped: REALM pre-training resumes from" in caplog.text
  assert not os.path.exists(os.path.join(tmp_path, WARMUP_DIR))
