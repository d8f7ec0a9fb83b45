"""Synthetic data of REALM's real size for `bench/paper_scale.py`: a corpus, embeddings, queries.

The corpus: N blocks drawn from the blocks the real corpus pipeline makes of the Wikipedia lead
extracts (`real_data.corpus`, 288-wordpiece blocks): each takes a real block's title and title
wordpieces, and a text and body wordpieces of that block's sizes sliced from the real ones, so
every column has the real bytes per block (and the stored wordpieces pass `Corpus`'s sampled
title check). Written through `corpus_files.CorpusWriter`, the path
`Corpus.load` converts every input with. Ids ascend (as the pipeline's canonical order).

Embeddings: D = 128 float32 rows of a mixture of 4,096 Gaussian clusters with unequal
weights (unit-norm centres, noise of norm ~0.6), written in chunks into a `.npy` memmap: the
partitioner meets cluster structure as real embeddings have, not isotropic noise. Queries are
drawn from the same mixture. Legend: N blocks, D dimension, M real blocks.
"""
import os
from typing import Dict, Tuple

import numpy as np

from realm_tf.retrieval import corpus_files

DIM = 128
_CLUSTERS = 4096
_NOISE = 0.6
_CHUNK = 1 << 20
_PASSAGE_BYTES = 600  # 100 words of Wikipedia text with their spaces


def real_block_sample(cache_dir: str) -> Dict[str, np.ndarray]:
  """The real blocks' columns: lengths (M) and pools of their texts and wordpieces."""
  from realm_tf.real_data import corpus as real_corpus  # pylint: disable=import-outside-toplevel
  store, _ = real_corpus.prepare_corpus(cache_dir, num_docs=0, block_length=288)
  in_memory = lambda c: type(c)(np.asarray(c.values), np.asarray(c.offsets))
  return {"titles": in_memory(store.titles), "title_ids": in_memory(store.title_ids),
          "body_len": store.body_ids.row_lengths(), "text_bytes": np.diff(store.texts.offsets),
          "text_pool": np.asarray(store.texts.values),
          "ids_pool": np.asarray(store.body_ids.values, np.uint16)}


def _ascii_safe(pool: np.ndarray) -> bytes:
  """The pool with every byte >= 0x80 made a space, so that any slice is valid UTF-8."""
  pool = np.where(pool >= 0x80, 0x20, pool).astype(np.uint8)
  return pool.tobytes()


def write_corpus(directory: str, num_blocks: int, sample: Dict[str, np.ndarray],
                 seed: int = 0) -> str:
  """Writes an N-block synthetic corpus directory; returns its fingerprint."""
  rng = np.random.default_rng(seed)
  text_pool, ids_pool = _ascii_safe(sample["text_pool"]), sample["ids_pool"]
  titles, title_ids = sample["titles"], sample["title_ids"]
  writer = corpus_files.CorpusWriter(directory, {"path": directory, "kind": "synthetic",
                                                 "num_blocks": num_blocks, "seed": seed},
                                     vocab_size=30522)
  for begin in range(0, num_blocks, _CHUNK):
    count = min(_CHUNK, num_blocks - begin)
    pick = rng.integers(len(titles), size=count)
    text_at = rng.integers(len(text_pool) - sample["text_bytes"].max(), size=count)
    ids_at = rng.integers(len(ids_pool) - sample["body_len"].max(), size=count)
    for i in range(count):
      r, at, start = pick[i], text_at[i], ids_at[i]
      writer.add(begin + i, titles[r], text_pool[at:at + sample["text_bytes"][r]].decode("ascii"),
                 title_ids.row(r), ids_pool[start:start + sample["body_len"][r]])
  return writer.close()


