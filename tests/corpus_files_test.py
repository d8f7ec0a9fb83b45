"""The memory-mapped corpus form: streaming writes in id order, O(1) opening, damaged files
refused by name, conversions reused until their input changes, wordpiece sets per vocabulary."""
import json
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import errors
from realm_tf import tiny_world
from realm_tf.retrieval import corpus as corpus_lib
from realm_tf.retrieval import corpus_files
from realm_tf.retrieval.columns import RaggedColumn
from realm_tf.retrieval.columns import StringColumn
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.fingerprint import corpus_fingerprint
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

BLOCKS = [(30, "C", "gamma text", [7], [8, 9]), (10, "A", "alpha ü", [5], [6]),
          (20, "B", "beta", [3], [])]


def _write(directory, blocks=BLOCKS, vocab_size=100):
  writer = corpus_files.CorpusWriter(str(directory), {"path": "test"}, vocab_size)
  for block in blocks:
    writer.add(*block)
  return writer.close()


def test_unordered_blocks_are_written_in_id_order_with_the_in_memory_fingerprint(tmp_path):
  fingerprint = _write(tmp_path / "c")
  store = Corpus.load(str(tmp_path / "c"))
  assert store.block_ids.tolist() == [10, 20, 30] and list(store.titles) == ["A", "B", "C"]
  assert store.texts[0] == "alpha ü" and store.texts[-1] == "gamma text"
  assert store.body_ids.to_list() == [[6], [], [8, 9]] and store.title_ids.to_list() == [[5], [3],
                                                                                          [7]]
  expected = corpus_fingerprint(np.array([10, 20, 30]), ["A", "B", "C"],
                                ["alpha ü", "beta", "gamma text"])
  assert fingerprint == store.fingerprint == expected
  assert store.title_ids.values.dtype == np.uint16
  with pytest.raises(errors.InputError, match="duplicate block ids \\[10\\]"):
    _write(tmp_path / "d", BLOCKS + [BLOCKS[1]])
  assert not os.path.exists(tmp_path / "d")


def test_open_maps_the_columns_without_reading_them(tmp_path, monkeypatch):
  _write(tmp_path / "c")
  monkeypatch.setattr(corpus_lib, "corpus_fingerprint",
                      lambda *a: pytest.fail("opening must not recompute the fingerprint"))
  store = Corpus.load(str(tmp_path / "c"))
  assert isinstance(store.block_ids, np.memmap) and corpus_files.is_mapped(store.texts.values)
  assert corpus_files.is_mapped(store.body_ids.values) and len(store.fingerprint) == 64
  assert store.rows([30, 10]).tolist() == [2, 0]


def test_columns_gather_rows_and_read_one_past_the_end_as_empty():
  column = RaggedColumn.from_rows([[1, 2], [], [3]])
  assert column.gather([2, 0, 3]).to_list() == [[3], [1, 2], []]
  assert column[1:].to_list() == [[], [3]] and column.row_lengths().tolist() == [2, 0, 1]
  strings = StringColumn.from_strings(["a", "ü", ""])
  assert strings[1] == "ü" and strings[-1] == "" and strings[0:2] == ["a", "ü"]
  with pytest.raises(IndexError):
    strings[3]  # pylint: disable=pointless-statement


@pytest.mark.parametrize("name, damage, message", [
    ("titles.npy", lambda p: open(p, "r+b").truncate(os.path.getsize(p) - 8), "bytes, corpus.json"),
    ("wordpieces/body_ids.bin", lambda p: open(p, "ab").write(b"\0\0"), "bytes, corpus.json"),
    ("texts.bin", os.remove, "missing"),
])
def test_damaged_files_are_refused_naming_the_file(tmp_path, name, damage, message):
  _write(tmp_path / "c")
  damage(str(tmp_path / "c" / name))
  with pytest.raises(errors.InputError, match=f"{name}.*{message}"):
    Corpus.load(str(tmp_path / "c"))


