"""The one block-embedding function: wordpieces of (title, body) blocks -> float32 [N, D].

Every path that embeds a corpus runs `embed_blocks` (refreshes, the recall monitor, the QA
document index, retrieve-and-read, the Beam builder's `EmbedBlocks`); only the doc tower
differs, behind `Tower`: `DocTower` (a retriever in memory, optionally bfloat16 and XLA) or
`ExportTower` (a doc-embedder SavedModel), each packing blocks in its model's `doc_input` form.

Blocks are embedded shortest first, each batch padded only to its longest block, rounded up to
the tower's `bucket`: most blocks are far below 288 wordpieces, and few shapes mean few traces
(BENCHMARKS.md §1). An XLA tower's last batch is padded to `batch_size`, one shape. The process
keeps the embeddings of the last `_MEMO_SIZE` corpora an in-memory `DocTower` embedded (up to
`_MEMO_MAX_BYTES`), keyed by a digest of its weights, architecture, precision, packing and the
wordpieces: a process running ICT then pre-training (the demo) embeds the corpus with the same
tower twice.
"""
import collections
import hashlib
import json
from typing import Callable, Dict, Optional, Protocol, Sequence, Union

import numpy as np
import tensorflow as tf
from absl import logging

from realm_tf import graph_functions
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.models.precision import with_compute_dtype
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.columns import RaggedColumn
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.bert_packer import padded_length
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

Features = Dict[str, tf.Tensor]
Ragged = Union[tf.RaggedTensor, RaggedColumn]
# Largest |difference| of two embeddings of the same block by the same doc tower, relative to
# the largest |embedding| (at least 1), by the precision of either side. bfloat16: about 4x the
# largest measured between a float32 and a bfloat16 MiniLM doc tower on 256 Wikipedia blocks
# (Zen 4, avx512_bf16): 0.0089 relative with the realm head (0.032 at |embedding| <= 3.57),
# 0.0068 with the sentence head (0.0017 at |embedding| <= 0.25). float16: embeddings stored in
# float16 (`retrieval.embedding_file`) round by at most 2^-11 relative, within float32's.
_RELATIVE_TOLERANCE = {"float32": 1e-3, "bfloat16": 0.04, "float16": 1e-3}
_MEMO_SIZE = 2
_MEMO_MAX_BYTES = 256 * 2**20
_memo: "collections.OrderedDict[bytes, np.ndarray]" = collections.OrderedDict()


def embedding_tolerance(dtypes: Sequence[str], scale: float = 1.0) -> float:
  """The largest |difference| allowed between embeddings computed or stored in `dtypes`
  ("float32" / "bfloat16" / "float16"), embeddings of largest |value| `scale`."""
  return max(_RELATIVE_TOLERANCE[d] for d in dtypes) * max(1.0, scale)


class Tower(Protocol):
  """A doc tower as `embed_blocks` runs it.

  Attributes:
    packer: packs `doc_input`'s segments to at most `block_length` wordpieces.
    doc_input: "title_body" (`[CLS] title [SEP] body [SEP]`) or "body" (`[CLS] body [SEP]`).
    bucket: padded lengths are multiples of this.
    dim: D.
    jit_compile: whether the forward is XLA-compiled (then every batch has `batch_size` rows).
  """
  packer: BertPacker
  doc_input: str
  bucket: int
  dim: int
  jit_compile: bool

  def start(self) -> None:
    """Called once before a corpus is embedded."""

  def __call__(self, features: Features) -> np.ndarray:
    """int32 [B, L] features -> float32 [B, D]."""

  def digest(self) -> Optional[bytes]:
    """What decides the tower's embeddings of given features (None: not known, no reuse)."""


class DocTower:
  """A retriever's doc tower in memory, traced once (callers that embed repeatedly, such as
  the synchronous refresher, keep one instead of re-tracing per call); it embeds with the
  tower's weights at the time of `embed_blocks`.

  `compute_dtype="bfloat16"` embeds with a bfloat16 copy of the doc tower (`models.precision`),
  several times faster where the hardware has bfloat16 matmuls; the copy takes the retriever's
  weights at every `start`. `jit_compile=True` XLA-compiles the forward, once per bucket
  length.
  """

  def __init__(self, retriever: Retriever, cls_id: int, sep_id: int, pad_id: int,
               block_length: int = BLOCK_LENGTH, bucket: int = 32, compute_dtype: str = "float32",
               jit_compile: bool = False):
    self.retriever = retriever
    self.packer = BertPacker(block_length, cls_id, sep_id, pad_id)
    self.doc_input = retriever.doc_input
    self.bucket, self.dim, self.jit_compile = bucket, retriever.projection_size, jit_compile
    self._embedder = with_compute_dtype(retriever, compute_dtype)
    embedder = self._embedder
    self._embed = graph_functions.function(
        lambda f: tf.cast(embedder.embed_documents(f, training=False), tf.float32),
        reduce_retracing=True, jit_compile=jit_compile)

  def start(self) -> None:
    if self._embedder is not self.retriever:
      self._embedder.set_weights(self.retriever.get_weights())

  def __call__(self, features: Features) -> np.ndarray:
    return self._embed(features).numpy()

  def digest(self) -> bytes:
    """The doc tower's current weights, architecture, pooling and head, precision and packing."""
    retriever = self.retriever
    digest = hashlib.blake2b(digest_size=32)
    settings = dict(encoder=_layer_config(retriever.doc_encoder), pooling=retriever.pooling,
                    projection=retriever.projection, epsilon=retriever.layer_norm_epsilon,
                    compute_dtype=self._embedder.compute_dtype, jit=self.jit_compile,
                    bucket=self.bucket, seq_length=self.packer.seq_length,
                    special_ids=(self.packer.cls_id, self.packer.sep_id, self.packer.pad_id),
                    truncation=self.packer.truncation, doc_input=self.doc_input)
    digest.update(json.dumps(settings, sort_keys=True, default=str).encode())
    for weight in retriever.doc_encoder.weights + retriever.doc_projection.weights:
      value = weight.numpy()
      digest.update(f"{value.dtype}{value.shape}".encode())
      digest.update(np.ascontiguousarray(value).tobytes())
    return digest.digest()


