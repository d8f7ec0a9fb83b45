"""Retriever and reader: shapes, tower sharing, degenerate inputs, and the Keras contract
(registered, get_config/from_config round-trip, SavedModel save and reload)."""
import numpy as np
import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf.keras import keras
from realm_tf.layers.embedding_projection import EmbeddingProjection
from realm_tf.layers.l2_normalization import L2Normalization
from realm_tf.layers.span_scorer import SpanScorer
from realm_tf.layers.span_scorer import dynamic_span_candidates
from realm_tf.layers.span_scorer import span_candidates
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever

TINY = configs.EncoderConfig.tiny(vocab_size=50)


def _features(shape, seed=0, pad_from=None):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, 50, shape).astype(np.int32)
  mask = np.ones(shape, np.int32)
  if pad_from is not None:
    ids[..., pad_from:], mask[..., pad_from:] = 0, 0
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=np.zeros(shape, np.int32))


def _retriever(share=True, head="realm"):
  return configs.build_retriever(configs.retriever_config(head, TINY, share, projection_size=8))


def _reader():
  return configs.build_reader(configs.ReaderConfig(encoder=TINY, span_hidden_size=6,
                                                   max_span_width=3))


def _retriever_inputs():
  return dict(query=_features((2, 6), 1), candidates=_features((2, 3, 10), 2, pad_from=8))


def _reader_inputs():
  block_mask = np.zeros((2, 10), np.int32)
  block_mask[:, 4:8] = 1
  return dict(_features((2, 10), 3), masked_lm_positions=np.array([[1, 2], [3, 0]], np.int32),
              block_mask=block_mask)


def test_retriever_shapes_and_sharing():
  shared, separate = _retriever(True), _retriever(False)
  inputs = _retriever_inputs()
  assert shared(inputs).shape == (2, 3)
  assert separate(inputs).shape == (2, 3)
  query = inputs["query"]
  np.testing.assert_allclose(shared.embed_query(query), shared.embed_documents(query))
  assert not np.allclose(separate.embed_query(query), separate.embed_documents(query))
  assert len(separate.trainable_weights) == 2 * len(shared.trainable_weights)
  assert shared.share_towers and not separate.share_towers


def test_empty_block_and_null_document_embed_finitely():
  retriever = _retriever()
  null = dict(input_word_ids=np.array([[2, 3, 3, 0, 0]], np.int32),
              input_mask=np.array([[1, 1, 1, 0, 0]], np.int32),
              input_type_ids=np.array([[0, 0, 1, 0, 0]], np.int32))
  all_padding = {k: np.zeros_like(v) for k, v in null.items()}
  for features in (null, all_padding):
    assert np.isfinite(retriever.embed_documents(features).numpy()).all()


def test_reader_heads():
  reader = _reader()
  out = reader(_reader_inputs())
  starts, ends = span_candidates(10, 3)
  assert out["mlm_logits"].shape == (2, 2, 50)
  assert out["span_logits"].shape == (2, len(starts)) == (2, 10 + 9 + 8)
  inside = (np.isin(starts, range(4, 8)) & np.isin(ends, range(4, 8)))
  logits = out["span_logits"].numpy()
  assert (logits[:, ~inside] < -1e30).all() and (np.abs(logits[:, inside]) < 1e3).all()
  assert set(reader(_features((2, 10))).keys()) == {"sequence_output"}


@pytest.mark.parametrize("width", [1, 3, 10])
def test_spans_of_a_length_known_when_the_graph_runs_are_the_static_ones(width):
  for length in range(1, 14):
    starts, ends = dynamic_span_candidates(tf.constant(length), width)
    expected = span_candidates(length, width)
    assert starts.numpy().tolist() == expected[0].tolist()
    assert ends.numpy().tolist() == expected[1].tolist()
  reader = _reader()
  inputs = _reader_inputs()
  static = reader(inputs)
  scores = tf.function(lambda f: reader(f)["span_logits"], input_signature=[
      {n: tf.TensorSpec([None, None], tf.int32) for n in inputs}])
  np.testing.assert_allclose(scores({n: tf.cast(v, tf.int32) for n, v in inputs.items()}),
                             static["span_logits"], rtol=1e-5, atol=1e-6)