def test_a_flipped_byte_is_found_by_the_checksums(tmp_path):
  _write(tmp_path / "c")
  path = tmp_path / "c" / "texts.bin"
  data = bytearray(path.read_bytes())
  data[0] ^= 1
  path.write_bytes(bytes(data))
  Corpus.load(str(tmp_path / "c"))  # sizes agree: opening is O(1)
  with pytest.raises(errors.InputError, match="texts.bin.*crc32c"):
    corpus_files.verify_checksums(str(tmp_path / "c"))


def test_offsets_that_disagree_with_the_values_are_refused(tmp_path):
  _write(tmp_path / "c")
  offsets = tmp_path / "c" / "texts.npy"
  values = np.load(offsets)
  values[-1] += 1
  np.save(offsets, values)
  manifest = json.loads((tmp_path / "c" / "corpus.json").read_text())
  manifest["files"]["texts.npy"]["bytes"] = offsets.stat().st_size
  (tmp_path / "c" / "corpus.json").write_text(json.dumps(manifest))
  with pytest.raises(errors.InputError, match="texts.bin.*offsets end"):
    Corpus.load(str(tmp_path / "c"))


def test_conversion_is_reused_and_redone_when_the_input_changes(tmp_path):
  jsonl = tmp_path / "c.jsonl"
  jsonl.write_text('{"id": 2, "text": "b"}\n{"id": 1, "text": "a"}\n', encoding="utf-8")
  first = Corpus.load(str(jsonl))
  assert first.directory == str(jsonl) + ".corpus" and list(first.texts) == ["a", "b"]
  stamp = os.path.getmtime(os.path.join(first.directory, "corpus.json"))
  assert Corpus.load(str(jsonl)).fingerprint == first.fingerprint
  assert os.path.getmtime(os.path.join(first.directory, "corpus.json")) == stamp
  jsonl.write_text('{"id": 1, "text": "a"}\n{"id": 2, "text": "c"}\n', encoding="utf-8")
  os.utime(jsonl, ns=(1, 1))
  assert list(Corpus.load(str(jsonl)).texts) == ["a", "c"]


def test_an_unwritable_input_directory_converts_into_the_cache_dir(tmp_path, monkeypatch):
  (tmp_path / "c.jsonl").write_text('{"text": "x"}\n', encoding="utf-8")
  named = Corpus.load(str(tmp_path / "c.jsonl"), cache_dir=str(tmp_path / "named"))
  assert named.directory.startswith(str(tmp_path / "named")) and list(named.texts) == ["x"]
  monkeypatch.setenv("HOME", str(tmp_path / "home"))
  monkeypatch.setattr(os, "access", lambda path, mode: False)  # as for a read-only input
  store = Corpus.load(str(tmp_path / "c.jsonl"))
  assert store.directory.startswith(str(tmp_path / "home" / ".cache" / "realm_tf"))
  assert not os.path.exists(str(tmp_path / "c.jsonl.corpus"))


def test_another_vocabulary_is_tokenized_once_into_the_corpus_directory(tmp_path, monkeypatch):
  corpus, tok = tiny_world.write_pipeline(str(tmp_path / "world"))
  other = WordpieceTokenizer(tiny_world.VOCAB[:5] + tiny_world.VOCAB[5:][::-1])
  titles, bodies = corpus.wordpieces(other)
  assert titles.to_list() == other(tf.constant(list(corpus.titles))).to_list()
  sets = corpus_files.read_manifest(corpus.directory)["wordpieces"]
  assert len(sets) == 2 and corpus_files.PIPELINE_WORDPIECES in sets
  reopened = Corpus.load(str(tmp_path / "world"))
  monkeypatch.setattr(corpus_lib, "_tokenized_batches",
                      lambda *a: pytest.fail("the cached wordpiece set must be reused"))
  again = reopened.wordpieces(other)[1]
  assert corpus_files.is_mapped(again.values) and again.to_list() == bodies.to_list()
  assert reopened.wordpieces(tok)[0] is reopened.title_ids


