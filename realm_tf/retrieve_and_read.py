"""Retrieve-and-read over an embedded corpus: the REALM inference path, end to end.

N blocks, B questions, k retrieved, S spans, D embedding dim. The doc tower embeds the blocks
`[CLS] title [SEP] body [SEP]` -> [N, D] (`retrieval.embedding.embed_texts`), a `MipsIndex`
searches them, and `RetrieveAndRead.answer` takes a question through the query tower to the
top-k blocks and their logits f(x, z), then the reader over `[CLS] x [SEP] z_body [SEP]` to the
best (block, span): one softmax of f(x, z) + span score over all k x S pairs, or for a
"per_document" reader p(z | x) times a softmax over the block's spans. Answers are ORQA's
strings (`tokenization.answer_text`, docs/decisions.md).

The graph pieces (`tokenization.featurizers.Featurizer`, `RetrieveAndRead.read`) are TF ops end
to end, so that the same code runs eagerly, in fine-tuning (which reads the same reader inputs)
and inside the exported `realm_qa` SavedModel. Questions longer than the query length are
truncated (the query tower and the reader see the same wordpieces); empty ones are an error.
"""
import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.layers.span_scorer import masked_logit_value
from realm_tf.losses.open_qa_loss import per_document_log_probs
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.models.length_buckets import trim_batch
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")
# Answering's length buckets: small enough that a 10-wordpiece question reads 16, few enough
# (Lr / 16) that every bucket's shapes are met early.
LENGTH_MULTIPLE = 16


@dataclasses.dataclass
class Evidence:
  block_id: int
  title: str
  text: str
  probability: float  # p(z | x) among the k retrieved blocks
  row: int = -1  # the block's row in the corpus / index


@dataclasses.dataclass
class Answer:
  question: str
  answer: str
  probability: float  # of the best (block, span) among all k blocks' spans
  evidence: List[Evidence]
  block: int = -1  # which evidence block the answer was read from (-1: none)


