"""Inverse Cloze Task examples (ORQA §4, REALM's retriever warm-start).

A pseudo-query is one sentence of a block; with probability `remove_prob` (0.9) it is removed
from the block, otherwise the block is left whole, so the retriever learns both lexical and
semantic matching. Sentences come from the block text, split by the corpus pipelines' own
splitter (`tokenization.sentence_splitter`: abbreviations, dotted abbreviations and initials do
not end a sentence), and are tokenized separately; their concatenation is the block body. The
block side follows the retriever's `doc_input` (ICT trains the doc tower on what it embeds).
Legend: B batch, Lq query length (64), Lb block length (288).
"""
from typing import Dict, List

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization import sentence_splitter
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def split_sentences(text: str) -> List[str]:
  """Sentences of `text`, as the corpus pipelines split them."""
  return [text[start:end] for start, end in sentence_splitter.split_sentences(text)]


class IctCorpus:
  """Blocks with at least two sentences, read as wordpiece sentences a chunk of rows at a time.

  The corpus is read lazily (a memory-mapped `Corpus`: memory does not grow with N): each
  epoch visits the rows in a new random order, `chunk_size` rows at a time, splitting and
  tokenizing their texts together; blocks of fewer than two sentences are skipped.

  Args:
    store: the blocks.
    tokenizer: the wordpiece tokenizer (its special ids pack the features).
    chunk_size: rows split and tokenized together.
  """

  def __init__(self, store: Corpus, tokenizer: WordpieceTokenizer, chunk_size: int = 1024):
    self.store, self.tokenizer, self.chunk_size = store, tokenizer, chunk_size
    self._title_ids = store.wordpieces(tokenizer)[0]

  def _sentences(self, rows: np.ndarray) -> List[List[np.ndarray]]:
    """The non-empty tokenized sentences of each row."""
    split = [split_sentences(self.store.texts[r]) for r in rows]
    flat = [s for block in split for s in block]
    ids = self.tokenizer(tf.constant(flat)) if flat else None
    values = ids.flat_values.numpy() if flat else None
    splits = ids.row_splits.numpy() if flat else None
    out, offset = [], 0
    for block in split:
      tokens = [values[splits[i]:splits[i + 1]] for i in range(offset, offset + len(block))]
      offset += len(block)
      out.append([t for t in tokens if t.size])
    return out

  def __len__(self) -> int:
    """The number of blocks with at least two sentences (reads every block)."""
    return sum(len(sentences) >= 2
               for start in range(0, len(self.store), self.chunk_size)
               for sentences in self._sentences(
                   np.arange(start, min(start + self.chunk_size, len(self.store)))))

  def has_at_least(self, count: int) -> bool:
    """Whether `count` blocks have two sentences (reads only as many chunks as it needs)."""
    found = 0
    for start in range(0, len(self.store), self.chunk_size):
      rows = np.arange(start, min(start + self.chunk_size, len(self.store)))
      found += sum(len(sentences) >= 2 for sentences in self._sentences(rows))
      if found >= count:
        return True
    return False

  def _examples(self, seed: int, remove_prob: float, max_query: int):
    rng = np.random.default_rng(seed)
    while True:
      yielded = False
      order = rng.permutation(len(self.store))
      for start in range(0, len(order), self.chunk_size):
        rows = order[start:start + self.chunk_size]
        for row, sentences in zip(rows, self._sentences(rows)):
          if len(sentences) < 2:
            continue
          i = int(rng.integers(len(sentences)))
          keep = [s for j, s in enumerate(sentences) if j != i or rng.random() >= remove_prob]
          yielded = True
          yield (sentences[i][:max_query], np.asarray(self._title_ids.row(row), np.int32),
                 np.concatenate(keep))
      if not yielded:
        raise ValueError("no block has two sentences: ICT needs multi-sentence blocks")

  def dataset(self, batch_size: int, seed: int = 0, remove_prob: float = 0.9,
              query_length: int = 64, block_length: int = BLOCK_LENGTH,
              doc_input: str = "title_body") -> tf.data.Dataset:
    """An endless dataset of {"query": [B, Lq] features, "block": [B, Lb] features}; the
    i-th query's positive is the i-th block, every other block in the batch is a negative.
    The block side is packed in the retriever's `doc_input` form (`tokenization.doc_input`):
    ICT trains the doc tower on the input it will embed the corpus from."""
    spec = tf.TensorSpec([None], tf.int32)
    featurizer = Featurizer(self.tokenizer, query_length, block_length, doc_input=doc_input)

    def pack(query, title, body) -> Dict[str, Dict[str, tf.Tensor]]:
      return {"query": featurizer.pack_queries(query),
              "block": featurizer.pack_blocks(title, body)}

    return (tf.data.Dataset.from_generator(
        lambda: self._examples(seed, remove_prob, query_length - 2),
        output_signature=(spec, spec, spec))
            .ragged_batch(batch_size, drop_remainder=True)
            .map(graph_functions.dataset_fn(pack)).prefetch(2))
