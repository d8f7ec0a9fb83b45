"""Counted, checksummed shards: every reader verifies blocks / examples / embeddings shards
against their manifest and names the shard (expected vs found, record and byte offset)."""
import json
import logging
import os

import numpy as np
import pytest
import tensorflow as tf

from pipelines import block_records
from pipelines import build_index_lib
from pipelines import pretraining_examples_lib
from realm_tf import errors
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.qa import doc_index
from realm_tf.retrieval.corpus import Corpus
from realm_tf.training import pretraining_data

RECORDS = {
    "blocks": lambda i: formats.block_example(1000 + i, f"T{i}", f"text {i}", [5], [6, 7]),
    "examples": lambda i: formats.pretraining_example([5, 6, 7], 0, 1, 1000 + i, "x", "DATE"),
    "embeddings": lambda i: formats.embedding_example(1000 + i, [0.5, float(i)]),
}


def _write_shard(path, records):
  with tf.io.TFRecordWriter(path) as writer:
    for record in records:
      writer.write(record)


def write_shards(directory, prefix, num_shards=2, per_shard=40, manifest=True):
  """`num_shards` shards of `per_shard` records; with `manifest`, its manifest."""
  os.makedirs(directory, exist_ok=True)
  for s in range(num_shards):
    _write_shard(os.path.join(directory, f"{prefix}-{s:05d}-of-{num_shards:05d}.tfrecord"),
                 [RECORDS[prefix](s * per_shard + i) for i in range(per_shard)])
  if manifest:
    shards.write_manifest(directory, prefix, {"test": True})
  return directory


def _shard(directory, prefix, s=0, n=2):
  return os.path.join(directory, f"{prefix}-{s:05d}-of-{n:05d}.tfrecord")


def _cut_records(directory, prefix):  # the last 5 records dropped at a record boundary
  path = _shard(directory, prefix)
  records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
  _write_shard(path, records[:-5])


def _delete_shard(directory, prefix):
  os.remove(_shard(directory, prefix, 1))


