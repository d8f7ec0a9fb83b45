"""Recall@k of any retriever over a `Corpus`: rankings in, the Open-QA criterion out.

A question counts as found at k when one of its top-k blocks holds an answer:
`AnswerMatcher.has_answer` on the block's text (body), exactly the test of
`realm_tf.qa.evaluate_lib` and `realm_tf.evaluation.has_answer`; the fraction found is
`realm_tf.evaluation.RecallAtK`. Rankings come from a sparse retriever (`evaluate_rankings`) or
from dense embeddings by exact inner product (`evaluate_retriever`).
Legend: Q questions, N blocks, D embedding dim, K retrieved blocks per question (best first).
"""
import dataclasses
from typing import Callable, Dict, Sequence, Tuple

import numpy as np

from realm_tf.evaluation import RecallAtK
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.retrieval.corpus import Corpus

DEFAULT_KS = (5, 20, 100)
QueryEmbedFn = Callable[[Sequence[str]], np.ndarray]  # Q questions -> float32 [Q, D]


@dataclasses.dataclass
class RetrievalResult:
  """Attributes:
    metrics: {"recall@k": ..., "num_questions": Q} for each cut-off k <= N.
    rows: int64 [Q, K], the retrieved store rows (-1: none), K = the largest cut-off.
    has_answer: bool [Q, K], whether each retrieved block holds an answer.
  """
  metrics: Dict[str, float]
  rows: np.ndarray
  has_answer: np.ndarray


def usable_ks(ks: Sequence[int], num_blocks: int) -> Tuple[int, ...]:
  """The cut-offs a corpus of `num_blocks` allows (larger ones are dropped), ascending."""
  kept = tuple(sorted(k for k in set(int(k) for k in ks) if 1 <= k <= num_blocks))
  if not kept:
    raise ValueError(f"no cut-off of {tuple(ks)} fits a corpus of {num_blocks} blocks")
  return kept


def retrieved_has_answer(rows: np.ndarray, examples: Sequence[QAExample],
                         texts: Sequence[str]) -> np.ndarray:
  """bool [Q, K]: whether block `rows[q, i]` (a row of `texts`; -1: none) answers question q."""
  rows = np.asarray(rows, np.int64)
  if rows.ndim != 2 or rows.shape[0] != len(examples):
    raise ValueError(f"rows must be [Q={len(examples)}, K], got shape {rows.shape}")
  found = np.zeros(rows.shape, bool)
  for q, example in enumerate(examples):
    matcher = AnswerMatcher(example.answers, example.match)
    found[q] = [r >= 0 and matcher.has_answer(texts[r]) for r in rows[q]]
  return found


def recall_at_ks(has_answer: np.ndarray, ks: Sequence[int]) -> Dict[str, float]:
  """{"recall@k": fraction of rows with a True among their first k, ..., "num_questions": Q}
  from bool [Q, K], K >= max(ks)."""
  metric = RecallAtK(ks)
  metric.update(has_answer)
  metrics = {f"recall@{k}": value for k, value in metric.result().items()}
  metrics["num_questions"] = metric.num_questions
  return metrics


def evaluate_rankings(rows: np.ndarray, examples: Sequence[QAExample], store: Corpus,
                      ks: Sequence[int] = DEFAULT_KS) -> RetrievalResult:
  """Recall@k of rankings int [Q, K] (store rows, best first, -1 padded), K >= the largest
  usable cut-off."""
  ks = usable_ks(ks, len(store))
  rows = np.asarray(rows, np.int64)[:, :ks[-1]]
  found = retrieved_has_answer(rows, examples, store.texts)
  return RetrievalResult(recall_at_ks(found, ks), rows, found)


def top_k(query_embeddings: np.ndarray, doc_embeddings: np.ndarray, k: int,
          batch_size: int = 256) -> Tuple[np.ndarray, np.ndarray]:
  """Exact maximum inner product search.

  Args:
    query_embeddings: float [Q, D].
    doc_embeddings: float [N, D].
    k: blocks per query, <= N.

  Returns:
    (rows int64 [Q, k], scores float32 [Q, k]), by descending score, ties by ascending row.
  """
  query_embeddings = np.asarray(query_embeddings, np.float32)
  doc_embeddings = np.asarray(doc_embeddings, np.float32)
  if query_embeddings.ndim != 2 or doc_embeddings.ndim != 2 or (
      query_embeddings.shape[1] != doc_embeddings.shape[1]):
    raise ValueError(f"embeddings must be [Q, D] and [N, D], got {query_embeddings.shape} "
                     f"and {doc_embeddings.shape}")
  if not 1 <= k <= doc_embeddings.shape[0]:
    raise ValueError(f"k={k} outside 1..N={doc_embeddings.shape[0]}")
  rows = np.zeros([len(query_embeddings), k], np.int64)
  for begin in range(0, len(query_embeddings), batch_size):
    negated = -(query_embeddings[begin:begin + batch_size] @ doc_embeddings.T)  # [b, N]
    kth = np.partition(negated, k - 1, axis=1)[:, k - 1]
    for i, row_scores in enumerate(negated):
      candidates = np.flatnonzero(row_scores <= kth[i])  # >= k rows, ascending: every tie
      best = np.argsort(row_scores[candidates], kind="stable")[:k]
      rows[begin + i] = candidates[best]
  scores = np.einsum("qd,qkd->qk", query_embeddings, doc_embeddings[rows])
  return rows, scores.astype(np.float32)


def evaluate_retriever(query_embed_fn: QueryEmbedFn, doc_embeddings: np.ndarray,
                       examples: Sequence[QAExample], store: Corpus,
                       ks: Sequence[int] = DEFAULT_KS,
                       batch_size: int = 64) -> RetrievalResult:
  """Recall@k of a dense retriever: its query embeddings against the block embeddings.

  Args:
    query_embed_fn: questions (a list of Q strings) -> float [Q, D].
    doc_embeddings: float [N, D], row r embeds `store` row r.
    examples: the questions with their gold answers.
    store: the N blocks.
    ks: recall cut-offs (those above N are dropped).
    batch_size: questions per `query_embed_fn` call.
  """
  if len(doc_embeddings) != len(store):
    raise ValueError(f"{len(doc_embeddings)} block embeddings for {len(store)} blocks")
  if not examples:
    raise ValueError("no questions to evaluate")
  ks = usable_ks(ks, len(store))
  questions = [e.question for e in examples]
  queries = np.concatenate([np.asarray(query_embed_fn(questions[b:b + batch_size]), np.float32)
                            for b in range(0, len(questions), batch_size)])
  rows, _ = top_k(queries, doc_embeddings, ks[-1])
  return evaluate_rankings(rows, examples, store, ks)
