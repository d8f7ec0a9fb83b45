"""Retrieve-and-read over an embedded corpus: the REALM inference path, end to end.

Legend: N blocks, Q questions, k retrieved blocks, L length, S spans, D embedding dim.

1. `embed_blocks`: (title, body) -> `[CLS] title [SEP] body [SEP]` -> doc tower -> [N, D].
2. A `MipsIndex` over the block embeddings (ScaNN or exact).
3. `RetrieveAndRead.answer`: question -> query tower -> top-k blocks with p(z|x) ->
   reader over `[CLS] x [SEP] z_body [SEP]` -> the best (block, span) under
   f(x, z) + span score, one softmax over all pairs (DESIGN.md §3).
"""
import dataclasses
from typing import Callable, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf.mips.mips_index import MipsIndex
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.tokenization.featurizers import BlockFeaturizer
from realm_tf.tokenization.featurizers import QueryFeaturizer
from realm_tf.tokenization.featurizers import ReaderFeaturizer
from realm_tf.tokenization.featurizers import block_body_ids
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def embed_blocks(retriever: Retriever, tokenizer: WordpieceTokenizer, titles: Sequence[str],
                 bodies: Sequence[str], batch_size: int = 32, block_length: int = 288,
                 progress: Optional[Callable[[int], None]] = None) -> np.ndarray:
  """Embeds blocks with the document tower, in order.

  Each batch is padded only to its longest block (length bucketing by batch), which saves
  most of the compute on short Wikipedia blocks.

  Returns:
    float32 [N, D] block embeddings.
  """
  featurize = BlockFeaturizer(tokenizer, seq_length=block_length)

  def trim(features):
    longest = tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1))
    return {name: t[:, :longest] for name, t in features.items()}

  dataset = (tf.data.Dataset.from_tensor_slices((list(titles), list(bodies)))
             .batch(batch_size).map(lambda t, b: trim(featurize((t, b))))
             .prefetch(tf.data.AUTOTUNE))
  embed = tf.function(lambda f: retriever.embed_documents(f, training=False),
                      reduce_retracing=True)
  chunks = []
  for features in dataset:
    chunks.append(embed(features).numpy())
    if progress:
      progress(len(chunks[-1]))
  return np.concatenate(chunks, axis=0)


@dataclasses.dataclass
class Evidence:
  block_id: int
  title: str
  text: str
  probability: float  # p(z | x) among the k retrieved blocks


@dataclasses.dataclass
class Answer:
  question: str
  answer: str
  probability: float  # of the best (block, span) among all k blocks' spans
  evidence: List[Evidence]


class RetrieveAndRead:
  """Answers questions from a block corpus with a retriever, an index and a reader."""

  def __init__(self, retriever: Retriever, reader: Reader, tokenizer: WordpieceTokenizer,
               index: MipsIndex, titles: Sequence[str], bodies: Sequence[str], k: int = 5,
               query_length: int = 96, block_length: int = 288, reader_length: int = 320):
    if index.num_docs != len(titles) or len(titles) != len(bodies):
      raise ValueError(f"index has {index.num_docs} blocks but the corpus has {len(titles)} "
                       f"titles and {len(bodies)} bodies")
    self.retriever, self.reader, self.tokenizer, self.index = retriever, reader, tokenizer, index
    self.titles, self.bodies, self.k = list(titles), list(bodies), k
    self._query = QueryFeaturizer(tokenizer, seq_length=query_length)
    self._block = BlockFeaturizer(tokenizer, seq_length=block_length)
    self._reader_input = ReaderFeaturizer.from_tokenizer(tokenizer, seq_length=reader_length)

  def answer(self, questions: Sequence[str]) -> List[Answer]:
    """Answers each question with its best span and the retrieved evidence blocks."""
    questions = list(questions)
    query_features = self._query(tf.constant(questions))
    query_emb = self.retriever.embed_query(query_features)  # [Q, D]
    _, ids = self.index.search(query_emb, self.k)  # [Q, k]
    ids = ids.numpy()
    results = []
    for q, question in enumerate(questions):
      titles = [self.titles[i] for i in ids[q]]
      bodies = [self.bodies[i] for i in ids[q]]
      blocks = self._block((tf.constant(titles), tf.constant(bodies)))
      doc_emb = self.retriever.embed_documents(blocks)  # [k, D], fresh scores
      logits = tf.linalg.matvec(doc_emb, query_emb[q])  # [k]
      body_ids = block_body_ids(blocks["input_word_ids"], blocks["input_type_ids"],
                                blocks["input_mask"])
      query_ids = self.tokenizer(tf.constant([question] * self.k))
      reader_input = self._reader_input((query_ids, body_ids))
      span_logits, starts, ends = self.reader.span_logits(
          {n: reader_input[n] for n in ("input_word_ids", "input_mask", "input_type_ids")},
          reader_input["block_mask"])
      joint = tf.reshape(span_logits + logits[:, None], [-1])  # [k * S]
      best = int(tf.argmax(joint))
      block, span = divmod(best, int(span_logits.shape[1]))
      start, end = int(starts[span]), int(ends[span])
      span_ids = reader_input["input_word_ids"][block, start:end + 1]
      text = self.tokenizer.detokenize(span_ids).numpy().decode("utf-8")
      retrieval_probs = tf.nn.softmax(logits).numpy()
      results.append(Answer(
          question=question, answer=text,
          probability=float(tf.nn.softmax(joint)[best]),
          evidence=[Evidence(int(i), t, b, float(p))
                    for i, t, b, p in zip(ids[q], titles, bodies, retrieval_probs)]))
    return results
