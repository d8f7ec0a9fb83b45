"""TF Hub's Reusable SavedModel interface, shared by every export.

Each exported module is a `tf.train.Checkpoint` (as TF Hub's own exporters use, so that these
are plain attributes the SavedModel keeps) with `variables`, `trainable_variables` (what
`hub.KerasLayer(path, trainable=True)` trains), `regularization_losses` ([]: weight decay
belongs to the user's optimizer) and a `__call__(inputs, training=False)` traced for both
`training` values, which `hub.KerasLayer` calls with its Keras model's training mode.

`tower_outputs` gives the encoder exports TF Hub's Transformer-encoder outputs for N inputs of
length L: "pooled_output" and "default" [N, H] (the tower's own pooling), "sequence_output"
[N, L, H], "encoder_outputs" (one [N, L, H] per layer), plus the retrieval "embeddings" [N, D].
"""
import contextlib
from typing import Any, Callable, Dict, Sequence

import tensorflow as tf

from realm_tf.keras import keras
from realm_tf.models.retriever import Features
from realm_tf.models.retriever import pool


class ReusableModule(tf.train.Checkpoint):
  """Base of the exported modules: sets the three Reusable SavedModel attributes.

  Args:
    weights: the model weights `__call__` reads (the trainable ones are fine-tuned).
    state: other variables it reads (non-trainable: attributes, an index, a corpus).
  """

  def __init__(self, weights: Sequence[tf.Variable], state: Sequence[tf.Variable] = ()):
    super().__init__()
    unique = lambda variables: list({id(v): v for v in variables}.values())
    self.variables = unique(list(weights) + list(state))
    self.trainable_variables = [v for v in unique(weights) if v.trainable]
    self.regularization_losses = []

  def trace_call(self, *input_specs) -> None:
    """Traces `__call__` for each input structure, with `training` True and False."""
    for spec in input_specs:
      for training in (False, True):
        self.__call__.get_concrete_function(spec, training=training)

  def save(self, path: str, input_specs: Sequence[Any],
           signatures: Dict[str, Callable[[], Any]]) -> None:
    """Writes the SavedModel at `path`: `__call__` traced for each of `input_specs`
    (`trace_call`), and `signatures` {name: () -> its concrete function}, e.g. the
    `get_concrete_function` of a tf.function with an input signature.

    `tf.saved_model.save` re-creates every concrete function under its own tracing context,
    in which a function traced outside it misses the cache and is traced again (TF 2.20:
    the save options' variable policy is part of the key). Tracing under that context first
    makes save reuse the traces, so each function is traced once (half the export time of
    the end-to-end module)."""
    options = tf.saved_model.SaveOptions()
    with _tracing_context_of_save(options):
      self.trace_call(*input_specs)
      signatures = {name: concrete() for name, concrete in signatures.items()}
    tf.saved_model.save(self, path, signatures=signatures, options=options)


def _tracing_context_of_save(options: tf.saved_model.SaveOptions):
  """The context `tf.saved_model.save(..., options=options)` traces in (TensorFlow's internal
  `save_context`; a no-op where a TensorFlow version lacks it: save then traces again)."""
  try:
    from tensorflow.python.saved_model import save_context  # pylint: disable=g-import-not-at-top
  except ImportError:
    return contextlib.nullcontext()
  return save_context.save_context(options)


def tower_outputs(encoder: keras.layers.Layer, head: keras.layers.Layer, features: Features,
                  pooling: str, training: bool) -> Dict[str, object]:
  """int [N, L] features -> the encoder outputs of one tower (see the module docstring);
  "embeddings" is unscaled (the query embedder multiplies it by its `score_scale`)."""
  features = {n: tf.cast(t, tf.int32) for n, t in features.items()}
  outputs = encoder(features, training=training)
  pooled = pool(outputs, features["input_mask"], pooling)
  as_float = lambda t: tf.cast(t, tf.float32)
  return {
      "pooled_output": as_float(pooled),
      "default": as_float(pooled),
      "sequence_output": as_float(outputs["sequence_output"]),
      "encoder_outputs": [as_float(t) for t in outputs["encoder_outputs"]],
      "embeddings": as_float(head(pooled)),
  }
