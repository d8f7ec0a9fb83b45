"""Tests for realm_tf.mips: brute force against a numpy oracle, ScaNN against brute force.

Dimension legend: Q queries, N documents, D embedding dimension, k results.
"""
import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

from realm_tf.mips import BruteForceIndex
from realm_tf.mips import IndexCorruptedError
from realm_tf.mips import IndexManifest
from realm_tf.mips import load_index
from realm_tf.mips import MipsIndex
from realm_tf.mips import ScannIndex
from realm_tf.mips import scann_index as scann_index_lib

_CLUSTERED_DOCS = 20_000
_DIM = 128


def _oracle(queries, docs, k):
  """Exact top-k by a stable descending sort: ties keep the lower id first."""
  scores = queries.astype(np.float64) @ docs.astype(np.float64).T  # [Q, N]
  ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]  # [Q, k]
  return np.take_along_axis(scores, ids, axis=1), ids


def _gaussian(rng, *shape):
  return rng.standard_normal(shape).astype(np.float32)


@pytest.fixture(scope="module")
def clustered():
  """20k docs in 200 Gaussian clusters, D=128, and 300 queries drawn near the clusters."""
  rng = np.random.default_rng(1234)
  centers = _gaussian(rng, 200, _DIM)
  docs = centers[rng.integers(0, 200, _CLUSTERED_DOCS)] + 0.75 * _gaussian(
      rng, _CLUSTERED_DOCS, _DIM)
  queries = centers[rng.integers(0, 200, 300)] + 0.75 * _gaussian(rng, 300, _DIM)
  return docs.astype(np.float32), queries.astype(np.float32)


@pytest.fixture(scope="module")
def scann_index(clustered):
  return ScannIndex.build(clustered[0])


def _flip_byte(path, offset):
  with open(path, "r+b") as f:
    f.seek(offset)
    byte = f.read(1)
    f.seek(offset)
    f.write(bytes([byte[0] ^ 0xFF]))


def _edit_manifest(directory, **fields):
  path = os.path.join(directory, "manifest.json")
  with open(path) as f:
    data = json.load(f)
  data.update(fields)
  with open(path, "w") as f:
    json.dump(data, f)


