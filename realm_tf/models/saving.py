"""Hand-off of trained models between stages (ICT -> pre-training -> fine-tuning).

A model directory holds `config.json` (the Keras serialization: encoder sizes, towers, heads)
and `weights/` (a `tf.train.Checkpoint` of the model), so the next stage rebuilds the exact
architecture without being told it.
"""
import json
import os

import tensorflow as tf

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


def load_model(directory: str) -> keras.Model:
  """Rebuilds and restores a model written by `save_model`."""
  config_path = os.path.join(directory, "config.json")
  if not tf.io.gfile.exists(config_path):
    raise FileNotFoundError(f"no saved model at {directory} (missing config.json)")
  with tf.io.gfile.GFile(config_path) as f:
    model = keras.layers.deserialize(json.load(f))
  model.build()
  tf.train.Checkpoint(model=model).read(
      os.path.join(directory, "weights", "model")).assert_existing_objects_matched()
  return model
