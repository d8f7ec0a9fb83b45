"""Open-QA span head of the reader (ORQA / REALM fine-tuning)."""
from typing import Tuple

import numpy as np
import tensorflow as tf

from realm_tf.keras import keras


def span_candidates(seq_length: int, max_span_width: int) -> Tuple[np.ndarray, np.ndarray]:
  """All spans of width 1..max_span_width in a sequence, width-major (as ORQA orders them).

  Returns:
    starts, ends: int32 [S] with ends inclusive, S = sum_w (seq_length - w + 1).
  """
  starts, ends = [], []
  for width in range(1, min(max_span_width, seq_length) + 1):
    starts.append(np.arange(0, seq_length - width + 1))
    ends.append(np.arange(width - 1, seq_length))
  return np.concatenate(starts).astype(np.int32), np.concatenate(ends).astype(np.int32)


def dynamic_span_candidates(seq_length: tf.Tensor, max_span_width: int
                            ) -> Tuple[tf.Tensor, tf.Tensor]:
  """`span_candidates` of a sequence length known only when the graph runs (a scalar)."""
  widths = tf.range(1, max_span_width + 1)
  counts = tf.maximum(seq_length - widths + 1, 0)
  starts = tf.ragged.range(tf.zeros_like(counts), counts).flat_values
  return starts, starts + tf.repeat(widths - 1, counts)


def sequence_span_candidates(sequence_output: tf.Tensor, max_span_width: int
                             ) -> Tuple[tf.Tensor, tf.Tensor]:
  """The spans (starts, ends: int32 [S]) of [N, L, H] `sequence_output`: constants when L is
  static, else computed when the graph runs (inputs cut to their longest row,
  `RetrieveAndRead.read`)."""
  seq_length = sequence_output.shape[1]
  if seq_length is None:
    return dynamic_span_candidates(tf.shape(sequence_output)[1], max_span_width)
  return tuple(tf.constant(c) for c in span_candidates(seq_length, max_span_width))


def mask_spans_outside(logits: tf.Tensor, block_mask: tf.Tensor, starts: tf.Tensor,
                       ends: tf.Tensor) -> tf.Tensor:
  """[N, S] `logits` with `masked_logit_value` where a span's start or end is outside the
  block ([N, L] `block_mask` 0)."""
  block_mask = tf.cast(block_mask, tf.bool)
  span_mask = tf.logical_and(tf.gather(block_mask, starts, axis=1),
                             tf.gather(block_mask, ends, axis=1))
  return tf.where(span_mask, logits, tf.cast(masked_logit_value(logits.dtype), logits.dtype))


def masked_logit_value(dtype: tf.DType) -> float:
  """A finite, very negative logit for excluded candidates; half the dtype's minimum so that
  adding another logit never overflows to -inf."""
  return float(dtype.min) / 2


@keras.utils.register_keras_serializable(package="realm_tf")
class SpanScorer(keras.layers.Layer):
  """Scores every span with both ends inside the block.

  score(s, e) = Dense(1)(LayerNorm(relu(start_proj[s] + end_proj[e]))), where start_proj and
  end_proj are the two halves of Dense(2 * span_hidden_size) over the sequence output.
  Spans with an end outside `block_mask` get `masked_logit_value(dtype)`.

  Args:
    span_hidden_size: width of each projection half (ORQA: 256).
    max_span_width: longest span in wordpieces (ORQA: 10).
    layer_norm_epsilon: ORQA uses 1e-3.
  """

  def __init__(self, span_hidden_size: int = 256, max_span_width: int = 10,
               layer_norm_epsilon: float = 1e-3, initializer_range: float = 0.02, **kwargs):
    super().__init__(**kwargs)
    self.span_hidden_size = span_hidden_size
    self.max_span_width = max_span_width
    self.layer_norm_epsilon = layer_norm_epsilon
    self.initializer_range = initializer_range
    self.projection = keras.layers.Dense(
        2 * span_hidden_size,
        kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="dense")
    self.layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon,
                                                      name="layer_normalization")
    self.output_dense = keras.layers.Dense(
        1, kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="dense_1")

  def call(self, sequence_output, block_mask, input_mask=None):
    """Scores all candidate spans.

    Args:
      sequence_output: [N, L, H] reader output for N (question, block) inputs.
      block_mask: [N, L] 1 where a span may start or end (block body wordpieces).
      input_mask: unused (`MarkerSpanScorer`'s markers attend to the tokens it marks).

    Returns:
      logits [N, S], starts [S] int32, ends [S] int32 (ends inclusive).
    """
    starts, ends = sequence_span_candidates(sequence_output, self.max_span_width)
    projected = self.projection(sequence_output)  # [N, L, 2*P]
    start_proj, end_proj = tf.split(projected, 2, axis=-1)  # [N, L, P] each
    hidden = tf.gather(start_proj, starts, axis=1) + tf.gather(end_proj, ends, axis=1)
    hidden = self.layer_norm(tf.nn.relu(hidden))  # [N, S, P]
    logits = tf.squeeze(self.output_dense(hidden), -1)  # [N, S]
    return mask_spans_outside(logits, block_mask, starts, ends), starts, ends

  def get_config(self):
    return dict(super().get_config(), span_hidden_size=self.span_hidden_size,
                max_span_width=self.max_span_width, layer_norm_epsilon=self.layer_norm_epsilon,
                initializer_range=self.initializer_range)
