"""The one corpus type: canonical order, lookups, fingerprint, the shard / JSONL / TSV loaders
and their errors, the JSONL writer, and wordpieces for a given tokenizer."""
import numpy as np
import pytest
import tensorflow as tf

import released_bundle
from realm_tf import tiny_world
from realm_tf.data import formats
from realm_tf.errors import InputError
from realm_tf.errors import MalformedRecordError
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def _write(path, text):
  path.write_text(text, encoding="utf-8")
  return str(path)


def _write_blocks(path, blocks):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for block in blocks:
      writer.write(formats.block_example(*block))


BLOCKS = [(30, "C", "gamma text", [7], [8, 9]), (10, "A", "alpha", [5], [6]),
          (20, "B", "beta ü", [3], [])]


def test_load_orders_by_block_id(tmp_path):
  _write_blocks(tmp_path / "blocks-00000-of-00002.tfrecord", BLOCKS[:2])
  _write_blocks(tmp_path / "blocks-00001-of-00002.tfrecord", BLOCKS[2:])
  store = Corpus.load(str(tmp_path))
  assert store.block_ids.tolist() == [10, 20, 30]
  assert store.titles == ["A", "B", "C"] and store.texts[1] == "beta ü"
  assert store.body_ids.to_list() == [[6], [], [8, 9]]
  assert store.rows([30, 10]).tolist() == [2, 0]
  with pytest.raises(KeyError, match="99"):
    store.rows([99])
  assert len(store.fingerprint) == 64
  assert store.fingerprint != Corpus.from_blocks(*zip(*BLOCKS[:2])).fingerprint


def test_duplicates_and_missing_shards_are_errors(tmp_path):
  with pytest.raises(ValueError, match="duplicate block ids \\[10\\]"):
    Corpus.from_blocks(*zip(*(BLOCKS + [BLOCKS[1]])))
  with pytest.raises(FileNotFoundError, match="blocks-"):
    Corpus.load(str(tmp_path))


def test_example_and_embedding_records_round_trip():
  record = formats.parse_pretraining_example(
      formats.pretraining_example([4, 5, 6], 1, 2, 77, "Paris", "GPE"))
  assert record["query_ids"].numpy().tolist() == [4, 5, 6]
  assert int(record["span_end"]) == 2 and record["span_label"].numpy() == b"GPE"
  emb = formats.parse_embedding(formats.embedding_example(3, np.array([0.5, -1.0])))
  np.testing.assert_allclose(emb["embedding"].numpy(), [0.5, -1.0])


def test_corpus_from_jsonl_tsv_and_block_shards(tmp_path):
  jsonl = _write(tmp_path / "c.jsonl",
                 '{"id": 9, "title": "B", "text": "beta"}\n{"id": 3, "text": "alpha"}\n')
  corpus = Corpus.load(jsonl)
  assert corpus.block_ids.tolist() == [3, 9] and corpus.titles == ["", "B"]
  assert corpus.texts == ["alpha", "beta"] and corpus.source == jsonl
  no_ids = Corpus.load(_write(tmp_path / "n.jsonl", '{"text": "x"}\n{"text": "y"}\n'))
  assert no_ids.block_ids.tolist() == [0, 1]
  tsv = Corpus.load(_write(tmp_path / "psgs.tsv", "id\ttext\ttitle\n2\tsome text\tT\n"))
  assert (tsv.block_ids.tolist(), tsv.texts, tsv.titles) == ([2], ["some text"], ["T"])
  shards = tmp_path / "blocks"
  shards.mkdir()
  with tf.io.TFRecordWriter(str(shards / "blocks-00000-of-00001.tfrecord")) as writer:
    writer.write(formats.block_example(20, "T2", "two", [5], [6]))
    writer.write(formats.block_example(10, "T1", "one", [5], [7]))
  store_corpus = Corpus.load(str(shards))
  assert store_corpus.block_ids.tolist() == [10, 20] and store_corpus.texts == ["one", "two"]
  assert store_corpus.fingerprint != corpus.fingerprint
  assert Corpus(np.array([3, 9]), ["", "B"], ["alpha", "beta"]).fingerprint == corpus.fingerprint


def test_corpus_errors(tmp_path):
  with pytest.raises(MalformedRecordError, match=r"c.jsonl:2: expected an object with a "
                                                 r"string \"text\""):
    Corpus.load(_write(tmp_path / "c.jsonl", '{"text": "a"}\n{"title": "t"}\n'))
  with pytest.raises(MalformedRecordError, match="id must be an integer"):
    Corpus.load(_write(tmp_path / "d.jsonl", '{"id": "x", "text": "a"}\n'))
  with pytest.raises(MalformedRecordError, match=r"p.tsv:1: id 'x' is not an integer"):
    Corpus.load(_write(tmp_path / "p.tsv", "x\ttext\ttitle\n"))
  with pytest.raises(ValueError, match="duplicate block ids"):
    Corpus.load(_write(tmp_path / "e.jsonl", '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n'))
  with pytest.raises(ValueError, match="has no blocks"):
    Corpus.load(_write(tmp_path / "f.jsonl", "\n"))
  with pytest.raises(FileNotFoundError, match="no blocks-"):
    Corpus.load(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="no corpus at"):
    Corpus.load(str(tmp_path / "missing.jsonl"))


