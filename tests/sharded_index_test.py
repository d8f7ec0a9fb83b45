"""Tests for realm_tf.mips.sharded_index and the shard-by-shard builder: a sharded index
searches like one index over all rows (exactly so with exact shards), saves as one verified
directory, and refuses a missing, damaged or foreign shard naming it.

Dimension legend: Q queries, N documents, D embedding dimension, k results.
"""
import hashlib
import json
import os
import shutil

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

from realm_tf import cli
from realm_tf import errors
from realm_tf.mips import index_builder
from realm_tf.mips import index_loading
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.manifest import IndexCorruptedError
from realm_tf.mips.manifest import IndexManifest
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.mips.sharded_index import ShardedIndex

_DIM = 16


def _gaussian(seed, *shape):
  return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _exact_shards(docs, sizes):
  bounds = np.cumsum([0] + list(sizes))
  return ShardedIndex([BruteForceIndex(docs[a:b]) for a, b in zip(bounds[:-1], bounds[1:])])


def _recall(ids, true_ids):
  return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, true_ids)])


@pytest.fixture(scope="module")
def clustered():
  """24k docs around 1,000 Gaussian centres (unit-norm-ish), D=32, and 200 queries near them."""
  rng = np.random.default_rng(7)
  centres = rng.standard_normal((1000, 32))
  centres /= np.linalg.norm(centres, axis=1, keepdims=True)
  docs = centres[rng.integers(0, 1000, 24_000)] + 0.1 * rng.standard_normal((24_000, 32))
  queries = centres[rng.integers(0, 1000, 200)] + 0.1 * rng.standard_normal((200, 32))
  return docs.astype(np.float32), queries.astype(np.float32)


def test_exact_shards_of_unequal_sizes_equal_one_exact_index():
  docs, queries = _gaussian(0, 50, _DIM), _gaussian(1, 9, _DIM)
  sharded = _exact_shards(docs, [7, 30, 13])
  assert sharded.num_docs == 50 and sharded.row_ranges == [(0, 7), (7, 37), (37, 50)]
  for k in (1, 5, 20, 50):  # 20 and 50: more than the 7- and 13-row shards hold
    scores, ids = sharded.search(queries, k)
    want_scores, want_ids = BruteForceIndex(docs).search(queries, k)
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)
  np.testing.assert_array_equal(sharded.document_embeddings(), docs)


def test_a_top_k_straddling_the_shards_is_found_across_them():
  docs = 0.01 * _gaussian(2, 40, _DIM)
  winners = [3, 9, 10, 11, 25, 39]  # in every shard of [10, 10, 20], at both ends of some
  docs[winners, 0] = [6.0, 5.0, 4.0, 3.0, 2.0, 1.0]
  query = np.eye(1, _DIM, dtype=np.float32)
  scores, ids = _exact_shards(docs, [10, 10, 20]).search(query, 6)
  assert ids.numpy().tolist() == [winners]
  assert np.all(np.diff(scores.numpy()) < 0)


def test_equal_scores_keep_the_lower_shard_first():
  docs = np.ones((6, 4), np.float32)
  _, ids = _exact_shards(docs, [2, 2, 2]).search(np.ones((1, 4), np.float32), 5)
  assert ids.numpy().tolist() == [[0, 1, 2, 3, 4]]


def test_scann_shards_recall_against_exact_search(clustered):
  docs, queries = clustered
  sharding = index_builder.Sharding(shard_size=10_000)  # balanced: 3 shards of 8,000
  assert [len(r) for r in sharding.shard_ranges(len(docs))] == [8_000, 8_000, 8_000]
  wide = index_builder.Sharding(shard_size=12_000)  # 2 shards of 12,000: trees
  index = index_builder.build_index(docs, "scann", sharding=wide)
  assert isinstance(index, ShardedIndex) and len(index.shards) == 2
  assert all(s.builder["num_leaves"] == round(np.sqrt(12_000)) for s in index.shards)
  _, true_ids = BruteForceIndex(docs).search(queries, 10)
  _, ids = index.search(queries, 10)
  assert _recall(ids.numpy(), true_ids.numpy()) >= 0.9


