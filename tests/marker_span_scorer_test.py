"""The patent's span reader (`layers.marker_span_scorer`) against numpy: for each span, the
start and end marker tokens inserted into the sequence, one transformer layer per side over
the whole marked sequence (every row computed, the marker rows read), the MLP on their
concatenation; and its place in the reader and the model configuration."""
import math

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf import presets
from realm_tf.layers.marker_span_scorer import MarkerSpanScorer
from realm_tf.layers.span_scorer import masked_logit_value
from realm_tf.layers.span_scorer import span_candidates
from realm_tf.models import saving
from realm_tf.training import run_config


def _layer_norm(x, layer):
  gamma, beta = (v.numpy() for v in layer.weights)
  mean = x.mean(-1, keepdims=True)
  variance = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(variance + layer.epsilon) * gamma + beta


def _dense(x, layer):
  kernel, bias = (v.numpy() for v in layer.weights)
  return x @ kernel + bias


def _gelu(x):
  return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _transformer_rows(tokens, transformer, heads):
  """Every row of one post-LayerNorm transformer layer over `tokens` [T, H] (numpy)."""
  size = tokens.shape[1] // heads
  split = lambda x: x.reshape(len(x), heads, size).transpose(1, 0, 2)  # [h, T, d]
  q, k, v = (split(_dense(tokens, layer)) for layer in
             (transformer.query, transformer.key, transformer.value))
  scores = q @ k.transpose(0, 2, 1) / math.sqrt(size)
  weights = np.exp(scores - scores.max(-1, keepdims=True))
  weights /= weights.sum(-1, keepdims=True)
  attended = (weights @ v).transpose(1, 0, 2).reshape(len(tokens), -1)
  hidden = _layer_norm(tokens + _dense(attended, transformer.attention_output),
                       transformer.attention_layer_norm)
  inner = _gelu(_dense(hidden, transformer.intermediate))
  return _layer_norm(hidden + _dense(inner, transformer.output_dense),
                     transformer.output_layer_norm)


def _numpy_logits(scorer, sequence, input_mask, block_mask, heads):
  """[N, S] span scores: each span's marked sequence through both transformers in full."""
  starts, ends = span_candidates(sequence.shape[1], scorer.max_span_width)
  start_marker, end_marker = scorer.start_marker.numpy(), scorer.end_marker.numpy()
  logits = np.zeros([len(sequence), len(starts)])
  for n, tokens in enumerate(sequence):
    kept = tokens[input_mask[n].astype(bool)]
    for j, (i, e) in enumerate(zip(starts, ends)):
      if not (block_mask[n, i] and block_mask[n, e]):
        logits[n, j] = masked_logit_value(tf.float32)
        continue
      # The markers inserted before token i and after token e (order does not matter to one
      # layer without position embeddings: they carry the tokens they mark).
      marked = np.concatenate([kept, [start_marker + tokens[i]], [end_marker + tokens[e]]])
      h_start = _transformer_rows(marked, scorer.start_transformer, heads)[-2]
      h_end = _transformer_rows(marked, scorer.end_transformer, heads)[-1]
      hidden = np.maximum(_dense(np.concatenate([h_start, h_end]), scorer.mlp_hidden), 0.0)
      logits[n, j] = _dense(hidden, scorer.mlp_output)[0]
  return logits, starts, ends