def test_corpus_from_the_released_block_records(tmp_path):
  """`blocks.tfr` (raw bodies) with `titles.tfr` and `examples.tfr` beside it: ids are the
  record numbers (the rows of the release's `block_emb`), wordpieces the release's own."""
  path = released_bundle.write_block_records(
      str(tmp_path / "enwiki"), ["Ada", "Ünïcode", "Bob"], ["Ada lives in Doha.", "é ü", "x"],
      title_ids=[[5], [6, 7], [8]], token_ids=[[9, 10], [11], [12, 13, 14]])
  corpus = Corpus.load(path)
  assert corpus.block_ids.tolist() == [0, 1, 2] and corpus.source == path
  assert corpus.titles == ["Ada", "Ünïcode", "Bob"]
  assert corpus.texts == ["Ada lives in Doha.", "é ü", "x"]
  assert corpus.title_ids.to_list() == [[5], [6, 7], [8]]
  assert corpus.body_ids.to_list() == [[9, 10], [11], [12, 13, 14]]
  bodies_only = released_bundle.write_block_records(str(tmp_path / "bare"), ["A"], ["a b"],
                                                    with_titles=False)
  bare = Corpus.load(bodies_only)
  assert (bare.titles, bare.texts, bare.title_ids) == ([""], ["a b"], None)


def test_released_block_records_that_do_not_line_up_are_refused(tmp_path):
  path = released_bundle.write_block_records(str(tmp_path / "a"), ["A", "B"], ["a", "b"])
  with tf.io.TFRecordWriter(str(tmp_path / "a" / "titles.tfr")) as writer:
    writer.write(b"A")
  with pytest.raises(InputError, match=r"titles.tfr: has 1 records, but .*blocks.tfr has more"):
    Corpus.load(path)
  path = released_bundle.write_block_records(str(tmp_path / "b"), ["A", "B", "C"], ["a", "b"])
  with pytest.raises(InputError, match=r"titles.tfr: has more records than the 2 of "):
    Corpus.load(path)
  path = released_bundle.write_block_records(str(tmp_path / "c"), ["A"], ["a"],
                                             with_titles=False)
  with tf.io.TFRecordWriter(path) as writer:
    writer.write(b"ok")
    writer.write(b"\xff\xfe")
  with pytest.raises(MalformedRecordError, match=r"blocks.tfr:2: record is not UTF-8"):
    Corpus.load(path)


def test_jsonl_writer_round_trip(tmp_path):
  corpus = Corpus.from_blocks([9, 3], ["B", ""], ["beta ü", "alpha"])
  corpus.write_jsonl(str(tmp_path / "c.jsonl"))
  loaded = Corpus.load(str(tmp_path / "c.jsonl"))
  assert (loaded.block_ids.tolist(), loaded.titles, loaded.texts) == ([3, 9], ["", "B"],
                                                                       ["alpha", "beta ü"])
  assert loaded.fingerprint == corpus.fingerprint and loaded.title_ids is None


def test_wordpieces_are_stored_for_the_pipeline_vocabulary_else_tokenized(tmp_path):
  corpus, tok = tiny_world.write_pipeline(str(tmp_path / "world"))
  assert corpus.stored_wordpieces_match(tok)
  titles, bodies = corpus.wordpieces(tok)
  assert titles is corpus.title_ids and bodies is corpus.body_ids
  jsonl = str(tmp_path / "world.jsonl")
  corpus.write_jsonl(jsonl)
  from_text = Corpus.load(jsonl)
  assert not from_text.stored_wordpieces_match(tok)
  titles, bodies = from_text.wordpieces(tok)
  assert corpus_files.is_mapped(titles.values) and titles.values.dtype == np.uint16
  assert titles.to_list() == corpus.title_ids.to_list()
  assert bodies.to_list() == corpus.body_ids.to_list()
  other = WordpieceTokenizer(tiny_world.VOCAB[:5] + tiny_world.VOCAB[5:][::-1])
  assert not corpus.stored_wordpieces_match(other)
  titles, bodies = corpus.wordpieces(other)
  assert titles.to_list() == other(tf.constant(list(corpus.titles))).to_list()
  assert bodies.to_list() == other(tf.constant(list(corpus.texts))).to_list()
  assert titles.to_list() != corpus.title_ids.to_list()
