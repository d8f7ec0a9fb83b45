"""The knowledge-augmented encoder ("reader") p(y | z, x)."""
from typing import Dict

import tensorflow as tf
from official.nlp.modeling import layers as nlp_layers

from realm_tf.keras import keras
from realm_tf.layers import activations
from realm_tf.layers.marker_span_scorer import MarkerSpanScorer
from realm_tf.layers.span_scorer import SpanScorer
from realm_tf.models import length_buckets

Features = Dict[str, tf.Tensor]
# The span heads: ORQA's endpoint MLP, and the patent's marker tokens read by two transformers.
SPAN_HEADS = ("endpoint_mlp", "markers")
DEFAULT_SPAN_HEAD = "endpoint_mlp"


def _dummy_features(length: int = 2) -> Features:
  ones = tf.ones([1, length], tf.int32)
  return dict(input_word_ids=ones, input_mask=ones, input_type_ids=0 * ones)


@keras.utils.register_keras_serializable(package="realm_tf")
class Reader(keras.Model):
  """BERT over `[CLS] x [SEP] z_body [SEP]` with two heads.

  * MLM head (pre-training): BERT `cls/predictions` (Dense + activation, LayerNorm, output bias)
    with the decoder tied to the word embeddings; scored only at the masked positions.
  * Span head (Open-QA), over every span inside the block body: `SpanScorer` (ORQA's
    endpoint MLP, `span_head="endpoint_mlp"`) or `MarkerSpanScorer` (the patent's marker
    tokens and separate start/end transformers, `span_head="markers"`).

  `call` runs whichever heads its inputs ask for: "masked_lm_positions" [N, M] -> "mlm_logits"
  [N, M, V]; "block_mask" [N, L] -> "span_logits" [N, S], "span_starts" [S], "span_ends" [S].

  Args:
    encoder: a Model Garden BERT encoder with `get_embedding_table()`.
    mlm_activation: "gelu_approximate" (BERT/REALM) or "gelu" (HF BERT).
    span_hidden_size, max_span_width, span_layer_norm_epsilon: see `SpanScorer`.
    span_head: one of `SPAN_HEADS`; "markers" uses the encoder's attention head count.
  """

  def __init__(self, encoder: keras.layers.Layer, mlm_activation: str = "gelu_approximate",
               span_hidden_size: int = 256, max_span_width: int = 10,
               span_layer_norm_epsilon: float = 1e-3, initializer_range: float = 0.02,
               span_head: str = DEFAULT_SPAN_HEAD, **kwargs):
    super().__init__(**kwargs)
    if span_head not in SPAN_HEADS:
      raise ValueError(f"span_head must be one of {SPAN_HEADS}, got {span_head!r}")
    self.encoder = encoder
    self.mlm_activation = mlm_activation
    self.initializer_range = initializer_range
    self.span_head = span_head
    # Creates the encoder's variables so that its word-embedding table can be tied (a
    # deserialized encoder reports `built` before its variables exist).
    self.hidden_size = int(encoder(_dummy_features())["sequence_output"].shape[-1])
    self.masked_lm = nlp_layers.MaskedLM(
        embedding_table=encoder.get_embedding_table(),
        activation=activations.get_activation(mlm_activation),
        initializer=keras.initializers.TruncatedNormal(stddev=initializer_range),
        name="cls/predictions")
    if span_head == "markers":
      self.span_scorer = MarkerSpanScorer(
          span_hidden_size, max_span_width, encoder.get_config()["num_attention_heads"],
          span_layer_norm_epsilon, initializer_range, name="span_scorer")
    else:
      self.span_scorer = SpanScorer(span_hidden_size, max_span_width, span_layer_norm_epsilon,
                                    initializer_range, name="span_scorer")

  @property
  def checkpoint_items(self):
    return dict(encoder=self.encoder, masked_lm=self.masked_lm, span_scorer=self.span_scorer)

  def build(self, input_shape=None):
    """Creates every variable with a dummy pass through both heads; the attention layers
    build lazily, and SavedModel revival restores only variables that exist."""
    sequence = self.sequence_output(_dummy_features())
    self.masked_lm(sequence, tf.zeros([1, 1], tf.int32))
    self.span_scorer(sequence, tf.ones([1, 2], tf.int32), tf.ones([1, 2], tf.int32))
    keras.layers.Layer.build(self, input_shape)  # Model.build would trace placeholders.

  def sequence_output(self, features: Features, training=None) -> tf.Tensor:
    """[N, L] features -> [N, L, H]."""
    return self.encoder(features, training=training)["sequence_output"]

  def mlm_logits(self, features: Features, masked_positions: tf.Tensor,
                 training=None) -> tf.Tensor:
    """[N, L] features, [N, M] positions -> [N, M, V] MLM logits."""
    return self.masked_lm(self.sequence_output(features, training),
                          tf.convert_to_tensor(masked_positions, tf.int32))

  def span_logits(self, features: Features, block_mask: tf.Tensor, training=None,
                  length_multiple: int = 0):
    """[N, L] features, [N, L] block mask -> (logits [N, S], starts [S], ends [S]).

    `length_multiple` > 0 encodes the rows by length buckets of that multiple
    (`models.length_buckets`): the same logits, fewer FLOPs; 0 encodes [N, L] as it is.
    """
    if length_multiple:
      sequence = length_buckets.bucketed_sequence_output(
          lambda part: self.sequence_output(part, training), features, length_multiple,
          self.hidden_size, self.encoder.compute_dtype)
    else:
      sequence = self.sequence_output(features, training)
    return self.span_scorer(sequence, block_mask, features["input_mask"])

  def call(self, inputs, training=None):
    features = {k: inputs[k] for k in ("input_word_ids", "input_mask", "input_type_ids")}
    sequence = self.sequence_output(features, training)
    outputs = {"sequence_output": sequence}
    if "masked_lm_positions" in inputs:
      outputs["mlm_logits"] = self.masked_lm(
          sequence, tf.convert_to_tensor(inputs["masked_lm_positions"], tf.int32))
    if "block_mask" in inputs:
      logits, starts, ends = self.span_scorer(sequence, inputs["block_mask"],
                                              features["input_mask"])
      outputs.update(span_logits=logits, span_starts=starts, span_ends=ends)
    return outputs

  def get_config(self):
    return dict(
        name=self.name,
        encoder=keras.layers.serialize(self.encoder),
        mlm_activation=self.mlm_activation,
        span_hidden_size=self.span_scorer.span_hidden_size,
        max_span_width=self.span_scorer.max_span_width,
        span_layer_norm_epsilon=self.span_scorer.layer_norm_epsilon,
        initializer_range=self.initializer_range,
        span_head=self.span_head)

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    config["encoder"] = keras.layers.deserialize(config["encoder"], custom_objects)
    return cls(**config)
