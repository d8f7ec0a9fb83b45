"""BlockStore: canonical order, lookups, fingerprint, and the TFRecord round trip."""
import numpy as np
import pytest
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data.block_store import BlockStore


def _write_blocks(path, blocks):
  with tf.io.TFRecordWriter(str(path)) as writer:
    for block in blocks:
      writer.write(formats.block_example(*block))


BLOCKS = [(30, "C", "gamma text", [7], [8, 9]), (10, "A", "alpha", [5], [6]),
          (20, "B", "beta ü", [3], [])]


def test_load_orders_by_block_id(tmp_path):
  _write_blocks(tmp_path / "blocks-00000-of-00002.tfrecord", BLOCKS[:2])
  _write_blocks(tmp_path / "blocks-00001-of-00002.tfrecord", BLOCKS[2:])
  store = BlockStore.load(str(tmp_path))
  assert store.block_ids.tolist() == [10, 20, 30]
  assert store.titles == ["A", "B", "C"] and store.texts[1] == "beta ü"
  assert store.body_ids.to_list() == [[6], [], [8, 9]]
  assert store.rows([30, 10]).tolist() == [2, 0]
  with pytest.raises(KeyError, match="99"):
    store.rows([99])
  assert len(store.fingerprint) == 64
  assert store.fingerprint != BlockStore.from_blocks(*zip(*BLOCKS[:2])).fingerprint


def test_duplicates_and_missing_shards_are_errors(tmp_path):
  with pytest.raises(ValueError, match="duplicate block ids: \\[10\\]"):
    BlockStore.from_blocks(*zip(*(BLOCKS + [BLOCKS[1]])))
  with pytest.raises(FileNotFoundError, match="blocks-"):
    BlockStore.load(str(tmp_path))


def test_example_and_embedding_records_round_trip():
  record = formats.parse_pretraining_example(
      formats.pretraining_example([4, 5, 6], 1, 2, 77, "Paris", "GPE"))
  assert record["query_ids"].numpy().tolist() == [4, 5, 6]
  assert int(record["span_end"]) == 2 and record["span_label"].numpy() == b"GPE"
  emb = formats.parse_embedding(formats.embedding_example(3, np.array([0.5, -1.0])))
  np.testing.assert_allclose(emb["embedding"].numpy(), [0.5, -1.0])