def _flip_bytes(directory, prefix):
  path = _shard(directory, prefix)
  data = bytearray(open(path, "rb").read())
  for k in range(10):
    data[len(data) // 2 + k] ^= 0xFF
  open(path, "wb").write(bytes(data))


def _truncate_mid_record(directory, prefix):
  path = _shard(directory, prefix)
  data = open(path, "rb").read()
  open(path, "wb").write(data[:len(data) - 7])


def _reorder_records(directory, prefix):  # same count and size, other content
  path = _shard(directory, prefix)
  records = [r.numpy() for r in tf.data.TFRecordDataset(path)]
  _write_shard(path, records[::-1])


def _stray_shard(directory, prefix):
  _write_shard(os.path.join(directory, f"{prefix}-extra.tfrecord"), [RECORDS[prefix](999)])


def _mixed_sets(directory, prefix):
  _write_shard(_shard(directory, prefix, 0, 3), [RECORDS[prefix](999)])


FAULTS = {
    "cut_at_record_boundary": (_cut_records, r"-00000-of-00002\.tfrecord: 35 records \(\d+ bytes\) "
                               r"found, \w+\.manifest\.json expects 40 records"),
    "deleted_shard": (_delete_shard, r"-00001-of-00002\.tfrecord: missing: shard 2 of 2"),
    "flipped_bytes": (_flip_bytes, r"-00000-of-00002\.tfrecord:record \d+ \(byte \d+\): "
                      r"corrupted record"),
    "truncated_mid_record": (_truncate_mid_record, r"-00000-of-00002\.tfrecord:record 39 "
                             r"\(byte \d+\): truncated record"),
    "content_changed": (_reorder_records, r"-00000-of-00002\.tfrecord: content changed: "
                        r"crc32c \w+ found, \w+\.manifest\.json expects"),
    "stray_shard": (_stray_shard, r"-extra\.tfrecord: not listed in \w+\.manifest\.json"),
    "mixed_shard_sets": (_mixed_sets, r"shards of different sets \(-of-00002, -of-00003\)"),
}

READERS = {
    "Corpus.load": ("blocks", Corpus.load),
        "block_records.corpus_ids_and_fingerprint": (
        "blocks", block_records.corpus_ids_and_fingerprint),
    "pretraining_examples pipeline": ("blocks", lambda d: pretraining_examples_lib.run_pipeline(
        None, pretraining_examples_lib.ExamplesConfig(d, d + "-out", tagger="dates"))),
    "build_index": ("blocks", lambda d: build_index_lib.build_index(d, d, d + "-index")),
    "masked_query_dataset (pretrain)": (
        "examples", lambda d: pretraining_data.masked_query_dataset(d, None, 2)),
    "build_index.read_embedding_shards": (
        "embeddings", lambda d: build_index_lib.read_embedding_shards(d, 2)),
    "doc_index.load_pipeline_embeddings (ask)": (
        "embeddings", lambda d: doc_index.load_pipeline_embeddings(d, None, d + "-emb.npy")),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("reader", sorted(READERS))
def test_every_reader_names_the_damaged_shard(tmp_path, reader, fault):
  prefix, read = READERS[reader]
  damage, message = FAULTS[fault]
  directory = write_shards(str(tmp_path / "data"), prefix)
  damage(directory, prefix)
  with pytest.raises(shards.ShardError, match=message) as error:
    read(directory)
  assert isinstance(error.value, errors.InputError) and "\n" not in str(error.value)
  assert "rerun" in str(error.value).lower() or "remove" in str(error.value).lower()


@pytest.mark.parametrize("fault", ["deleted_shard", "flipped_bytes", "truncated_mid_record",
                                   "mixed_shard_sets"])
def test_shards_without_a_manifest_are_still_checked(tmp_path, fault):
  directory = write_shards(str(tmp_path / "data"), "blocks", manifest=False)
  FAULTS[fault][0](directory, "blocks")
  with pytest.raises(shards.ShardError, match=FAULTS[fault][1]):
    Corpus.load(directory)


def test_shards_without_a_manifest_load_with_a_warning(tmp_path, caplog):
  directory = write_shards(str(tmp_path / "data"), "blocks", manifest=False)
  _cut_records(directory, "blocks")  # undetectable without a manifest: hence the warning
  with caplog.at_level(logging.WARNING):
    store = Corpus.load(directory)
  assert len(store) == 75
  assert "no blocks.manifest.json: read 75 records from 2 blocks shards without a " \
         "completeness check" in caplog.text


def test_examples_without_a_manifest_are_refused_unless_explicitly_allowed(tmp_path):
  directory = write_shards(str(tmp_path / "data"), "examples", manifest=False)
  _cut_records(directory, "examples")
  with pytest.raises(shards.ShardError, match=(
      rf"^{directory}: no examples.manifest.json: nothing tells whether its 2 examples shards "
      r"\(75 records\) are complete. .*--allow_unverified_examples to read them uncounted\.$")):
    pretraining_data.masked_query_dataset(directory, None, 2)
  assert shards.check_shards(directory, "examples", allow_unverified=True).num_records == 75
  empty = write_shards(str(tmp_path / "empty"), "examples", per_shard=0, manifest=False)
  with pytest.raises(shards.ShardError, match=rf"^{empty}: 2 examples shards without a "
                     r"manifest hold no records\."):
    shards.check_shards(empty, "examples", allow_unverified=True)


def test_manifest_lists_counts_sizes_checksums_and_config(tmp_path):
  directory = write_shards(str(tmp_path / "data"), "examples", num_shards=3, per_shard=4)
  with open(shards.manifest_path(directory, "examples")) as f:
    manifest = json.load(f)
  assert manifest["num_shards"] == 3 and manifest["num_records"] == 12
  assert manifest["config"] == {"test": True}
  assert manifest["producer"] == "pipelines.pretraining_examples"
  first = manifest["shards"][0]
  assert first["name"] == "examples-00000-of-00003.tfrecord" and first["records"] == 4
  assert first["bytes"] == os.path.getsize(os.path.join(directory, first["name"]))
  assert len(first["crc32c"]) == 8
  checked = shards.check_shards(directory, "examples")
  assert checked.num_records == 12 and len(checked.files) == 3


def test_an_invalid_manifest_is_named(tmp_path):
  directory = write_shards(str(tmp_path / "data"), "blocks")
  with open(shards.manifest_path(directory, "blocks"), "w") as f:
    f.write("{not json")
  with pytest.raises(shards.ShardError, match=r"blocks\.manifest\.json: not a valid shard "
                     r"manifest .* Delete it to read the shards unchecked"):
    Corpus.load(directory)


def test_scan_matches_tensorflow(tmp_path):
  directory = write_shards(str(tmp_path / "data"), "embeddings", num_shards=1, per_shard=7)
  path = _shard(directory, "embeddings", 0, 1)
  info = shards.scan_shard(path)
  assert info.records == sum(1 for _ in tf.data.TFRecordDataset(path)) == 7
  ids, vectors = build_index_lib.read_embedding_shards(directory, 1)
  assert ids.tolist() == list(range(1000, 1007))
  np.testing.assert_allclose(vectors[:, 1], np.arange(7))


def test_a_manifest_over_shards_of_two_runs_is_refused(tmp_path):
  directory = write_shards(str(tmp_path / "data"), "blocks", manifest=False)
  _mixed_sets(directory, "blocks")
  with pytest.raises(shards.ShardError, match=FAULTS["mixed_shard_sets"][1]):
    shards.write_manifest(directory, "blocks")
  assert not os.path.exists(shards.manifest_path(directory, "blocks"))