def test_the_automatic_shard_size_is_an_eighth_of_the_corpus_within_bounds():
  """0: N/8 rows within [100k, 1M]: one index up to 100k rows, 8 shards at 1M (the builder
  near the embeddings' size), 1M-row shards beyond 8M (14 for full Wikipedia)."""
  auto = index_builder.Sharding()
  sizes = {n: [len(r) for r in auto.shard_ranges(n)]
           for n in (12_911, 100_000, 250_000, 1_000_000, 13_353_718)}
  assert sizes[12_911] == [12_911] and sizes[100_000] == [100_000]
  assert sizes[250_000] == [83_333, 83_333, 83_334]
  assert sizes[1_000_000] == [125_000] * 8
  assert len(sizes[13_353_718]) == 14 and max(sizes[13_353_718]) <= 1_000_000
  assert sum(sizes[13_353_718]) == 13_353_718
  assert index_builder.Sharding(shard_size=300_000).shard_size_for(1_000_000) == 300_000


def test_saved_and_reloaded_in_a_tf_function(tmp_path):
  docs, queries = _gaussian(3, 30, _DIM), _gaussian(4, 5, _DIM)
  sharded = ShardedIndex([ScannIndex.build(docs[:12]), ScannIndex.build(docs[12:])], 15)
  sharded.save(str(tmp_path))
  loaded = index_loading.load_index(str(tmp_path))
  assert isinstance(loaded, ShardedIndex) and loaded.row_ranges == [(0, 12), (12, 30)]
  assert (loaded.shard_size, loaded.shard_kind) == (15, "scann")
  search = tf.function(lambda q: loaded.search(q, 14), input_signature=[
      tf.TensorSpec([None, _DIM], tf.float32)])
  scores, ids = search(queries)
  want_scores, want_ids = BruteForceIndex(docs).search(queries, 14)
  np.testing.assert_array_equal(ids, want_ids)
  np.testing.assert_allclose(scores, want_scores, rtol=1e-5, atol=1e-5)


def test_the_manifest_round_trips(tmp_path):
  sharded = _exact_shards(_gaussian(5, 20, _DIM), [5, 15])
  sharded.save(str(tmp_path / "a"))
  manifest = IndexManifest.read(str(tmp_path / "a"))
  assert (manifest.kind, manifest.num_docs, manifest.dim, manifest.files) == (
      "sharded", 20, _DIM, {})
  table = manifest.builder["shards"]
  assert [(e["directory"], e["start"], e["end"], e["num_docs"]) for e in table] == [
      ("shard-00000-of-00002", 0, 5, 5), ("shard-00001-of-00002", 5, 20, 15)]
  assert (manifest.builder["shard_kind"], manifest.builder["shard_size"]) == (
      "brute_force", None)
  index_loading.load_index(str(tmp_path / "a")).save(str(tmp_path / "b"))
  assert IndexManifest.read(str(tmp_path / "b")) == manifest


@pytest.fixture
def saved(tmp_path):
  directory = str(tmp_path / "index")
  _exact_shards(_gaussian(6, 30, _DIM), [10, 10, 10]).save(directory)
  return directory


def test_a_missing_shard_is_refused_naming_it(saved):
  shutil.rmtree(os.path.join(saved, "shard-00001-of-00003"))
  with pytest.raises(IndexCorruptedError, match=r"index/shard-00001-of-00003: .*missing"):
    index_loading.load_index(saved)


def test_a_damaged_shard_file_is_refused_naming_it(saved, tmp_path):
  root = str(tmp_path / "root")
  path = os.path.join(saved, "shard-00002-of-00003", "embeddings.npy")
  with open(path, "r+b") as f:
    f.seek(-3, os.SEEK_END)
    f.write(b"\x00\x01\x02")
  with pytest.raises(IndexCorruptedError, match="shard-00002-of-00003/embeddings.npy: .*sha256"):
    index_loading.load_index(saved)
  with pytest.raises(index_publisher.PublishError, match="shard-00002-of-00003/embeddings.npy"):
    index_publisher.publish(lambda d: shutil.copytree(saved, d), root, "step-00000001")
  assert os.listdir(root) == []  # nothing published, nothing left behind


def test_a_shard_of_another_index_is_refused_naming_it(saved, tmp_path):
  other = str(tmp_path / "other")
  _exact_shards(_gaussian(7, 30, _DIM), [10, 10, 10]).save(other)
  shard = os.path.join(saved, "shard-00000-of-00003")
  shutil.rmtree(shard)
  shutil.copytree(os.path.join(other, "shard-00000-of-00003"), shard)
  with pytest.raises(IndexCorruptedError,
                     match="shard-00000-of-00003/manifest.json: .*another index"):
    index_loading.load_index(saved, verify_checksums=False)


