"""The patent's span reader (eq. 7-9, FIG. 9): start and end marker tokens around a span,
read by two separate transformers, their two vectors through an MLP.

For a span s = (i, j) a start marker goes before token i and an end marker after token j;
TRANS_START's output at the start marker and TRANS_END's at the end marker are h_START(s) and
h_END(s), and score(s) = MLP([h_START(s); h_END(s)]). Here each TRANS is one post-LayerNorm
transformer layer over the reader encoder's sequence output, and a marker's input is its
learned embedding plus the output at the token it marks. Only the marker rows are read, so for
every span at once the layer computes them in closed form: a marker attends to the L tokens
(one attention row per position, shared by every span starting there) and to the span's two
markers (two extra keys per span), [N, L, L] work plus [N, S, H] per span, instead of one
transformer pass over each marked sequence, which is what `tests/marker_span_scorer_test.py`
computes with numpy to check it. The lower layers do not see the markers (one encoder pass per
(x, z), as ORQA's reader): docs/decisions.md.
"""
import math

import tensorflow as tf

from realm_tf.keras import keras
from realm_tf.layers import activations
from realm_tf.layers.span_scorer import mask_spans_outside
from realm_tf.layers.span_scorer import sequence_span_candidates


def _dense(units: int, initializer_range: float, name: str, activation=None):
  return keras.layers.Dense(
      units, activation=activation, name=name,
      kernel_initializer=keras.initializers.TruncatedNormal(stddev=initializer_range))


class _MarkerTransformer(keras.layers.Layer):
  """One transformer layer's output at a marker: attention (`num_heads` heads) over the
  sequence and the two markers, residual + LayerNorm, GELU feed-forward of `inner_size`
  units, residual + LayerNorm (BERT's post-LayerNorm block)."""

  def __init__(self, hidden_size: int, num_heads: int, inner_size: int,
               initializer_range: float, epsilon: float, **kwargs):
    super().__init__(**kwargs)
    if hidden_size % num_heads:
      raise ValueError(f"hidden size {hidden_size} is not a multiple of {num_heads} heads")
    self.num_heads, self.head_size = num_heads, hidden_size // num_heads
    self.query, self.key, self.value = (_dense(hidden_size, initializer_range, name)
                                        for name in ("query", "key", "value"))
    self.attention_output = _dense(hidden_size, initializer_range, "attention_output")
    self.attention_layer_norm = keras.layers.LayerNormalization(
        epsilon=epsilon, name="attention_layer_norm")
    self.intermediate = _dense(inner_size, initializer_range, "intermediate",
                               activations.get_activation("gelu"))
    self.output_dense = _dense(hidden_size, initializer_range, "output")
    self.output_layer_norm = keras.layers.LayerNormalization(epsilon=epsilon,
                                                             name="output_layer_norm")

  def _heads(self, x):  # [N, T, H] -> float32 [N, T, heads, d]
    shape = tf.shape(x)
    return tf.reshape(tf.cast(x, tf.float32),
                      [shape[0], shape[1], self.num_heads, self.head_size])

  def call(self, sequence, key_mask, own, other, own_index, other_index):
    """The marker rows of every span.

    Args:
      sequence: [N, L, H] the tokens; key_mask: [N, L] bool, the tokens attended to.
      own: [N, L, H] this transformer's marker input at each position (its query);
        other: [N, L, H] the other marker's input at each position.
      own_index, other_index: int32 [S] each span's two marker positions.

    Returns:
      [N, S, H] the output at this transformer's marker of each span.
    """
    scale = 1.0 / math.sqrt(self.head_size)
    query = self._heads(self.query(own)) * scale  # [N, L, h, d]
    keys, values = self._heads(self.key(sequence)), self._heads(self.value(sequence))
    scores = tf.einsum("nphd,nkhd->nhpk", query, keys)  # [N, h, L, L]
    scores += tf.where(key_mask, 0.0, -1e9)[:, None, None, :]
    token_lse = tf.reduce_logsumexp(scores, axis=-1)  # [N, h, L]
    token_context = tf.einsum("nhpk,nkhd->nphd", tf.nn.softmax(scores, axis=-1), values)
    own_key, own_value = self._heads(self.key(own)), self._heads(self.value(own))
    other_key, other_value = self._heads(self.key(other)), self._heads(self.value(other))
    self_score = tf.reduce_sum(query * own_key, axis=-1)  # [N, L, h]
    cross = tf.einsum("nphd,nohd->nhpo", query, other_key)  # [N, h, L(own), L(other)]
    length = tf.shape(cross)[-1]
    cross = tf.gather(tf.reshape(cross, [tf.shape(cross)[0], self.num_heads, -1]),
                      own_index * length + other_index, axis=-1)  # [N, h, S]
    parts = tf.stack([tf.gather(token_lse, own_index, axis=-1),
                      tf.transpose(tf.gather(self_score, own_index, axis=1), [0, 2, 1]),
                      cross], axis=-1)  # [N, h, S, 3] log-weights of tokens, own, other
    weights = tf.nn.softmax(parts, axis=-1)
    weights = tf.transpose(weights, [0, 2, 1, 3])[..., None]  # [N, S, h, 3, 1]
    attended = (weights[:, :, :, 0] * tf.gather(token_context, own_index, axis=1) +
                weights[:, :, :, 1] * tf.gather(own_value, own_index, axis=1) +
                weights[:, :, :, 2] * tf.gather(other_value, other_index, axis=1))
    shape = tf.shape(attended)
    attended = tf.cast(tf.reshape(attended, [shape[0], shape[1], -1]), own.dtype)
    hidden = self.attention_layer_norm(tf.gather(own, own_index, axis=1) +
                                       self.attention_output(attended))
    return self.output_layer_norm(hidden + self.output_dense(self.intermediate(hidden)))