class RetrieveAndRead:
  """Answers questions from a block corpus with a retriever, an index and a reader.

  Args:
    retriever: its query tower embeds questions.
    reader: its span head reads the retrieved blocks.
    tokenizer: the models' `WordpieceTokenizer`.
    index: a `MipsIndex` over the doc-tower embeddings of the N blocks, row r = block r.
    titles, bodies: the N blocks' titles and texts.
    k: blocks read per question.
    query_length, block_length, reader_length: see `Featurizer`.
    block_ids: the N blocks' ids for the evidence (default: row numbers).
    batch_size: questions per batch in `answer` and `retrieve`.
    span_normalization: how span scores become answer probabilities, as the reader was
      trained (`presets.ModelConfig`).
    length_multiple: questions are cut to the batch's longest and reader inputs encoded by
      length buckets, lengths rounded up to this multiple (`models.length_buckets`; 0: padded
      to `query_length` and `reader_length`, static shapes).
  """

  def __init__(self, retriever: Retriever, reader: Reader, tokenizer: WordpieceTokenizer,
               index: MipsIndex, titles: Sequence[str], bodies: Sequence[str], k: int = 5,
               query_length: int = 96, block_length: int = BLOCK_LENGTH, reader_length: int = 320,
               block_ids: Optional[Sequence[int]] = None, batch_size: int = 16,
               span_normalization: str = "joint", length_multiple: int = LENGTH_MULTIPLE):
    if index.num_docs != len(titles) or len(titles) != len(bodies):
      raise ValueError(f"index has {index.num_docs} blocks but the corpus has {len(titles)} "
                       f"titles and {len(bodies)} bodies")
    if block_ids is not None and len(block_ids) != len(titles):
      raise ValueError(f"{len(block_ids)} block ids for {len(titles)} blocks")
    if k < 1:
      raise ValueError(f"k must be >= 1, got {k}")
    self.retriever, self.reader, self.tokenizer, self.index = retriever, reader, tokenizer, index
    self.span_normalization, self.length_multiple = span_normalization, int(length_multiple)
    self.titles, self.bodies = titles, bodies  # sequences read by row (memory-mapped columns)
    self.block_ids = (np.arange(len(titles), dtype=np.int64) if block_ids is None
                      else np.asarray(block_ids, np.int64))
    self.k = min(int(k), index.num_docs)
    self.batch_size = int(batch_size)
    self.featurizer = Featurizer(tokenizer, query_length, block_length, reader_length)
    # Signatures with a None batch dimension: one trace serves every batch, a short last one too.
    self._embed_fn = graph_functions.function(
        self.embed_questions, input_signature=[tf.TensorSpec([None], tf.string)])
    self._read_fn = None  # traced on first use, when the wordpieces' ragged spec is known

  # Graph pieces ------------------------------------------------------------------------------

  def embed_questions(self, questions: tf.Tensor):
    """string [B] -> (query features [B, Lq'], query wordpieces [B, (T)], float32 embeddings
    [B, D]); Lq' = Lq, or the longest question rounded up (`length_multiple`)."""
    features, query_ids = self.featurizer.questions(questions)
    features = trim_batch(features, self.length_multiple)
    return features, query_ids, tf.cast(self.retriever.embed_query(features, training=False),
                                        tf.float32)

  def read(self, query_ids: tf.RaggedTensor, titles: tf.Tensor, texts: tf.Tensor,
           retrieval_scores: tf.Tensor, valid: tf.Tensor,
           training: bool = False) -> Dict[str, tf.Tensor]:
    """Reads k blocks per question and picks the best (block, span).

    Args:
      query_ids: int [B, (T)] question wordpieces.
      titles, texts: string [B, k] the retrieved blocks, best first.
      retrieval_scores: float [B, k] f(x, z) of those blocks.
      valid: bool [B, k], False for missing results (index id -1).
      training: the reader's dropout (the `realm_qa` export fine-tunes through it).

    Returns:
      {"answer": string [B], "probability": float32 [B] of the best (block, span): one
        softmax over all k x S pairs, or p(z | x) p(s | z, x) with "per_document" span
        normalisation (0 when no block has a span), "block": int32 [B] the
        answer's block in 0..k-1 (-1: none), "span_start"/"span_end": int32 [B] positions in
        that block's reader input, "block_probabilities": float32 [B, k] p(z | x) over the k
        blocks}.
    """
    batch = tf.shape(titles)[0]
    num_blocks = tf.shape(titles)[1]
    features = trim_batch(self.featurizer.reader_inputs(query_ids, titles, texts),
                          self.length_multiple)
    span_logits, starts, ends = self.reader.span_logits(
        {n: features[n] for n in _FEATURES}, features["block_mask"], training=training,
        length_multiple=self.length_multiple)
    num_spans = tf.shape(span_logits)[1]
    masked = masked_logit_value(tf.float32)
    span_logits = tf.reshape(tf.cast(span_logits, tf.float32), [batch, num_blocks, num_spans])
    valid = tf.logical_and(tf.cast(valid, tf.bool), tf.math.is_finite(retrieval_scores))
    retrieval_logits = tf.where(valid, tf.cast(retrieval_scores, tf.float32), masked)
    span_ok = tf.logical_and(span_logits > masked / 2, valid[:, :, None])  # [B, k, S]
    if self.span_normalization == "per_document":  # log p(z|x) + log p(s|z,x)
      scores = (tf.nn.log_softmax(retrieval_logits, axis=1)[:, :, None] +
                per_document_log_probs(span_logits, span_ok))
    else:
      scores = span_logits + retrieval_logits[:, :, None]
    joint = tf.reshape(tf.where(span_ok, scores, masked), [batch, -1])  # [B, k*S]
    best = tf.argmax(joint, axis=1, output_type=tf.int32)
    found = tf.reduce_any(tf.reshape(span_ok, [batch, -1]), axis=1)
    probability = tf.exp(tf.reduce_max(
        joint if self.span_normalization == "per_document" else tf.nn.log_softmax(joint),
        axis=1))
    block, span = best // num_spans, best % num_spans
    span_start, span_end = tf.gather(starts, span), tf.gather(ends, span)
    row = tf.range(batch) * num_blocks + block
    text = self.featurizer.span_text(
        tf.gather(tf.reshape(texts, [-1]), row), tf.gather(features["input_word_ids"], row),
        tf.gather(features["block_mask"], row), span_start, span_end)
    return {
        "answer": tf.where(found, text, ""),
        "probability": tf.where(found, probability, 0.0),
        "block": tf.where(found, block, -1),
        "span_start": tf.where(found, span_start, -1),
        "span_end": tf.where(found, span_end, -1),
        "block_probabilities": tf.nn.softmax(retrieval_logits, axis=1),
    }

  # Python API ---------------------------------------------------------------------------------

  @staticmethod
  def check_questions(questions: Sequence[str]) -> List[str]:
    """Returns the questions as a list; an empty or blank one is a ValueError."""
    questions = list(questions)
    for i, question in enumerate(questions):
      if not isinstance(question, str) or not question.strip():
        raise ValueError(f"question {i} is empty: {question!r}")
    return questions

  def _batches(self, questions: List[str]):
    for begin in range(0, len(questions), self.batch_size):
      yield questions[begin:begin + self.batch_size]

  def _search(self, questions: List[str], k: int):
    features, query_ids, query_emb = self._embed_fn(tf.constant(questions))
    too_long = np.flatnonzero(
        self.tokenizer(tf.constant(questions)).row_lengths().numpy() >
        self.featurizer.query_length - 2)
    for i in too_long:
      logging.warning("question truncated to %d wordpieces: %r",
                      self.featurizer.query_length - 2, questions[i])
    scores, rows = self.index.search(query_emb, k)
    return features, query_ids, scores.numpy(), rows.numpy()

  def retrieve(self, questions: Sequence[str], k: Optional[int] = None
               ) -> Tuple[np.ndarray, np.ndarray]:
    """The top-k blocks of each question.

    Returns:
      scores float32 [B, k] and rows int64 [B, k] (corpus rows, -1 for missing results).
    """
    questions = self.check_questions(questions)
    k = min(int(k or self.k), self.index.num_docs)
    scores, rows = [], []
    for batch in self._batches(questions):
      _, _, s, r = self._search(batch, k)
      scores.append(s)
      rows.append(r)
    if not questions:
      return np.zeros([0, k], np.float32), np.zeros([0, k], np.int64)
    return np.concatenate(scores), np.concatenate(rows)

  def gather_blocks(self, rows: np.ndarray) -> Tuple[np.ndarray, np.ndarray]:
    """Titles and texts (object [B, k]) of corpus rows; row -1 gives empty strings."""
    titles = np.array([[self.titles[r] if r >= 0 else "" for r in row] for row in rows],
                      dtype=object).reshape(rows.shape)
    texts = np.array([[self.bodies[r] if r >= 0 else "" for r in row] for row in rows],
                     dtype=object).reshape(rows.shape)
    return titles, texts

  def _reader(self, query_ids: tf.RaggedTensor):
    """`read` as a `tf.function` over any batch size, traced once."""
    if self._read_fn is None:
      matrix = lambda dtype: tf.TensorSpec([None, None], dtype)
      self._read_fn = graph_functions.function(
          lambda ids, titles, texts, scores, valid: self.read(ids, titles, texts, scores, valid),
          input_signature=[
              tf.RaggedTensorSpec([None, None], query_ids.dtype, ragged_rank=1,
                                  row_splits_dtype=query_ids.row_splits.dtype),
              matrix(tf.string), matrix(tf.string), matrix(tf.float32), matrix(tf.bool)])
    return self._read_fn

  def answer(self, questions: Sequence[str]) -> List[Answer]:
    """Answers each question with its best span and the retrieved evidence blocks.

    Raises:
      ValueError: a question is empty.
    """
    questions = self.check_questions(questions)
    results = []
    for batch in self._batches(questions):
      _, query_ids, scores, rows = self._search(batch, self.k)
      titles, texts = self.gather_blocks(rows)
      out = {name: value.numpy() for name, value in self._reader(query_ids)(
          query_ids, tf.constant(titles.astype(str)), tf.constant(texts.astype(str)),
          tf.constant(scores, tf.float32), tf.constant(rows >= 0)).items()}
      for q, question in enumerate(batch):
        evidence = [Evidence(int(self.block_ids[r]), self.titles[r], self.bodies[r],
                             float(p), int(r))
                    for r, p in zip(rows[q], out["block_probabilities"][q]) if r >= 0]
        results.append(Answer(question=question, answer=out["answer"][q].decode("utf-8"),
                              probability=float(out["probability"][q]), evidence=evidence,
                              block=int(out["block"][q])))
    return results