class ExportTower:
  """A doc-embedder export (`realm_tf.signatures.doc_embedder`) through its "serving_default"
  signature, with the export's packing, `length_multiple` and XLA option."""

  def __init__(self, doc_embedder: DocEmbedder):
    self.doc_embedder = doc_embedder
    self.packer = BertPacker(doc_embedder.block_length, doc_embedder.cls_id,
                             doc_embedder.sep_id, doc_embedder.pad_id)
    self.doc_input = doc_embedder.doc_input
    self.bucket, self.dim = doc_embedder.length_multiple, doc_embedder.embedding_dim
    self.jit_compile = doc_embedder.jit_compile

  def start(self) -> None:
    """Nothing to prepare: the export's weights are fixed."""

  def digest(self) -> None:
    """None: an export's embeddings are not reused."""
    return None

  def __call__(self, features: Features) -> np.ndarray:
    return self.doc_embedder.embed_features(features)


def embed_blocks(tower: Tower, title_ids: Ragged, body_ids: Ragged, batch_size: int = 64,
                 progress: Optional[Callable[[int], None]] = None,
                 out: Optional[np.ndarray] = None) -> np.ndarray:
  """Embeds blocks with `tower`, `batch_size` at a time, by length buckets (module docstring).

  Args:
    tower: the doc tower.
    title_ids, body_ids: [N, (T)] wordpieces without specials: int RaggedTensors or
      `RaggedColumn`s (a memory-mapped corpus's: only each batch's rows are read).
    batch_size: B.
    progress: called with the number of blocks of each batch embedded.
    out: optional [N, D] array to fill (float32, float16 or bfloat16; e.g. a memmap on
      disk, so that N need not fit in memory twice).

  Returns:
    [N, D] in input order: `out`, or a new float32 array.
  """
  title_ids, body_ids = RaggedColumn.from_ragged(title_ids), RaggedColumn.from_ragged(body_ids)
  num_blocks = len(title_ids)
  key = _memo_key(tower, title_ids, body_ids, batch_size) if out is None else None
  if key in _memo:
    _memo.move_to_end(key)
    logging.info("Reusing the embeddings of %d blocks by the same doc tower", len(_memo[key]))
    if progress:
      progress(num_blocks)
    return _memo[key].copy()
  tower.start()
  lengths = doc_inputs.packed_lengths(title_ids.row_lengths(), body_ids.row_lengths(),
                                     tower.doc_input)
  order = np.argsort(lengths, kind="stable")
  block_length = tower.packer.seq_length
  embeddings = np.zeros([num_blocks, tower.dim], np.float32) if out is None else out
  columns = doc_inputs.segments(title_ids, body_ids, tower.doc_input)
  for start in range(0, num_blocks, batch_size):
    rows = order[start:start + batch_size]
    segments = tuple(tf.cast(column.gather(rows), tf.int32) for column in columns)
    length = padded_length(int(lengths[rows].max()), tower.bucket, block_length)
    features = {n: t[:, :length] for n, t in tower.packer(segments).items()}
    if tower.jit_compile and len(rows) < batch_size:
      features = {n: tf.pad(t, [[0, batch_size - len(rows)], [0, 0]])
                  for n, t in features.items()}
    embeddings[rows] = tower(features)[:len(rows)].astype(embeddings.dtype)
    if progress:
      progress(len(rows))
  if key is not None:
    _memo[key] = embeddings.copy()
    while len(_memo) > _MEMO_SIZE:
      _memo.popitem(last=False)
  return embeddings


def _memo_key(tower: Tower, title_ids: RaggedColumn, body_ids: RaggedColumn,
              batch_size: int) -> Optional[bytes]:
  """The reuse key of an `embed_blocks` request (None: not reusable, or too large to keep)."""
  if len(title_ids) * tower.dim * 4 > _MEMO_MAX_BYTES:
    return None
  tower_digest = tower.digest()
  if tower_digest is None:
    return None
  digest = hashlib.blake2b(tower_digest, digest_size=32)
  digest.update(str(batch_size).encode())
  for column in (title_ids, body_ids):
    for part in (column.offsets, np.asarray(column.values, np.int64)):
      value = np.asarray(part)
      digest.update(f"{value.dtype}{value.shape}".encode())
      digest.update(np.ascontiguousarray(value).tobytes())
  return digest.digest()


def _layer_config(layer) -> object:
  """A layer's Keras config, or its class name where it has none."""
  try:
    return layer.get_config()
  except NotImplementedError:
    return type(layer).__name__


def embed_texts(tower: Tower, tokenizer: WordpieceTokenizer, titles: Sequence[str],
                texts: Sequence[str], batch_size: int = 64,
                progress: Optional[Callable[[int], None]] = None) -> np.ndarray:
  """N titles and texts, tokenized by `tokenizer`, through `embed_blocks`: float32 [N, D]."""
  if len(titles) != len(texts):
    raise ValueError(f"{len(titles)} titles for {len(texts)} texts")
  tokenize = lambda strings: tokenizer(tf.constant(list(strings), tf.string)) if len(
      strings) else tf.ragged.constant([], tf.int32, ragged_rank=1)
  return embed_blocks(tower, tokenize(titles), tokenize(texts), batch_size, progress)