@keras.utils.register_keras_serializable(package="realm_tf")
class MarkerSpanScorer(keras.layers.Layer):
  """Scores every span with both ends inside the block, `SpanScorer`'s interface (see the
  module docstring): score(s) = Dense(1)(relu(Dense(span_hidden_size)([h_START; h_END]))).

  Args:
    span_hidden_size: units of the MLP and of each marker transformer's feed-forward layer.
    max_span_width: longest span in wordpieces.
    num_attention_heads: heads of each marker transformer.
    layer_norm_epsilon, initializer_range: of the marker transformers and the MLP.
  """

  def __init__(self, span_hidden_size: int = 256, max_span_width: int = 10,
               num_attention_heads: int = 1, layer_norm_epsilon: float = 1e-12,
               initializer_range: float = 0.02, **kwargs):
    super().__init__(**kwargs)
    self.span_hidden_size = span_hidden_size
    self.max_span_width = max_span_width
    self.num_attention_heads = num_attention_heads
    self.layer_norm_epsilon = layer_norm_epsilon
    self.initializer_range = initializer_range
    self.mlp_hidden = _dense(span_hidden_size, initializer_range, "mlp_hidden", "relu")
    self.mlp_output = _dense(1, initializer_range, "mlp_output")

  def build(self, input_shape):
    hidden_size = int(input_shape[-1])
    # An initializer each: one unseeded instance gives every weight it makes the same values.
    self.start_marker, self.end_marker = (
        self.add_weight(name=name, shape=[hidden_size],
                        initializer=keras.initializers.TruncatedNormal(
                            stddev=self.initializer_range))
        for name in ("start_marker", "end_marker"))
    self.start_transformer, self.end_transformer = (
        _MarkerTransformer(hidden_size, self.num_attention_heads, self.span_hidden_size,
                           self.initializer_range, self.layer_norm_epsilon, name=name)
        for name in ("start_transformer", "end_transformer"))
    super().build(input_shape)

  def call(self, sequence_output, block_mask, input_mask=None):
    """Scores all candidate spans.

    Args:
      sequence_output: [N, L, H] reader output for N (question, block) inputs.
      block_mask: [N, L] 1 where a span may start or end (block body wordpieces).
      input_mask: [N, L] 1 on the tokens the markers attend to (default: every token).

    Returns:
      logits [N, S], starts [S] int32, ends [S] int32 (ends inclusive).
    """
    starts, ends = sequence_span_candidates(sequence_output, self.max_span_width)
    key_mask = (tf.ones(tf.shape(sequence_output)[:2], tf.bool) if input_mask is None else
                tf.cast(input_mask, tf.bool))
    start_inputs = sequence_output + tf.cast(self.start_marker, sequence_output.dtype)
    end_inputs = sequence_output + tf.cast(self.end_marker, sequence_output.dtype)
    h_start = self.start_transformer(sequence_output, key_mask, start_inputs, end_inputs,
                                     starts, ends)  # [N, S, H]
    h_end = self.end_transformer(sequence_output, key_mask, end_inputs, start_inputs,
                                 ends, starts)
    logits = tf.squeeze(self.mlp_output(self.mlp_hidden(
        tf.concat([h_start, h_end], axis=-1))), -1)  # [N, S]
    return mask_spans_outside(logits, block_mask, starts, ends), starts, ends

  def get_config(self):
    return dict(super().get_config(), span_hidden_size=self.span_hidden_size,
                max_span_width=self.max_span_width,
                num_attention_heads=self.num_attention_heads,
                layer_norm_epsilon=self.layer_norm_epsilon,
                initializer_range=self.initializer_range)
