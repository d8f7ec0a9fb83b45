"""Held-out retrieval recall tracked while a stage trains, so that no stage silently forgets.

A stage (ICT, REALM pre-training, Open-QA fine-tuning) that starts from a good retriever can
end below where it started while its loss falls (overfitting the corpus or questions it trains
on). `RecallMonitor` measures recall@k of dev questions over the *whole* corpus the model will
serve, every `every_n_steps` steps and at the start, with the current weights; `TrainLoop`
logs it (metrics.jsonl, TensorBoard `eval/...`), keeps the best checkpoint in
`<model_dir>/best/` and warns when the stage ends below its start.

Legend: Q dev questions, N corpus blocks, D embedding dim, k cut-off.

Recall@k = fraction of questions with a top-k block that holds an answer
(`realm_tf.evaluation.retrieval_recall`, the criterion `realm_tf.qa.evaluate_lib` uses).
"""
from typing import Callable, Dict, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.evaluation import retrieval_recall
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def query_embed_fn(retriever: Retriever, tokenizer: WordpieceTokenizer,
                   query_length: int = 64) -> retrieval_recall.QueryEmbedFn:
  """Q questions -> float32 [Q, D] by `retriever.embed_query` with its current weights (no
  dropout; traced once, for any batch size)."""
  featurizer = Featurizer(tokenizer, query_length=query_length)
  embed = graph_functions.function(
      lambda f: tf.cast(retriever.embed_query(f, training=False), tf.float32),
      input_signature=[featurizer.query_spec()])
  return lambda questions: embed(featurizer.queries(tf.constant(list(questions)))).numpy()


# (query embeddings [Q, D], k) -> corpus rows [Q, k], best first: a search of the index the
# trainer uses (REALM pre-training's MIPS index) instead of embedding the store every time.
Search = Callable[[np.ndarray, int], np.ndarray]


class RecallMonitor:
  """recall@k of `examples` over `store` with a retriever's current weights.

  Args:
    store: the whole corpus the model will serve.
    examples: dev questions (never test questions).
    tokenizer: the wordpiece tokenizer.
    every_n_steps: evaluation period in trainer steps.
    ks: cut-offs; `metric` ("recall@<k>") picks the one the best checkpoint is chosen by.
    query_length, block_length: featurization lengths.
  """

  def __init__(self, store: Corpus, examples: Sequence[QAExample],
               tokenizer: WordpieceTokenizer, every_n_steps: int, ks: Sequence[int] = (5, 20),
               metric: str = "", query_length: int = 64, block_length: int = BLOCK_LENGTH,
               batch_size: int = 64):
    if not examples:
      raise ValueError("RecallMonitor needs at least one dev question")
    if every_n_steps < 1:
      raise ValueError(f"every_n_steps must be >= 1, got {every_n_steps}")
    self.store, self.examples, self.every_n_steps = store, list(examples), every_n_steps
    self.ks = retrieval_recall.usable_ks(ks, len(store))  # cut-offs above N dropped
    self.metric = metric or f"recall@{self.ks[0]}"
    if self.metric not in {f"recall@{k}" for k in self.ks}:
      raise ValueError(f"metric {self.metric!r} is not one of the cut-offs {self.ks}")
    self.tokenizer, self.block_length, self.batch_size = tokenizer, block_length, batch_size
    self.query_length = query_length
    self._wordpieces = store.wordpieces(tokenizer)  # (title_ids, body_ids) [N, (T)]
    self._doc_tower: Optional[DocTower] = None
    self._query_embedder: Optional[Tuple[Retriever, retrieval_recall.QueryEmbedFn]] = None

  def _embed_store(self, retriever: Retriever) -> np.ndarray:
    if self._doc_tower is None or self._doc_tower.retriever is not retriever:
      self._doc_tower = DocTower(retriever, self.tokenizer.cls_id, self.tokenizer.sep_id,
                                 self.tokenizer.pad_id, block_length=self.block_length)
    return embed_blocks(self._doc_tower, *self._wordpieces)

  def embed_questions(self, retriever: Retriever) -> np.ndarray:
    """[Q, D] query embeddings (no dropout)."""
    if self._query_embedder is None or self._query_embedder[0] is not retriever:
      self._query_embedder = (retriever, query_embed_fn(retriever, self.tokenizer,
                                                        self.query_length))
    embed = self._query_embedder[1]
    questions = [e.question for e in self.examples]
    return np.concatenate([embed(questions[start:start + self.batch_size])
                           for start in range(0, len(questions), self.batch_size)])

  def __call__(self, retriever: Retriever, search: Optional[Search] = None) -> Dict[str, float]:
    """{"recall@k": ...} for every cut-off, with `retriever`'s current query tower.

    Args:
      retriever: the model being trained.
      search: the index the trainer searches (REALM pre-training's MIPS index, whose doc
        embeddings may be a few steps stale); default: embed the store with the current doc
        tower and search exactly.
    """
    queries = self.embed_questions(retriever)
    k = max(self.ks)
    if search is not None:
      top = np.asarray(search(queries, k))
    else:
      top, _ = retrieval_recall.top_k(queries, self._embed_store(retriever), k)  # [Q, k]
    return self.recall_of_rows(top)

  def recall_of_rows(self, top: np.ndarray) -> Dict[str, float]:
    """{"recall@k": ...} of retrieved corpus rows [Q, K] (best first, -1 = none), from any
    retriever (e.g. a BM25 baseline)."""
    metrics = retrieval_recall.evaluate_rankings(top, self.examples, self.store, self.ks).metrics
    return {name: value for name, value in metrics.items() if name.startswith("recall@")}