@pytest.mark.parametrize("num_docs,chunk_size,k", [
    (1000, 128, 10),  # N not a multiple of the chunk size
    (50, 3, 10),  # chunk smaller than k
    (37, 8, 37),  # k == N
    (37, 100, 5),  # one chunk larger than N
    (64, 16, 1),  # N a multiple of the chunk size, k == 1
])
def test_brute_force_matches_oracle(num_docs, chunk_size, k):
  rng = np.random.default_rng(num_docs + chunk_size + k)
  docs, queries = _gaussian(rng, num_docs, 16), _gaussian(rng, 7, 16)
  scores, ids = BruteForceIndex(docs, chunk_size=chunk_size).search(queries, k)
  want_scores, want_ids = _oracle(queries, docs, k)
  assert scores.dtype == tf.float32 and ids.dtype == tf.int64
  assert scores.shape == (7, k) and ids.shape == (7, k)
  np.testing.assert_array_equal(ids.numpy(), want_ids)
  np.testing.assert_allclose(scores.numpy(), want_scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunk_size", [1, 4, 7, 1000])
def test_brute_force_ties_keep_lower_id_first(chunk_size):
  rng = np.random.default_rng(7)
  # Small integers: the scores are exact and full of ties.
  docs = rng.integers(-2, 3, (90, 4)).astype(np.float32)
  queries = rng.integers(-2, 3, (11, 4)).astype(np.float32)
  scores, ids = BruteForceIndex(docs, chunk_size=chunk_size).search(queries, 12)
  want_scores, want_ids = _oracle(queries, docs, 12)
  np.testing.assert_array_equal(ids.numpy(), want_ids)
  np.testing.assert_array_equal(scores.numpy(), want_scores)


def _graph_search(index, k):
  return tf.function(lambda queries: index.search(queries, k),
                     input_signature=[tf.TensorSpec([None, index.dim], tf.float32)])


def test_brute_force_in_graph():
  rng = np.random.default_rng(3)
  docs, queries = _gaussian(rng, 500, 16), _gaussian(rng, 9, 16)
  index = BruteForceIndex(docs, chunk_size=64)
  search = _graph_search(index, 8)
  assert search.get_concrete_function().structured_outputs[1].shape.as_list() == [None, 8]
  for batch in (queries, queries[:2]):
    scores, ids = search(tf.constant(batch))
    want_scores, want_ids = _oracle(batch, docs, 8)
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    np.testing.assert_allclose(scores.numpy(), want_scores, rtol=1e-5, atol=1e-5)


def test_brute_force_save_load_round_trip(tmp_path):
  rng = np.random.default_rng(4)
  docs, queries = _gaussian(rng, 300, 8), _gaussian(rng, 5, 8)
  index = BruteForceIndex(docs, chunk_size=50)
  index.save(str(tmp_path))
  loaded = load_index(str(tmp_path))
  assert isinstance(loaded, BruteForceIndex) and isinstance(loaded, MipsIndex)
  assert (loaded.num_docs, loaded.dim, loaded.chunk_size) == (300, 8, 50)
  for got, want in zip(loaded.search(queries, 6), index.search(queries, 6)):
    np.testing.assert_array_equal(got.numpy(), want.numpy())
  manifest = IndexManifest.read(str(tmp_path))
  assert (manifest.kind, manifest.num_docs, manifest.dim, manifest.dtype) == (
      "brute_force", 300, 8, "float32")
  assert set(manifest.files) == {"embeddings.npy"}
  manifest.verify(str(tmp_path))


def test_scann_recall_at_8(clustered, scann_index):
  docs, queries = clustered
  assert scann_index.builder["num_leaves"] > 1  # the tree + AH + reorder configuration
  _, want_ids = _oracle(queries, docs, 8)
  scores, ids = scann_index.search(queries, 8)
  assert scores.dtype == tf.float32 and ids.dtype == tf.int64 and ids.shape == (300, 8)
  recall = np.mean([len(set(got) & set(want)) / 8 for got, want in zip(ids.numpy(), want_ids)])
  assert recall >= 0.95, recall
  assert np.all(np.diff(scores.numpy(), axis=1) <= 0)
  # Reordered scores are exact inner products of the returned documents.
  np.testing.assert_allclose(scores.numpy(), np.einsum("qd,qkd->qk", queries, docs[ids.numpy()]),
                             rtol=1e-4, atol=1e-3)


def test_scann_in_graph(clustered, scann_index):
  queries = clustered[1][:20]
  search = _graph_search(scann_index, 5)
  eager_scores, eager_ids = scann_index.search(queries, 5)
  scores, ids = search(tf.constant(queries))
  assert ids.shape == (20, 5)
  np.testing.assert_array_equal(ids.numpy(), eager_ids.numpy())
  np.testing.assert_array_equal(scores.numpy(), eager_scores.numpy())
  assert search(tf.constant(queries[:3]))[1].shape == (3, 5)


def test_scann_save_load_identical(clustered, scann_index, tmp_path):
  queries = clustered[1]
  scann_index.save(str(tmp_path))
  loaded = load_index(str(tmp_path))
  assert isinstance(loaded, ScannIndex)
  assert (loaded.num_docs, loaded.dim, loaded.builder) == (_CLUSTERED_DOCS, _DIM,
                                                           scann_index.builder)
  for k in (8, 50):
    for got, want in zip(loaded.search(queries, k), scann_index.search(queries, k)):
      np.testing.assert_array_equal(got.numpy(), want.numpy())
  assert IndexManifest.read(str(tmp_path)).kind == "scann"


def test_scann_small_index_is_exact_and_loads_independently(tmp_path):
  rng = np.random.default_rng(5)
  docs_a, docs_b, queries = _gaussian(rng, 40, 8), _gaussian(rng, 60, 8), _gaussian(rng, 6, 8)
  ScannIndex.build(docs_a).save(str(tmp_path / "a"))
  ScannIndex.build(docs_b).save(str(tmp_path / "b"))
  index_a, index_b = load_index(str(tmp_path / "a")), load_index(str(tmp_path / "b"))
  assert index_a.builder["num_leaves"] == 1
  for index, docs in ((index_a, docs_a), (index_b, docs_b)):
    scores, ids = index.search(queries, index.num_docs)
    want_scores, want_ids = _oracle(queries, docs, index.num_docs)
    np.testing.assert_array_equal(ids.numpy(), want_ids)
    np.testing.assert_allclose(scores.numpy(), want_scores, rtol=1e-5, atol=1e-5)


def test_scann_pads_short_results():
  rng = np.random.default_rng(6)
  docs, queries = _gaussian(rng, 2000, 16), _gaussian(rng, 4, 16)
  index = ScannIndex.build(docs, num_leaves=100, num_leaves_to_search=1)
  scores, ids = index.search(queries, 300)  # one leaf holds far fewer than 300 documents
  assert ids.shape == (4, 300) and scores.shape == (4, 300)
  ids, scores = ids.numpy(), scores.numpy()
  found = ids >= 0
  assert np.all(found[:, 0]) and not np.any(found[:, -1])
  assert np.all(np.isneginf(scores[~found])) and np.all(np.isfinite(scores[found]))
  for row_found in found:  # the found results come first
    assert np.all(row_found[:row_found.sum()])


def test_scann_collected_while_building_graphs_never_enters_them(tmp_path):
  docs = _gaussian(np.random.default_rng(9), 30, 4)
  held = [ScannIndex.build(docs)]

  class Module(tf.Module):

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32)])
    def double(self, x):
      held.clear()  # the index is collected during the trace
      return 2.0 * x

  tf.saved_model.save(Module(), str(tmp_path / "traced"))  # fails if the handle was captured
  np.testing.assert_allclose(tf.saved_model.load(str(tmp_path / "traced")).double(
      tf.constant([1.0])).numpy(), [2.0])
  pending = scann_index_lib._PENDING_DESTRUCTION  # pylint: disable=protected-access
  held.append(ScannIndex.build(docs))
  with tf.Graph().as_default():
    held.clear()  # collected inside a legacy graph: destruction deferred, no error
  assert len(pending) == 1
  held.append(ScannIndex.build(docs))
  held.clear()  # an eager collection also destroys the deferred searcher
  assert not pending