def test_a_shard_of_another_size_is_refused_naming_it(saved, tmp_path):
  BruteForceIndex(_gaussian(8, 12, _DIM)).save(str(tmp_path / "twelve"))
  shard = os.path.join(saved, "shard-00001-of-00003")
  shutil.rmtree(shard)
  shutil.copytree(str(tmp_path / "twelve"), shard)
  top = os.path.join(saved, "manifest.json")
  with open(top) as f:
    data = json.load(f)
  with open(os.path.join(shard, "manifest.json"), "rb") as f:  # a consistent checksum
    data["builder"]["shards"][1]["manifest_sha256"] = hashlib.sha256(f.read()).hexdigest()
  with open(top, "w") as f:
    json.dump(data, f)
  with pytest.raises(IndexCorruptedError,
                     match=r"shard-00001-of-00003/manifest.json: .*12 x 16; the top manifest "
                     r"expects a shard of 10 x 16"):
    index_loading.load_index(saved)


def test_a_shard_list_that_does_not_tile_the_rows_is_refused(saved):
  top = os.path.join(saved, "manifest.json")
  with open(top) as f:
    data = json.load(f)
  data["builder"]["shards"][1]["start"] = 11
  with open(top, "w") as f:
    json.dump(data, f)
  with pytest.raises(IndexCorruptedError, match="manifest.json: .*entry 1 .*from row 10"):
    index_loading.load_index(saved)


@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16])
def test_save_index_from_a_memory_mapped_file_one_shard_at_a_time(tmp_path, dtype):
  docs = _gaussian(9, 41, _DIM).astype(dtype)
  np.save(str(tmp_path / "docs.npy"), docs)
  mapped = np.load(str(tmp_path / "docs.npy"), mmap_mode="r").view(dtype)  # bfloat16: '|V2'
  sharding = index_builder.Sharding(shard_size=10)
  index_builder.save_index(mapped, str(tmp_path / "index"), "brute_force", sharding=sharding)
  assert sorted(os.listdir(tmp_path / "index")) == ["manifest.json"] + [
      f"shard-0000{s}-of-00005" for s in range(5)]
  loaded = index_loading.load_index(str(tmp_path / "index"))
  assert [b - a for a, b in loaded.row_ranges] == [8, 8, 8, 8, 9]
  assert loaded.shard_size == 10
  np.testing.assert_array_equal(loaded.document_embeddings(), docs.astype(np.float32))
  checked = []
  index_loading.check_index(str(tmp_path / "index"),
                            lambda shard, where: checked.append((shard.num_docs, where)))
  assert [os.path.basename(w) for _, w in checked] == [f"shard-0000{s}-of-00005"
                                                        for s in range(5)]


def test_one_shard_is_a_plain_index(tmp_path):
  docs = _gaussian(10, 30, _DIM)
  assert isinstance(index_builder.build_index(docs, "scann"), ScannIndex)
  index_builder.save_index(docs, str(tmp_path), "brute_force",
                           sharding=index_builder.Sharding(shard_size=30))
  assert IndexManifest.read(str(tmp_path)).kind == "brute_force"


def test_the_shard_size_is_a_checked_setting_and_a_flag():
  with pytest.raises(errors.InputError, match=r"^Sharding\.shard_size: -1 is not an integer"):
    index_builder.Sharding(shard_size=-1)
  assert "--index_shard_size=500" in cli.index_flag_args(index_builder.ScannSettings(),
                                                         index_builder.Sharding(500))
  with pytest.raises(errors.InputError, match=r"^ScannSettings\.num_leaves: 300 leaves for 250"):
    index_builder.ScannSettings(num_leaves=300).check(1_000, _DIM, index_builder.Sharding(250))


def test_a_qa_document_index_reads_a_sharded_index(tmp_path):
  from realm_tf.qa.doc_index import DocIndex  # pylint: disable=g-import-not-at-top
  docs = _gaussian(11, 30, _DIM)
  doc_index = DocIndex(docs, _exact_shards(docs, [12, 18]), "fp", 7, "brute_force")
  doc_index.save(str(tmp_path))
  assert DocIndex.read_info(str(tmp_path))["kind"] == "brute_force"  # its shards' kind
  loaded = DocIndex.load(str(tmp_path))
  assert (loaded.kind, loaded.num_blocks, loaded.corpus_fingerprint) == ("brute_force", 30, "fp")
  assert isinstance(loaded.index, ShardedIndex)
  np.testing.assert_array_equal(loaded.embeddings, docs)