@pytest.mark.parametrize("heads,width,seed", [(1, 3, 0), (2, 4, 1), (4, 2, 2)])
def test_scores_equal_the_marked_sequences_through_both_transformers(heads, width, seed):
  rng = np.random.default_rng(seed)
  n, length, hidden = 3, 7, 8
  sequence = rng.normal(size=[n, length, hidden]).astype(np.float32)
  input_mask = np.ones([n, length], np.int32)
  input_mask[1, 5:] = 0  # padding: attended by no marker
  block_mask = np.zeros([n, length], np.int32)
  block_mask[:, 2:] = 1
  block_mask[1, 5:] = 0
  scorer = MarkerSpanScorer(span_hidden_size=6, max_span_width=width, num_attention_heads=heads,
                            initializer_range=0.5)
  logits, starts, ends = scorer(tf.constant(sequence), tf.constant(block_mask),
                                tf.constant(input_mask))
  expected, expected_starts, expected_ends = _numpy_logits(scorer, sequence, input_mask,
                                                           block_mask, heads)
  np.testing.assert_array_equal(starts.numpy(), expected_starts)
  np.testing.assert_array_equal(ends.numpy(), expected_ends)
  np.testing.assert_allclose(logits.numpy(), expected, rtol=1e-4, atol=1e-4)
  assert np.std(expected[expected > masked_logit_value(tf.float32) / 2]) > 1e-3  # not constant


def test_unknown_sequence_length_scores_the_same_spans():
  rng = np.random.default_rng(3)
  sequence = tf.constant(rng.normal(size=[2, 6, 8]).astype(np.float32))
  masks = tf.ones([2, 6], tf.int32)
  scorer = MarkerSpanScorer(span_hidden_size=4, max_span_width=3, num_attention_heads=2)
  static = scorer(sequence, masks, masks)
  dynamic = tf.function(scorer, input_signature=[tf.TensorSpec([None, None, 8])] +
                        [tf.TensorSpec([None, None], tf.int32)] * 2)(sequence, masks, masks)
  for a, b in zip(static, dynamic):
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-5)


def _model(span_head: str) -> presets.ModelConfig:
  encoder = configs.EncoderConfig(vocab_size=30, hidden_size=8, num_layers=1,
                                  num_attention_heads=2, intermediate_size=16,
                                  max_position_embeddings=32)
  return presets.ModelConfig(encoder=encoder, projection_size=4, span_hidden_size=6,
                             max_span_width=3, query_length=6, block_length=10,
                             reader_length=16, span_head=span_head)


def test_reader_config_and_checkpoints_carry_the_span_head(tmp_path):
  """The reader scores spans with the marker head; `model.json` and the run config name it
  only when it is not ORQA's; fine-tuning from a checkpoint with the other head (pre-training
  never trains it) restores the encoder and starts the head fresh."""
  endpoint, markers = _model("endpoint_mlp"), _model("markers")
  assert "span_head" not in endpoint.to_dict()
  assert presets.ModelConfig.from_dict(markers.to_dict()) == markers
  retriever, reader = presets.build_models(markers)
  assert isinstance(reader.span_scorer, MarkerSpanScorer)
  assert reader.span_scorer.num_attention_heads == 2
  assert run_config.reader_structure(reader)["span_head"] == "markers"
  ids = tf.constant([[1, 5, 2, 7, 8, 9, 2, 0]])
  features = dict(input_word_ids=ids, input_mask=tf.cast(ids > 0, tf.int32),
                  input_type_ids=tf.zeros_like(ids))
  block_mask = tf.constant([[0, 0, 0, 1, 1, 1, 0, 0]])
  logits, _, _ = reader.span_logits(features, block_mask)
  assert logits.shape == (1, sum(8 - w + 1 for w in range(1, 4)))
  loaded = saving.load_model(saving.save_model(reader, str(tmp_path / "reader")))
  assert isinstance(loaded.span_scorer, MarkerSpanScorer)
  np.testing.assert_allclose(loaded.span_logits(features, block_mask)[0].numpy(),
                             logits.numpy(), rtol=1e-5, atol=1e-5)

  source_retriever, source_reader = presets.build_models(endpoint)
  path = tf.train.Checkpoint(retriever=source_retriever, reader=source_reader).write(
      str(tmp_path / "ckpt"))
  presets.initialize(retriever, reader, markers, presets.InitConfig(checkpoint=path))
  for mine, theirs in zip(reader.encoder.weights, source_reader.encoder.weights):
    np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
  with pytest.raises(ValueError, match="span_head"):
    presets.ModelConfig(span_head="bilinear")
