"""Zero-shot retrieval recall@k of a pre-trained retriever on Open-QA questions (REALM Table 2).

No fine-tuning: the questions go through the query tower, the blocks through the doc tower,
exact MIPS returns the top k, and a question counts as found when one of its k blocks holds an
answer (`realm_tf.evaluation.has_answer`, what Open-QA evaluation's recall@k uses).
Legend: Q questions, N blocks, D embedding dim.
"""
from typing import Sequence

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.mips.index_builder import build_index
from realm_tf.models.retriever import Retriever
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_blocks
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def retrieved_has_answer(retriever: Retriever, store: Corpus,
                         tokenizer: WordpieceTokenizer, examples: Sequence[QAExample], k: int,
                         query_length: int, block_length: int,
                         batch_size: int = 64) -> np.ndarray:
  """bool [Q, k]: whether the i-th retrieved block of each question holds an answer."""
  tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                   block_length=block_length)
  block_emb = embed_blocks(tower, *store.wordpieces(tokenizer))  # [N, D]
  index = build_index(block_emb, "brute_force")
  featurize = Featurizer(tokenizer, query_length, block_length).queries
  embed = graph_functions.function(lambda f: retriever.embed_query(f, training=False),
                                   reduce_retracing=True)
  k = min(k, len(store))
  rows = []
  for begin in range(0, len(examples), batch_size):
    batch = examples[begin:begin + batch_size]
    query_emb = embed(featurize(tf.constant([e.question for e in batch])))  # [b, D]
    rows.append(index.search(query_emb, k)[1].numpy())
  rows = np.concatenate(rows) if rows else np.zeros([0, k], np.int64)
  return np.array([[r >= 0 and AnswerMatcher(e.answers, e.match).has_answer(store.texts[r])
                    for r in row] for e, row in zip(examples, rows)], bool).reshape(-1, k)


def zero_shot_recall(retriever: Retriever, store: Corpus, tokenizer: WordpieceTokenizer,
                     examples: Sequence[QAExample], k: int = 5, query_length: int = 64,
                     block_length: int = BLOCK_LENGTH) -> float:
  """The fraction of `examples` with an answer-bearing block among their top `k`."""
  if not examples:
    raise ValueError("no questions")
  found = retrieved_has_answer(retriever, store, tokenizer, list(examples), k, query_length,
                               block_length)
  return float(found.any(axis=1).mean())
