"""Inverse Cloze Task examples (ORQA §4, REALM's retriever warm-start).

A pseudo-query is one sentence of a block; with probability `remove_prob` (0.9) it is removed
from the block, otherwise the block is left whole, so the retriever learns both lexical and
semantic matching. Sentences come from the block text, split by the corpus pipelines' own
splitter (`pipelines.sentence_splitter`: abbreviations, dotted abbreviations and initials do
not end a sentence), and are tokenized separately; their concatenation is the block body.
Legend: B batch, Lq query length (64), Lb block length (288).
"""
from typing import Dict, List

import numpy as np
import tensorflow as tf

from pipelines import sentence_splitter
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def split_sentences(text: str) -> List[str]:
  """Sentences of `text`, as the corpus pipelines split them."""
  return [text[start:end] for start, end in sentence_splitter.split_sentences(text)]


class IctCorpus:
  """Blocks with at least two sentences, as wordpiece sentences.

  Args:
    store: the blocks.
    tokenizer: the wordpiece tokenizer (its special ids pack the features).
  """

  def __init__(self, store: Corpus, tokenizer: WordpieceTokenizer):
    self.tokenizer = tokenizer
    sentences = [split_sentences(text) for text in store.texts]
    flat = [s for block in sentences for s in block]
    ids = tokenizer(tf.constant(flat)).to_list() if flat else []
    self.titles, self.sentences, self.rows = [], [], []
    title_ids = store.wordpieces(tokenizer)[0].to_list()
    offset = 0
    for row, block in enumerate(sentences):
      tokens = [np.asarray(t, np.int32) for t in ids[offset:offset + len(block)]]
      offset += len(block)
      tokens = [t for t in tokens if t.size]
      if len(tokens) >= 2:
        self.rows.append(row)
        self.titles.append(np.asarray(title_ids[row], np.int32))
        self.sentences.append(tokens)
    if not self.rows:
      raise ValueError("no block has two sentences: ICT needs multi-sentence blocks")

  def __len__(self) -> int:
    return len(self.rows)

  def _examples(self, seed: int, remove_prob: float, max_query: int):
    rng = np.random.default_rng(seed)
    while True:
      for b in rng.permutation(len(self.rows)):
        sentences = self.sentences[b]
        i = int(rng.integers(len(sentences)))
        keep = [s for j, s in enumerate(sentences) if j != i or rng.random() >= remove_prob]
        yield sentences[i][:max_query], self.titles[b], np.concatenate(keep)

  def dataset(self, batch_size: int, seed: int = 0, remove_prob: float = 0.9,
              query_length: int = 64, block_length: int = 288) -> tf.data.Dataset:
    """An endless dataset of {"query": [B, Lq] features, "block": [B, Lb] features}; the
    i-th query's positive is the i-th block, every other block in the batch is a negative."""
    spec = tf.TensorSpec([None], tf.int32)
    featurizer = Featurizer(self.tokenizer, query_length, block_length)

    def pack(query, title, body) -> Dict[str, Dict[str, tf.Tensor]]:
      return {"query": featurizer.pack_queries(query),
              "block": featurizer.pack_blocks(title, body)}

    return (tf.data.Dataset.from_generator(
        lambda: self._examples(seed, remove_prob, query_length - 2),
        output_signature=(spec, spec, spec))
            .ragged_batch(batch_size, drop_remainder=True)
            .map(pack).prefetch(2))
