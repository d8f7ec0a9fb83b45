"""Host-side retrieval of a classification batch (the first half of a step, as Open-QA's
`qa.open_qa_batches`): the blocks each text is classified with, packed for the reader.

B texts, K = k + 1 blocks read (the null document first, `open_qa_step.NULL_ROW`), D dim, Lq
query and Lr reader lengths. The frozen doc tower embeds the corpus once into `BlockIndex`;
the current query tower (no dropout) picks the top k ("dense"), or BM25 does ("bm25"), or
none are read ("none": the null document alone). The step re-embeds the texts itself, so
f(x, z) = <q(x), d(z)> carries the query tower's gradient; the block embeddings [B, K, D] come
from here. The null document is `[CLS] [SEP] [SEP]` to the doc tower and `[CLS] x [SEP] [SEP]`
to the reader, as in Open-QA fine-tuning.
"""
import dataclasses
from typing import Dict, List, Optional

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.evaluation.bm25 import Bm25Index
from realm_tf.mips.index_builder import build_index
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.models.retriever import Retriever
from realm_tf.qa.open_qa_step import MISSING_ROW
from realm_tf.qa.open_qa_step import NULL_ROW
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.tokenization.featurizers import FEATURES
from realm_tf.tokenization.featurizers import Featurizer


@dataclasses.dataclass
class BlockIndex:
  """The corpus embedded by the doc tower: "embeddings" float32 [N, D], the MIPS index over
  them and the null document's embedding [D]."""
  embeddings: np.ndarray
  index: MipsIndex
  null_embedding: np.ndarray

  @classmethod
  def build(cls, retriever: Retriever, featurizer: Featurizer, corpus: Corpus,
            kind: str) -> "BlockIndex":
    """Embeds `corpus` (and the null document) with the doc tower of `retriever` as it is."""
    tokenizer = featurizer.tokenizer
    tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                     featurizer.block_length)
    embeddings = embed_blocks(tower, *corpus.wordpieces(tokenizer))
    null = featurizer.blocks(tf.constant([""]), tf.constant([""]))
    null_embedding = tower(null)[0]
    return cls(embeddings, build_index(embeddings, kind), null_embedding)

  def gather(self, rows: np.ndarray) -> np.ndarray:
    """float32 [..., D] embeddings of rows (`NULL_ROW`: the null document's; -1: zeros)."""
    out = np.zeros(rows.shape + (self.embeddings.shape[1],), np.float32)
    out[rows >= 0] = self.embeddings[rows[rows >= 0]]
    out[rows == NULL_ROW] = self.null_embedding
    return out


class BlockRetrieval:
  """Retrieves and packs the blocks of a batch of texts (module docstring).

  Args:
    retriever: its query tower picks the blocks of "dense" retrieval.
    featurizer: the run's `Featurizer`.
    corpus: the knowledge corpus.
    retrieval: "dense", "bm25" or "none".
    num_read: k (capped at the corpus size; 0 with "none").
    null_document: the null document first among the blocks read.
    block_index: the `BlockIndex` of `corpus` (None with "none").
  """

  def __init__(self, retriever: Retriever, featurizer: Featurizer, corpus: Corpus,
               retrieval: str, num_read: int, null_document: bool,
               block_index: Optional[BlockIndex]):
    self.retriever, self.featurizer, self.corpus = retriever, featurizer, corpus
    self.retrieval, self.block_index = retrieval, block_index
    self.num_read = 0 if retrieval == "none" else min(num_read, len(corpus))
    self.null = int(null_document)
    self.bm25 = Bm25Index.from_store(corpus) if retrieval == "bm25" else None
    self._embed_fn = graph_functions.function(
        self._embed_texts, input_signature=[tf.TensorSpec([None], tf.string)])
    spec = tf.TensorSpec([None, None], tf.string)
    self._reader_fn = graph_functions.function(
        self._reader_inputs, input_signature=[tf.TensorSpec([None], tf.string), spec, spec])

  @property
  def num_blocks(self) -> int:
    """K: the blocks read per text, the null document included."""
    return self.num_read + self.null

  def _embed_texts(self, texts):
    features = self.featurizer.queries(texts)
    return features, self.retriever.embed_query(features, training=False)

  def _reader_inputs(self, texts, titles, bodies):
    _, query_ids = self.featurizer.questions(texts)
    return self.featurizer.reader_inputs(query_ids, titles, bodies)

  def search(self, texts: List[str], num_read: Optional[int] = None) -> Dict[str, np.ndarray]:
    """"query_*" int32 [B, Lq] and "rows" int64 [B, K] (`NULL_ROW`: the null document, -1:
    no block) of `texts`; `num_read`: k for these texts (default the constructor's, capped
    at the corpus size)."""
    features, query_emb = self._embed_fn(tf.constant(texts, tf.string))
    batch = len(texts)
    num_read = self.num_read if num_read is None else min(num_read, len(self.corpus))
    if self.retrieval == "dense":
      rows = self.block_index.index.search(query_emb, num_read)[1].numpy()
    elif self.retrieval == "bm25":
      rows = self.bm25.search(texts, num_read)[0]
    else:
      rows = np.zeros([batch, 0], np.int64)
    rows = np.concatenate([np.full([batch, self.null], NULL_ROW), rows], axis=1)
    prepared = {f"query_{n}": features[n].numpy() for n in FEATURES}
    prepared["rows"] = rows.astype(np.int64)
    return prepared

  def __call__(self, texts: List[str], num_read: Optional[int] = None) -> Dict[str, np.ndarray]:
    """The step's inputs for `texts` (`num_read` as `search`'s): `search`'s,
    "block_embeddings" float32 [B, K, D] (zeros with "none": one null document needs no
    score), "block_mask" bool [B, K] and "reader_*" int32 [B, K, Lr]."""
    prepared = self.search(texts, num_read)
    rows = prepared["rows"]
    batch, k = rows.shape
    titles = [[self.corpus.titles[r] if r >= 0 else "" for r in row] for row in rows]
    bodies = [[self.corpus.texts[r] if r >= 0 else "" for r in row] for row in rows]
    reader = self._reader_fn(tf.constant(texts, tf.string), tf.constant(titles, tf.string),
                             tf.constant(bodies, tf.string))
    prepared.update({f"reader_{n}": reader[n].numpy().reshape([batch, k, -1])
                     for n in FEATURES})
    dim = self.retriever.projection_size
    prepared["block_embeddings"] = (self.block_index.gather(rows) if self.block_index
                                    else np.zeros([batch, k, dim], np.float32))
    prepared["block_mask"] = rows != MISSING_ROW
    return prepared