def write_dpr_tsv(path: str, num_passages: int, sample: Dict[str, np.ndarray],
                  seed: int = 0) -> None:
  """Writes DPR's `psgs_w100.tsv` shape: a header, then `id<TAB>text<TAB>title` lines whose
  texts are 100-word slices of the real texts (quoted as DPR's are)."""
  rng = np.random.default_rng(seed)
  pool = _ascii_safe(sample["text_pool"]).replace(b"\t", b" ").replace(b"\n", b" ").replace(
      b'"', b"'")
  titles = sample["titles"]
  with open(path + ".tmp", "wb") as f:
    f.write(b"id\ttext\ttitle\n")
    for begin in range(0, num_passages, _CHUNK):
      count = min(_CHUNK, num_passages - begin)
      at, pick = rng.integers(len(pool) - 700, size=count), rng.integers(len(titles), size=count)
      f.write(b"".join(b'%d\t"%s"\t%s\n' % (begin + i + 1, pool[at[i]:at[i] + _PASSAGE_BYTES],
                                            titles.raw(pick[i]).replace(b"\t", b" "))
                       for i in range(count)))
  os.replace(path + ".tmp", path)


def write_examples(directory: str, num_blocks: int, count: int = 256, seed: int = 0) -> None:
  """Writes `count` salient-span pre-training examples (`examples-*.tfrecord` + manifest) whose
  source blocks are spread over the N blocks."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from realm_tf.data import formats  # pylint: disable=import-outside-toplevel
  from realm_tf.data import shards  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(seed)
  os.makedirs(directory, exist_ok=True)
  with tf.io.TFRecordWriter(os.path.join(directory, "examples-00000-of-00001.tfrecord")) as out:
    for _ in range(count):
      query = rng.integers(2000, 29000, size=24)
      out.write(formats.pretraining_example(query, 5, 7, int(rng.integers(num_blocks)),
                                            "span", "PERSON"))
  shards.write_manifest(directory, "examples", {"synthetic": True})


def _centres(seed: int) -> Tuple[np.ndarray, np.ndarray]:
  rng = np.random.default_rng(seed)
  centres = rng.normal(size=[_CLUSTERS, DIM]).astype(np.float32)
  centres /= np.linalg.norm(centres, axis=1, keepdims=True)
  weights = rng.pareto(1.5, size=_CLUSTERS) + 1.0
  return centres, weights / weights.sum()


def _draw(rng, count: int, seed: int) -> np.ndarray:
  centres, weights = _centres(seed)
  which = rng.choice(_CLUSTERS, size=count, p=weights)
  noise = rng.normal(scale=_NOISE / np.sqrt(DIM), size=[count, DIM]).astype(np.float32)
  return centres[which] + noise


def write_embeddings(path: str, num_blocks: int, seed: int = 0) -> None:
  """Writes float32 [N, D] clustered embeddings as a `.npy`, in chunks (memory O(chunk))."""
  out = np.lib.format.open_memmap(path + ".tmp", mode="w+", dtype=np.float32,
                                  shape=(num_blocks, DIM))
  rng = np.random.default_rng(seed + 1)
  for begin in range(0, num_blocks, _CHUNK):
    count = min(_CHUNK, num_blocks - begin)
    out[begin:begin + count] = _draw(rng, count, seed)
    out.flush()
  del out
  os.replace(path + ".tmp", path)


def queries(count: int, seed: int = 0) -> np.ndarray:
  """float32 [Q, D] queries from the embeddings' mixture."""
  return _draw(np.random.default_rng(seed + 2), count, seed)


def exact_top_k(embeddings: np.ndarray, query: np.ndarray, k: int) -> np.ndarray:
  """int64 [Q, k] exact top-k rows by inner product, streamed over the rows in chunks."""
  best_scores = np.full([len(query), k], -np.inf, np.float32)
  best_rows = np.zeros([len(query), k], np.int64)
  chunk = 1 << 17
  for begin in range(0, len(embeddings), chunk):
    scores = query @ np.asarray(embeddings[begin:begin + chunk], np.float32).T
    top = np.argpartition(-scores, min(k, scores.shape[1] - 1), axis=1)[:, :k]
    scores = np.concatenate([best_scores, np.take_along_axis(scores, top, 1)], axis=1)
    rows = np.concatenate([best_rows, top + begin], axis=1)
    keep = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    best_scores, best_rows = (np.take_along_axis(scores, keep, 1),
                              np.take_along_axis(rows, keep, 1))
  return best_rows
