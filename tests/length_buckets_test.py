"""Trimmed and length-bucketed answering equals the padded computation (float32)."""
import numpy as np
import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf.layers.span_scorer import masked_logit_value
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.models import length_buckets
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_texts
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from tiny_models import BODIES
from tiny_models import TEXT_VOCAB
from tiny_models import TITLES

QUESTIONS = ["where is paris ?", "who sat on the mat ?", "a river ?", "the cat ?"]
_READER_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")


@pytest.fixture(scope="module")
def systems():
  """(padded, trimmed): the same towers and corpus, answering with length_multiple 0 and 4."""
  tokenizer = WordpieceTokenizer(TEXT_VOCAB)
  encoder = configs.EncoderConfig.tiny(vocab_size=len(TEXT_VOCAB))
  tf.keras.utils.set_random_seed(3)
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=encoder, projection_size=8))
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder, span_hidden_size=8))
  tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, bucket=1)
  index = BruteForceIndex(embed_texts(tower, tokenizer, TITLES, BODIES, batch_size=4))
  make = lambda multiple: RetrieveAndRead(
      retriever, reader, tokenizer, index, TITLES, BODIES, k=3, query_length=16,
      block_length=24, reader_length=48, length_multiple=multiple)
  return make(0), make(4)


def test_trim_batch_cuts_to_the_longest_row_rounded_up():
  mask = tf.constant([[1, 1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 1, 1, 0, 0, 0]])
  features = {"input_mask": mask, "input_word_ids": mask * 7}
  assert length_buckets.trim_batch(features, 4)["input_word_ids"].shape == (2, 8)
  assert length_buckets.trim_batch(features, 3)["input_mask"].shape == (2, 6)
  assert length_buckets.trim_batch(features, 0)["input_mask"].shape == (2, 8)


def test_bucketed_encoding_calls_once_per_bucket_and_keeps_row_order():
  mask = tf.constant([[1] * 5 + [0] * 3, [1] * 2 + [0] * 6, [1] * 8, [1] * 3 + [0] * 5])
  calls = []

  def encode(part):  # [n, l] -> [n, l, 2]: each position's id and the row's length
    calls.append(part["input_mask"].shape)
    ids = tf.cast(part["input_word_ids"], tf.float32)
    return tf.stack([ids, tf.broadcast_to(tf.cast(tf.shape(ids)[1], tf.float32),
                                          tf.shape(ids))], -1)

  ids = tf.range(4)[:, None] * 10 + tf.range(8)[None]  # [4, 8]
  out = length_buckets.bucketed_sequence_output(
      encode, {"input_mask": mask, "input_word_ids": ids}, 4, 2, tf.float32).numpy()
  assert calls == [(2, 8), (2, 4)]  # real lengths 5, 2, 8, 3: buckets 8 and 4, two rows each
  for row, bucket in enumerate([8, 4, 8, 4]):
    np.testing.assert_array_equal(out[row, :bucket, 0], ids.numpy()[row, :bucket])
    assert (out[row, :bucket, 1] == bucket).all() and (out[row, bucket:] == 0).all()


def test_trimmed_query_embeddings_equal_the_padded_ones(systems):
  padded, trimmed = systems
  full, _, emb_full = padded.embed_questions(tf.constant(QUESTIONS))
  cut, _, emb_cut = trimmed.embed_questions(tf.constant(QUESTIONS))
  assert full["input_word_ids"].shape[1] == 16 and cut["input_word_ids"].shape[1] == 8
  np.testing.assert_allclose(emb_cut.numpy(), emb_full.numpy(), atol=1e-5)
  scores_full = padded.retrieve(QUESTIONS)[0]
  np.testing.assert_allclose(trimmed.retrieve(QUESTIONS)[0], scores_full, atol=1e-5)


def _span_logits(system, question, rows):
  """{(reader row, start, end): logit} of the valid spans of `question` over corpus `rows`."""
  query_ids = system.tokenizer(tf.constant([question]))
  inputs = system.featurizer.reader_inputs(query_ids, np.array([[TITLES[r] for r in rows]]),
                                           np.array([[BODIES[r] for r in rows]]))
  inputs = length_buckets.trim_batch(inputs, system.length_multiple)
  logits, starts, ends = system.reader.span_logits(
      {n: inputs[n] for n in _READER_FEATURES}, inputs["block_mask"],
      length_multiple=system.length_multiple)
  logits, starts, ends = logits.numpy(), starts.numpy(), ends.numpy()
  return {(b, s, e): logits[b, i] for b in range(len(rows))
          for i, (s, e) in enumerate(zip(starts, ends))
          if logits[b, i] > masked_logit_value(tf.float32) / 2}


def test_bucketed_span_logits_equal_the_padded_ones(systems):
  padded, trimmed = systems
  rows = [3, 1, 0]  # 11, 7 and 10 reader wordpieces with the question: buckets 12, 8, 12
  full, cut = (_span_logits(s, "where is paris ?", rows) for s in systems)
  assert full.keys() == cut.keys() and len(full) > 20
  np.testing.assert_allclose([cut[key] for key in full], list(full.values()), atol=1e-5)
  for short, whole in zip(trimmed.answer(QUESTIONS), padded.answer(QUESTIONS)):
    assert short.answer == whole.answer and short.block == whole.block
    np.testing.assert_allclose(short.probability, whole.probability, atol=1e-5)
