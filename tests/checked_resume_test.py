"""Checked resumes: every trainer saves its structural configuration with the first
checkpoint; a resume with another one stops with a one-line diff and the fix, and a restore
that would leave a model variable at its random initialisation is an error."""
import dataclasses
import json
import os
import shutil

import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import IctTaskConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import PretrainTaskConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.presets import ModelConfig
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from realm_tf.training import run_config
from realm_tf.training.ict_lib import train_ict
from realm_tf.training.pretraining_lib import RealmPretrainer
import tiny_models

FIX = "Resume with the original flags, or train into a new --model_dir than"


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  directory = str(tmp_path_factory.mktemp("world"))
  store, tokenizer = tiny_world.write_pipeline(directory)
  return directory, store, tokenizer


def _retriever(share_towers=True, num_layers=2):
  return tiny_models.retriever(dataclasses.replace(tiny_models.ENCODER, num_layers=num_layers),
                               projection_size=16, share_towers=share_towers)


def _ict(world, model_dir, num_steps, **structure):
  _, store, tok = world
  experiment = ExperimentConfig(
      task=IctTaskConfig(model=ModelConfig(query_length=12, block_length=24)),
      trainer=TrainerConfig(model_dir=model_dir, num_steps=num_steps, batch_size=4,
                            checkpoint_every=1))
  return train_ict(experiment, _retriever(**structure), store, tok, verbose=False)


def _pretrain(world, model_dir, num_steps, **structure):
  directory, store, tok = world
  reader = configs.build_reader(configs.ReaderConfig(encoder=tiny_models.ENCODER,
                                                     span_hidden_size=8))
  reader.build()
  refresher = SynchronousRefresher(os.path.join(model_dir, "index"), 10, store,
                                   (tok.cls_id, tok.sep_id, tok.pad_id), kind="brute_force",
                                   block_length=24)
  experiment = ExperimentConfig(
      task=PretrainTaskConfig(examples_dir=directory, num_candidates=2,
                              model=ModelConfig(query_length=16, block_length=24)),
      trainer=TrainerConfig(model_dir=model_dir, num_steps=num_steps, batch_size=4,
                            learning_rate=3e-5, checkpoint_every=1))
  return RealmPretrainer(experiment, _retriever(**structure), reader, store, tok,
                         refresher).train(verbose=False)


TRAINERS = {"ict": _ict, "pretrain": _pretrain}


@pytest.fixture(scope="module")
def trained(world, tmp_path_factory):
  """{trainer: a model_dir trained one step}; the original flags then resume it."""
  runs = {}
  for name, train in TRAINERS.items():
    runs[name] = str(tmp_path_factory.mktemp(name) / "run")
    train(world, runs[name], 1)
  return runs


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("change,diff", [
    (dict(share_towers=False), "retriever.share_towers: saved True, now False"),
    (dict(num_layers=1), "retriever.encoder.num_layers: saved 2, now 1"),
    (None, None),
])
def test_resume_with_another_structure_stops_with_the_diff(world, trained, tmp_path, trainer,
                                                            change, diff):
  model_dir = str(tmp_path / "run")
  shutil.copytree(os.path.join(trained[trainer], "checkpoints"),
                  os.path.join(model_dir, "checkpoints"))
  saved = os.path.join(model_dir, "checkpoints", run_config.RUN_CONFIG)
  assert json.load(open(saved))["task"] == trainer
  if change is None:  # the original flags resume
    TRAINERS[trainer](world, model_dir, 2)
    assert tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")).endswith("-2")
    return
  with pytest.raises(errors.InputError) as error:
    TRAINERS[trainer](world, model_dir, 2, **change)
  message = str(error.value)
  assert "\n" not in message
  assert message.startswith(f"{saved}: this run's configuration differs from the one its "
                            f"checkpoints were trained with ({diff})")
  assert f"{FIX} {model_dir}." in message


@pytest.mark.parametrize("saved,now", [(True, False), (False, True)])
def test_restore_verifies_every_model_variable(tmp_path, saved, now):
  """A checkpoint of shared towers cannot fill a separate doc tower (it would stay random);
  the other way round, the unused doc tower is ignored but the shared tower is restored."""
  path = tf.train.Checkpoint(retriever=_retriever(share_towers=saved)).save(str(tmp_path / "c"))
  target = tf.train.Checkpoint(retriever=_retriever(share_towers=now))
  if saved and not now:
    with pytest.raises(errors.InputError) as error:
      tf2_checkpoint.restore_checked(target, path)
    assert str(error.value).startswith(f"{path}: the checkpoint does not hold every variable "
                                       "of the model, which would stay at its random")
    assert str(error.value).endswith(
        "Restore it into a model of the configuration it was trained with.")
  else:
    tf2_checkpoint.restore_checked(target, path)


def test_finetune_resume_with_another_model_config_stops(tmp_path):
  world = tiny_world.write_open_qa(str(tmp_path / "world"))
  task = OpenQATaskConfig(corpus=world.corpus, train_data=world.train,
                          vocab_file=world.vocab_file, model=tiny_world.model_config(),
                          init=tiny_world.INIT, retriever_top_k=8, index_kind="brute_force", embedding_dtype="float32")
  trainer = TrainerConfig(model_dir=str(tmp_path / "model"), batch_size=2, num_steps=1,
                          learning_rate=1e-5, checkpoint_every=1)
  runtime = RuntimeConfig(compute_dtype="float32")
  FineTuner(ExperimentConfig(task, trainer, runtime), log=lambda _: None).loop.save()
  other = dataclasses.replace(task.model, span_hidden_size=4)
  with pytest.raises(errors.InputError, match=r"run_config.json: this run's configuration "
                     r"differs .*\(model.span_hidden_size: saved \d+, now 4\)"):
    FineTuner(ExperimentConfig(dataclasses.replace(task, model=other),
                               dataclasses.replace(trainer, num_steps=2), runtime),
              log=lambda _: None)
