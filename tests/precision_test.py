"""bfloat16 document embedding: same weights, float32 outputs close to float32 compute."""
import dataclasses

import numpy as np
import pytest
import tensorflow as tf

import tiny_world
from realm_tf import configs
from realm_tf.export.doc_embedder import DocEmbedder
from realm_tf.export.doc_embedder import export_doc_embedder
from realm_tf.keras import keras
from realm_tf.models.precision import with_compute_dtype
from realm_tf.training.store_embedding import embed_store


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  store, tok = tiny_world.write_world(str(tmp_path_factory.mktemp("world")))
  tf.keras.utils.set_random_seed(0)
  # A wide init, so that blocks get distinct embeddings (narrow random towers give every
  # block nearly the same [CLS] vector, and nearest neighbours would be noise).
  encoder = dataclasses.replace(configs.EncoderConfig.tiny(vocab_size=len(tiny_world.VOCAB)),
                                initializer_range=0.2)
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=encoder,
                                                              projection_size=8))
  retriever.build()
  return store, tok, retriever


def _cosines(a, b):
  return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_bfloat16_copy_shares_weights_and_leaves_the_original(world):
  _, _, retriever = world
  copy = with_compute_dtype(retriever, "bfloat16")
  assert copy.doc_encoder.compute_dtype == "bfloat16"
  assert retriever.doc_encoder.compute_dtype == "float32"
  assert keras.mixed_precision.global_policy().name == "float32"
  for ours, theirs in zip(retriever.get_weights(), copy.get_weights()):
    np.testing.assert_array_equal(ours, theirs)
  assert with_compute_dtype(retriever, "float32") is retriever
  with pytest.raises(ValueError, match="compute_dtype must be one of"):
    with_compute_dtype(retriever, "float16")


def test_bfloat16_store_embedding_is_close_to_float32(world):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  full = embed_store(retriever, store, *special, block_length=24, batch_size=5)
  half = embed_store(retriever, store, *special, block_length=24, batch_size=5,
                     compute_dtype="bfloat16")
  assert half.dtype == np.float32 and half.shape == full.shape
  assert not np.array_equal(half, full)  # it did compute in bfloat16
  assert _cosines(full, half).min() > 0.999
  # Scores move by a few units of bfloat16's precision (2^-8) of their scale (seeds 0-2:
  # at most 0.4, 1.9 and 3.8 units), not more.
  error = np.abs(half @ half.T - full @ full.T)
  scale = np.outer(np.linalg.norm(full, axis=1), np.linalg.norm(full, axis=1))
  assert (error <= 2 ** -5 * scale).all()


def test_bfloat16_export_outputs_float32_close_to_float32(world, tmp_path):
  store, tok, retriever = world
  special = (tok.cls_id, tok.sep_id, tok.pad_id)
  exported = DocEmbedder(export_doc_embedder(retriever, str(tmp_path / "bf16"), *special,
                                             block_length=24, compute_dtype="bfloat16"))
  embeddings = exported.embed_blocks(store.title_ids, store.body_ids)
  assert embeddings.dtype == np.float32
  full = embed_store(retriever, store, *special, block_length=24)
  assert _cosines(full, embeddings).min() > 0.99