@pytest.fixture(params=["brute_force", "scann"])
def saved_index(request, tmp_path):
  """A small saved index of each kind; returns (directory, its main data file)."""
  docs = _gaussian(np.random.default_rng(8), 30, 4)
  if request.param == "brute_force":
    BruteForceIndex(docs).save(str(tmp_path))
    return str(tmp_path), "embeddings.npy"
  ScannIndex.build(docs).save(str(tmp_path))
  return str(tmp_path), "dataset.npy"


def test_corrupted_file_raises(saved_index):
  directory, data_file = saved_index
  _flip_byte(os.path.join(directory, data_file), -5 % os.path.getsize(
      os.path.join(directory, data_file)))
  with pytest.raises(IndexCorruptedError, match="sha256") as error:
    load_index(directory)
  assert directory in str(error.value) and data_file in str(error.value)
  assert error.value.file_name == data_file


def test_missing_file_raises(saved_index):
  directory, data_file = saved_index
  os.remove(os.path.join(directory, data_file))
  with pytest.raises(IndexCorruptedError, match="missing") as error:
    load_index(directory)
  assert directory in str(error.value) and data_file in str(error.value)


@pytest.mark.parametrize("field", ["num_docs", "dim"])
def test_manifest_disagreeing_with_arrays_raises(saved_index, field):
  directory, data_file = saved_index
  manifest = IndexManifest.read(directory)
  _edit_manifest(directory, **{field: getattr(manifest, field) + 1})
  with pytest.raises(IndexCorruptedError, match=field) as error:
    load_index(directory)
  assert directory in str(error.value) and data_file in str(error.value)


def test_missing_manifest_raises(saved_index):
  directory, _ = saved_index
  os.remove(os.path.join(directory, "manifest.json"))
  with pytest.raises(IndexCorruptedError, match="manifest.json") as error:
    load_index(directory)
  assert directory in str(error.value)


@pytest.mark.parametrize("content", ["{not json", "[]", '{"kind": "scann"}'])
def test_unparseable_manifest_raises(saved_index, content):
  directory, _ = saved_index
  with open(os.path.join(directory, "manifest.json"), "w") as f:
    f.write(content)
  with pytest.raises(IndexCorruptedError, match="manifest.json"):
    load_index(directory)


@pytest.mark.parametrize("fields", [{"kind": "faiss"}, {"format_version": 99},
                                    {"files": {"../embeddings.npy": "0" * 64}},
                                    {"builder": {}}])
def test_invalid_manifest_fields_raise(saved_index, fields):
  directory, _ = saved_index
  _edit_manifest(directory, **fields)
  with pytest.raises(IndexCorruptedError, match="manifest.json"):
    load_index(directory)


def test_index_copied_elsewhere_still_loads(saved_index, tmp_path):
  directory, _ = saved_index
  copy = str(tmp_path / "copy")
  shutil.copytree(directory, copy)
  assert load_index(copy).num_docs == 30


@pytest.fixture(params=["brute_force", "scann"])
def small_index(request):
  docs = _gaussian(np.random.default_rng(9), 20, 6)
  return BruteForceIndex(docs) if request.param == "brute_force" else ScannIndex.build(docs)


def test_wrong_query_dim_raises(small_index):
  with pytest.raises(ValueError, match=r"query dim 5 .* index dim 6"):
    small_index.search(np.zeros([2, 5], np.float32), 3)
  with pytest.raises(ValueError, match=r"\[Q, D\]"):
    small_index.search(np.zeros([6], np.float32), 3)


@pytest.mark.parametrize("k", [21, 0])
def test_k_out_of_range_raises(small_index, k):
  with pytest.raises(ValueError, match=f"k={k} .*num_docs=20"):
    small_index.search(np.zeros([2, 6], np.float32), k)


def test_build_arguments_are_checked():
  docs = np.zeros([10, 4], np.float32)
  with pytest.raises(ValueError, match="chunk_size"):
    BruteForceIndex(docs, chunk_size=0)
  with pytest.raises(ValueError, match=r"\[N, D\]"):
    BruteForceIndex(np.zeros([0, 4], np.float32))
  with pytest.raises(ValueError, match="num_leaves_to_search=5"):
    ScannIndex.build(docs, num_leaves=2, num_leaves_to_search=5)
  with pytest.raises(ValueError, match="reorder_k"):
    ScannIndex.build(docs, num_neighbors=10, reorder_k=5)