def test_wordpiece_ids_beyond_uint16_are_stored_as_int32(tmp_path):
  shards = tmp_path / "blocks"
  shards.mkdir()
  from realm_tf.data import formats  # pylint: disable=import-outside-toplevel
  with tf.io.TFRecordWriter(str(shards / "blocks-00000-of-00001.tfrecord")) as writer:
    writer.write(formats.block_example(1, "T", "x", [5], [70000]))
  store = Corpus.load(str(shards))
  assert store.body_ids.values.dtype == np.int32 and store.body_ids.to_list() == [[70000]]


def test_text_inputs_skip_a_byte_order_mark_and_refuse_bytes_that_are_not_text(tmp_path):
  bom = tmp_path / "bom.jsonl"
  bom.write_bytes('\ufeff{"text": "first"}\n{"text": "second"}\n'.encode("utf-8"))
  assert list(Corpus.load(str(bom)).texts) == ["first", "second"]
  latin = tmp_path / "latin.jsonl"
  latin.write_bytes(b'{"text": "ok"}\n{"text": "caf\xe9"}\n')
  with pytest.raises(errors.MalformedRecordError, match="latin.jsonl:2: not UTF-8"):
    Corpus.load(str(latin))
  surrogate = tmp_path / "s.jsonl"
  surrogate.write_text('{"text": "a \\ud800 b"}\n', encoding="utf-8")
  with pytest.raises(errors.MalformedRecordError, match=r"s.jsonl:1: \"text\" holds the lone surrogate U\+D800 at character 2\. Write"):
    Corpus.load(str(surrogate))
  tsv = tmp_path / "p.tsv"
  tsv.write_bytes("\ufeffid\ttext\ttitle\n7\tsome text\tT\n".encode("utf-8"))
  assert Corpus.load(str(tsv)).block_ids.tolist() == [7]


def test_beam_reads_the_corpus_form_as_it_reads_the_shards(tmp_path):
  import apache_beam as beam  # pylint: disable=import-outside-toplevel
  from apache_beam.testing import test_pipeline  # pylint: disable=import-outside-toplevel
  from apache_beam.testing import util  # pylint: disable=import-outside-toplevel
  from pipelines import block_records  # pylint: disable=import-outside-toplevel
  corpus, _ = tiny_world.write_pipeline(str(tmp_path / "world"))
  key = lambda r: (r.block_id, r.title, r.text, tuple(r.title_ids), tuple(r.body_ids))
  for directory in (str(tmp_path / "world"), corpus.directory):
    with test_pipeline.TestPipeline() as p:
      records = p | block_records.ReadBlocks(directory) | beam.Map(key)
      util.assert_that(records, util.equal_to(
          [(int(i), t, x, tuple(a), tuple(b)) for i, t, x, a, b in zip(
              corpus.block_ids, corpus.titles, corpus.texts, corpus.title_ids.to_list(),
              corpus.body_ids.to_list())]))
  assert block_records.corpus_ids_and_fingerprint(corpus.directory)[1] == corpus.fingerprint
  assert block_records.corpus_ids_and_fingerprint(str(tmp_path / "world"))[1] == corpus.fingerprint


def test_a_copy_hard_links_every_listed_file_and_opens_as_the_same_corpus(tmp_path):
  _write(tmp_path / "c")
  source = Corpus.load(str(tmp_path / "c"))
  source.wordpieces(WordpieceTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "alpha",
                                        "beta", "gamma", "text", "a", "b", "c"]))  # a cached set
  (tmp_path / "c" / "stray.tmp").write_text("not listed")
  corpus_files.copy_corpus(str(tmp_path / "c"), str(tmp_path / "model" / "corpus"))
  copy = Corpus.load(str(tmp_path / "model" / "corpus"))
  assert copy.fingerprint == source.fingerprint and list(copy.texts) == list(source.texts)
  manifest = corpus_files.read_manifest(str(tmp_path / "c"))
  assert len(manifest["wordpieces"]) == 2
  for name in manifest["files"]:
    assert os.path.samefile(tmp_path / "c" / name, tmp_path / "model" / "corpus" / name)
  assert not os.path.exists(tmp_path / "model" / "corpus" / "stray.tmp")
  assert os.listdir(tmp_path / "model") == ["corpus"]  # the temporary directory renamed
  corpus_files.verify_checksums(str(tmp_path / "model" / "corpus"))
