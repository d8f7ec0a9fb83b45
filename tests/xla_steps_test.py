"""The TPU contract, checked on CPU: every replicated training step compiles with XLA.

TPUStrategy compiles the function given to `strategy.run` with XLA: static shapes, no host
ops (no MIPS search, no string ops, no Python callbacks). Each replicated step (ICT, REALM
pre-training, Open-QA fine-tuning) is compiled here with `tf.function(jit_compile=True)` on
a batch its host code prepared, and must give the losses of the plain `tf.function` for two
steps from the same weights and optimizer state. Dropout is off, so the steps are
deterministic; the tolerance allows XLA's and oneDNN's different summation orders.
"""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import tiny_world
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import PretrainTaskConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.presets import ModelConfig
from realm_tf.qa import finetune_lib
from realm_tf.qa import open_qa_step
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.training.ict_data import IctCorpus
from realm_tf.training.ict_lib import ict_step
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.pretraining_data import masked_query_dataset
from realm_tf.training.pretraining_lib import RealmPretrainer
from realm_tf.training.pretraining_lib import pretraining_step
import tiny_models

ENCODER = dataclasses.replace(tiny_models.ENCODER, dropout_rate=0.0, attention_dropout_rate=0.0,
                              initializer_range=0.2)
RTOL = 1e-4
ATOL = 1e-5


def _two_steps(step, batch, variables):
  """Per-step outputs of two steps of the `tf.function` `step` on `batch`, from the variables'
  values now (restored afterwards)."""
  start = [v.numpy() for v in variables]
  outputs = [{k: float(v) for k, v in step(batch).items()} for _ in range(2)]
  for variable, value in zip(variables, start):
    variable.assign(value)
  return outputs


def _assert_compiles_and_matches(step_fn, batch, models, optimizers):
  plain_step = tf.function(step_fn)
  plain_step(batch)  # creates the optimizer slots before the snapshot (traced once here)
  variables = [v for m in models for v in m.variables]
  variables += [v for o in optimizers for v in o.variables()]
  plain = _two_steps(plain_step, batch, variables)
  compiled = _two_steps(tf.function(step_fn, jit_compile=True), batch, variables)
  assert all(np.isfinite(list(o.values())).all() for o in compiled)
  for p, c in zip(plain, compiled):
    assert p.keys() == c.keys()
    for name in p:
      np.testing.assert_allclose(c[name], p[name], rtol=RTOL, atol=ATOL, err_msg=name)
  assert plain[1]["loss"] != plain[0]["loss"]  # the first step did update the weights


class _Captured(Exception):
  """Stops the trainer's step once the host has prepared its batch."""


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("world"))
  store, tokenizer = tiny_world.write_pipeline(directory)
  return directory, store, tokenizer


def test_ict_step_compiles_with_xla(world):
  _, store, tokenizer = world
  retriever, _ = tiny_models.retriever_and_reader(ENCODER)
  optimizer = create_optimizer(OptimizerConfig(learning_rate=1e-3, num_train_steps=10,
                                               warmup_steps=0))
  batch = next(iter(IctCorpus(store, tokenizer).dataset(8, query_length=12, block_length=24)))
  step_fn = ict_step(retriever, optimizer, global_batch_size=8)
  _assert_compiles_and_matches(step_fn, batch, [retriever], [optimizer])


def test_realm_pretraining_step_compiles_with_xla(world, tmp_path):
  directory, store, tokenizer = world
  retriever, reader = tiny_models.retriever_and_reader(ENCODER)
  refresher = SynchronousRefresher(str(tmp_path / "index"), 100, store,
                                   (tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id),
                                   kind="brute_force", block_length=24)
  config = ExperimentConfig(
      task=PretrainTaskConfig(examples_dir=directory, num_candidates=4,
                              model=ModelConfig(query_length=16, block_length=24)),
      trainer=TrainerConfig(model_dir=str(tmp_path / "run"), num_steps=10, batch_size=4,
                            learning_rate=1e-3))
  trainer = RealmPretrainer(config, retriever, reader, store, tokenizer, refresher)
  batches = []  # the host's step batch: searched candidates and packed reader inputs

  def capture(batch):  # the step is the one compiled below, not the trainer's own
    batches.append(batch)
    raise _Captured()

  trainer._train_step = capture  # pylint: disable=protected-access
  refresher.start(0, retriever)
  with pytest.raises(_Captured):
    trainer._step(next(iter(masked_query_dataset(  # pylint: disable=protected-access
        directory, tokenizer, 4, config.task.masking, 16, config.task.max_predictions))))
  step_fn = pretraining_step(retriever, reader, trainer.optimizer, null_document=True)
  _assert_compiles_and_matches(step_fn, batches[0], [retriever, reader], [trainer.optimizer])


def test_finetuning_step_compiles_with_xla(tmp_path):
  world = tiny_world.write_open_qa(str(tmp_path / "world"))
  model = tiny_world.model_config()
  model = dataclasses.replace(model, encoder=dataclasses.replace(
      model.encoder, dropout_rate=0.0, attention_dropout_rate=0.0))
  tuner = finetune_lib.FineTuner(ExperimentConfig(
      task=OpenQATaskConfig(corpus=world.corpus, train_data=world.train,
                            vocab_file=world.vocab_file, model=model, init=tiny_world.INIT,
                            retriever_top_k=16,
                            index_kind="brute_force", embedding_dtype="float32"),
      trainer=TrainerConfig(model_dir=str(tmp_path / "model"), batch_size=4, num_steps=10,
                            learning_rate=1e-3, warmup_steps=0, checkpoint_every=1000),
      runtime=RuntimeConfig(compute_dtype="float32")), log=lambda message: None)
  prepared = tuner.prepare_batch(tuner.train_examples[:4])
  batch = {name: tf.constant(value) for name, value in prepared.items()}
  step_fn = open_qa_step.make_replica_step(tuner.retriever, tuner.reader, tuner.optimizer, 4,
                                           tuner.retriever_optimizer)
  _assert_compiles_and_matches(step_fn, batch, [tuner.retriever, tuner.reader],
                               [tuner.optimizer, tuner.retriever_optimizer])