def test_mlm_decoder_is_tied_to_word_embeddings():
  reader = _reader()
  reader(_reader_inputs())
  assert reader.masked_lm.embedding_table is reader.encoder.get_embedding_table()
  names = [v.name for v in reader.trainable_weights]
  assert sum("word_embeddings" in n for n in names) == 1


def test_sentence_head_is_the_scaled_cosine_of_mean_pooled_tokens():
  retriever = _retriever(head="sentence")
  inputs = _retriever_inputs()
  query, blocks = inputs["query"], {k: v[0] for k, v in inputs["candidates"].items()}
  sequence = retriever.doc_encoder(blocks)["sequence_output"].numpy()  # [3, 10, 32]
  mask = blocks["input_mask"][:, :, None]
  mean = (sequence * mask).sum(1) / mask.sum(1)  # padding (positions 8, 9) excluded
  expected = mean / np.linalg.norm(mean, axis=1, keepdims=True)
  np.testing.assert_allclose(retriever.embed_documents(blocks), expected, atol=1e-5)
  assert retriever.projection_size == TINY.hidden_size and not retriever.doc_projection.weights
  q = retriever.embed_query(query).numpy()
  np.testing.assert_allclose(np.linalg.norm(q, axis=1), configs.SENTENCE_SCORE_SCALE, rtol=1e-5)
  scores = retriever(inputs).numpy()
  assert (np.abs(scores) <= configs.SENTENCE_SCORE_SCALE + 1e-3).all()


def test_retriever_config_validation():
  with pytest.raises(ValueError, match="projection_size must be 32"):
    configs.RetrieverConfig(encoder=TINY, projection_size=8, projection="l2_normalize")
  with pytest.raises(ValueError, match="pooling must be one of"):
    configs.build_retriever(configs.RetrieverConfig(encoder=TINY, pooling="max"))
  with pytest.raises(ValueError, match="retriever head must be one of"):
    configs.retriever_config("dpr", TINY)


@pytest.mark.parametrize("layer", [EmbeddingProjection(8, 1e-6, name="p"),
                                   L2Normalization(name="n"),
                                   SpanScorer(6, 4, 1e-3, name="s")])
def test_layer_config_round_trip(layer):
  config = keras.layers.serialize(layer)
  clone = keras.layers.deserialize(config)
  assert type(clone) is type(layer)
  assert clone.get_config() == layer.get_config()


@pytest.mark.parametrize("build, inputs", [(lambda: _retriever(True), _retriever_inputs),
                                           (lambda: _retriever(False), _retriever_inputs),
                                           (lambda: _retriever(False, "sentence"),
                                            _retriever_inputs),
                                           (_reader, _reader_inputs)])
def test_model_config_round_trip_and_savedmodel_reload(build, inputs, tmp_path):
  model = build()
  expected = model(inputs())
  clone = keras.layers.deserialize(keras.layers.serialize(model))
  assert type(clone) is type(model) and type(clone) in (Retriever, Reader)
  clone(inputs())
  assert clone.get_config() == model.get_config()
  clone.set_weights(model.get_weights())
  tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                        clone(inputs()), expected)
  model.save(str(tmp_path / "saved"))
  reloaded = keras.models.load_model(str(tmp_path / "saved"))
  assert type(reloaded) is type(model)
  tf.nest.map_structure(lambda a, b: np.testing.assert_allclose(a, b, atol=1e-6),
                        reloaded(inputs()), expected)


def test_encoder_config_validation():
  with pytest.raises(ValueError, match="multiple of"):
    configs.EncoderConfig(hidden_size=30, num_attention_heads=4)
  with pytest.raises(ValueError, match="Unknown activation"):
    configs.EncoderConfig(hidden_act="relu6")
