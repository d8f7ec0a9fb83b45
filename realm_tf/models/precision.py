"""Compute precision of the document embedder (bench/embedding_bench.py measures the gain).

Embedding the corpus is inference only, so it can run in bfloat16: on CPUs with AMX or
AVX512-BF16 (and on TPUs and recent GPUs) bfloat16 matmuls are several times faster than
float32 ones. The copy keeps float32 weights and computes under Keras's `mixed_bfloat16`
policy; callers cast its embeddings back to float32. The benchmark reports how far its
embeddings and nearest neighbours are from float32 ones on real blocks.
"""
from realm_tf.keras import keras
from realm_tf.models.retriever import Retriever

COMPUTE_DTYPES = ("float32", "bfloat16")


def with_compute_dtype(retriever: Retriever, compute_dtype: str) -> Retriever:
  """`retriever` itself for "float32"; for "bfloat16" a copy with the same (float32)
  weights that computes in bfloat16. The copy does not follow later training updates."""
  if compute_dtype not in COMPUTE_DTYPES:
    raise ValueError(f"compute_dtype must be one of {COMPUTE_DTYPES}, got {compute_dtype!r}")
  if compute_dtype == "float32":
    return retriever
  previous = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    copy = Retriever.from_config(retriever.get_config())
    copy.build()
  finally:
    keras.mixed_precision.set_global_policy(previous)
  copy.set_weights(retriever.get_weights())
  return copy
