"""Hand-off of trained models between stages (ICT -> pre-training -> fine-tuning).

A model directory holds `config.json` (the Keras serialization: encoder sizes, towers, heads)
and `weights/` (a `tf.train.Checkpoint` of the model), so the next stage rebuilds the exact
architecture without being told it.
"""
import json
import os
from typing import Optional

import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.keras import keras
from realm_tf.models.reader import Reader  # pylint: disable=unused-import (registers)
from realm_tf.models.retriever import Retriever  # pylint: disable=unused-import (registers)


def save_model(model: keras.Model, directory: str) -> str:
  """Writes `config.json` and `weights/` for `model`; returns `directory`."""
  tf.io.gfile.makedirs(directory)
  with tf.io.gfile.GFile(os.path.join(directory, "config.json"), "w") as f:
    json.dump(keras.layers.serialize(model), f, indent=1, default=str)
  tf.train.Checkpoint(model=model).write(os.path.join(directory, "weights", "model"))
  return directory


def load_model(directory: str, vocab_size: Optional[int] = None,
               vocab_file: str = "") -> keras.Model:
  """Rebuilds and restores a model written by `save_model`.

  Raises:
    errors.InputError: its embedding table has other than `vocab_size` rows (the wordpieces of
      `vocab_file`, when given), or its weights are truncated, damaged or of another model.
  """
  config_path = os.path.join(directory, "config.json")
  if not tf.io.gfile.exists(config_path):
    raise FileNotFoundError(f"no saved model at {directory} (missing config.json)")
  with tf.io.gfile.GFile(config_path) as f:
    model = keras.layers.deserialize(json.load(f))
  model.build()
  if vocab_size is not None:
    encoder = model.encoder if isinstance(model, Reader) else model.query_encoder
    rows = int(encoder.get_embedding_table().shape[0])
    if rows != vocab_size:
      raise errors.InputError(errors.describe(
          directory, f"a {type(model).__name__.lower()} of a {rows}-wordpiece vocabulary (its "
          f"embedding table), but {vocab_file or 'the vocabulary'} has {vocab_size} wordpieces",
          "Pass the --vocab_file it was trained with, or another saved tower"))
  tf2_checkpoint.restore_checked(tf.train.Checkpoint(model=model),
                                 os.path.join(directory, "weights", "model"), read=True)
  return model
