"""The on-disk block embeddings (`retrieval.embedding_file`): storage dtypes, memory-mapped
reads, refusal of damaged files, and an index published with its file."""
import os

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import errors
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.retrieval import embedding_file

# Largest |stored - float32| / |float32| of a rounding to the storage dtype (half an ulp).
_ROUNDING = {"float32": 0.0, "bfloat16": 2.0**-8, "float16": 2.0**-11}


def _embeddings(num_blocks=37, dim=16):
  return np.random.default_rng(0).standard_normal([num_blocks, dim]).astype(np.float32) * 3


def _write(path, values, storage_dtype):
  out = embedding_file.create(str(path), *values.shape, storage_dtype)
  out[:] = values
  out.flush()
  return str(path)


@pytest.mark.parametrize("storage_dtype", embedding_file.STORAGE_DTYPES)
def test_round_trip_is_memory_mapped_and_within_the_dtype_rounding(tmp_path, storage_dtype):
  values = _embeddings()
  path = _write(tmp_path / "e.npy", values, storage_dtype)
  assert os.path.getsize(path) - 128 == values.size * embedding_file.bytes_per_block(
      1, storage_dtype)  # 128: the .npy header
  loaded = embedding_file.open_embeddings(path, storage_dtype, *values.shape)
  assert isinstance(loaded, np.memmap) and not loaded.flags.writeable
  assert loaded.shape == values.shape
  rows = np.array([[3, -1, 36], [0, 0, 5]])
  got = embedding_file.gather(loaded, rows)
  assert got.dtype == np.float32 and got.shape == (2, 3, 16)
  np.testing.assert_array_equal(got[0, 1], 0.0)  # missing rows (-1): zeros
  want = values[np.maximum(rows, 0)] * (rows >= 0)[..., None]
  np.testing.assert_allclose(got, want, rtol=_ROUNDING[storage_dtype], atol=0)
  if storage_dtype == "float32":
    np.testing.assert_array_equal(embedding_file.as_float32(loaded), values)
  else:
    assert not np.array_equal(got, want)  # it did round


def test_bfloat16_is_stored_as_its_bits(tmp_path):
  values = _embeddings()
  path = _write(tmp_path / "e.npy", values, "bfloat16")
  raw = np.load(path)
  assert raw.dtype == np.uint16
  np.testing.assert_array_equal(raw.view(tf.bfloat16.as_numpy_dtype),
                                values.astype(tf.bfloat16.as_numpy_dtype))


def test_damaged_files_are_refused_naming_the_file(tmp_path):
  values = _embeddings()
  path = _write(tmp_path / "e.npy", values, "float16")
  with pytest.raises(errors.InputError, match=r"e\.npy: 37 embeddings of dimension 16, but "
                     r"the index has 36 blocks"):
    embedding_file.open_embeddings(path, "float16", 36, 16)
  with pytest.raises(errors.InputError, match=r"e\.npy: holds a float16 array .* not \[N, D\] "
                     "bfloat16 embeddings"):
    embedding_file.open_embeddings(path, "bfloat16")
  with open(path, "rb") as f:
    content = f.read()
  with open(path, "wb") as f:
    f.write(content[:-10])
  with pytest.raises(errors.InputError, match=r"e\.npy: .*truncated or damaged") as raised:
    embedding_file.open_embeddings(path, "float16", 37, 16)
  assert "\n" not in str(raised.value)
  with open(path, "wb") as f:
    f.write(b"not an array")
  with pytest.raises(errors.InputError, match=r"e\.npy: not a readable block-embeddings file"):
    embedding_file.open_embeddings(path, "float16")
  with pytest.raises(ValueError, match="must be one of float32, bfloat16, float16"):
    embedding_file.create(str(tmp_path / "x.npy"), 2, 2, "int8")


def test_an_index_published_with_its_embeddings(tmp_path):
  values = _embeddings()
  root = str(tmp_path / "index")
  os.makedirs(root)
  path = _write(os.path.join(root, "step-00000001.embeddings.tmp-x.npy"), values, "float16")
  metadata = embedding_file.metadata(path, "float16")
  def write(directory):
    embedding_file.move_into(path, directory)
    BruteForceIndex(values).save(directory)

  published = index_publisher.publish(write, root, "step-00000001", metadata)
  assert not os.path.exists(path) and index_publisher.list_versions(root) == ["step-00000001"]
  read = index_publisher.read_metadata(root, "step-00000001")
  assert read[embedding_file.STORAGE_KEY] == "float16"
  embeddings = embedding_file.open_in(published, read, *values.shape)
  assert isinstance(embeddings, np.memmap) and embeddings.dtype == np.float16
  # A byte changed after publication fails the recorded sha256.
  stored = os.path.join(published, embedding_file.EMBEDDING_FILE)
  with open(stored, "r+b") as f:
    f.seek(200)
    f.write(b"\x01\x02")
  with pytest.raises(errors.InputError, match=r"block_embeddings\.npy: .*sha256"):
    embedding_file.open_in(published, read, *values.shape)
  assert embedding_file.open_in(str(tmp_path), read, *values.shape) is None  # no file
