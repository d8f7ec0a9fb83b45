"""Host-side retrieval and supervision of an Open-QA fine-tuning batch (step 1 of
`realm_tf.qa.finetune_lib`), outside the replicated step.

Legend: B questions, K blocks scored by the retriever loss, k blocks read, Lq / Lr query /
reader length, A gold spans, D dim.

The current query tower embeds the B questions (no dropout) and the MIPS index returns their
top-K corpus rows, whose block embeddings [B, K, D] are read as float32 from the document
index's memory-mapped file (`retrieval.embedding_file.gather`: only those rows); `has_answer`
[B, K] is computed on the block texts with `realm_tf.evaluation.has_answer` (what
evaluation's recall@k uses); the top-k blocks (with `task.read_answer_block`, the best
answer-bearing block of the top-K replaces the k-th when none of the top k holds an answer, as
DPR trains its reader; evaluation always reads the top k) are packed as reader inputs
`[CLS] x [SEP] z_body [SEP]` (`Featurizer`, the inference featurization) and every occurrence
of an answer's wordpieces in a block body becomes a gold span [B, k, A]
(`supervision.gold_spans`).
"""
from typing import Dict, List

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.models.retriever import Retriever
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.open_qa_step import QUERY_FEATURES
from realm_tf.qa.open_qa_step import READER_FEATURES
from realm_tf.qa.supervision import gold_spans
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


class BatchPreparer:
  """Prepares the inputs of `open_qa_step` for B questions (module docstring); its traced
  functions are reused from batch to batch."""

  def __init__(self, retriever: Retriever, featurizer: Featurizer,
               tokenizer: WordpieceTokenizer, corpus: Corpus):
    self.retriever, self.featurizer = retriever, featurizer
    self.tokenizer, self.corpus = tokenizer, corpus
    # None batch dimensions: one trace serves every batch, a short last one too.
    self._embed_fn = graph_functions.function(
        self._embed_questions, input_signature=[tf.TensorSpec([None], tf.string)])
    self._reader_inputs_fn = None  # traced on first use, when the wordpieces' spec is known

  def _reader_inputs(self, query_ids: tf.RaggedTensor):
    """`Featurizer.reader_inputs` as a `tf.function` over any batch size, traced once."""
    if self._reader_inputs_fn is None:
      blocks = tf.TensorSpec([None, None], tf.string)
      self._reader_inputs_fn = graph_functions.function(
          self.featurizer.reader_inputs, input_signature=[
              tf.RaggedTensorSpec([None, None], query_ids.dtype, ragged_rank=1,
                                  row_splits_dtype=query_ids.row_splits.dtype), blocks, blocks])
    return self._reader_inputs_fn

  def _embed_questions(self, questions):
    features, query_ids = self.featurizer.questions(questions)
    return features, query_ids, self.retriever.embed_query(features, training=False)

  def __call__(self, examples: List[QAExample], doc_index: DocIndex, task: OpenQATaskConfig,
               num_retrieved: int, num_read: int) -> Dict[str, np.ndarray]:
    """The prepared batch of `examples` over `doc_index`: K = `num_retrieved`, k = `num_read`.

    Returns:
      numpy arrays: "query_*" [B, Lq], "rows" int64 [B, K] (-1: missing), "block_embeddings"
      float32 [B, K, D] (zeros where rows are missing), "has_answer" bool [B, K],
      "read_positions" int32 [B, k] (the blocks read among the K), "reader_*" int32
      [B, k, Lr], "gold_starts" / "gold_ends" int32 [B, k, A].
    """
    batch, k, length = len(examples), num_read, task.model.reader_length
    features, query_ids, query_emb = self._embed_fn(tf.constant([e.question for e in examples]))
    _, rows = doc_index.index.search(query_emb, num_retrieved)
    rows = rows.numpy()
    matchers = [AnswerMatcher(e.answers, e.match) for e in examples]
    texts = self.corpus.texts
    has_answer = np.array([[r >= 0 and m.has_answer(texts[r]) for r in row]
                           for m, row in zip(matchers, rows)], bool)
    positions = np.tile(np.arange(k), [batch, 1])
    if task.read_answer_block:  # DPR's reader training: an answer-bearing block among the read
      for b in np.flatnonzero(~has_answer[:, :k].any(1) & has_answer.any(1)):
        positions[b, -1] = np.argmax(has_answer[b])
    read = np.take_along_axis(rows, positions, axis=1)
    titles = [[self.corpus.titles[r] if r >= 0 else "" for r in row] for row in read]
    bodies = [[texts[r] if r >= 0 else "" for r in row] for row in read]
    reader = {n: t.numpy() for n, t in self._reader_inputs(query_ids)(
        query_ids, tf.constant(titles, tf.string), tf.constant(bodies, tf.string)).items()}
    strings = [[m.answer_strings(body) for body in row] for m, row in zip(matchers, bodies)]
    vocabulary = sorted({s for row in strings for block in row for s in block})
    tokens = dict(zip(vocabulary, self.tokenizer(tf.constant(vocabulary, tf.string)).to_list()
                      if vocabulary else []))
    starts, ends = [], []
    for b in range(batch):
      s, e = gold_spans(reader["input_word_ids"][b * k:(b + 1) * k],
                        reader["block_mask"][b * k:(b + 1) * k],
                        [[tokens[a] for a in block] for block in strings[b]],
                        task.model.max_span_width, task.max_gold_spans,
                        self.tokenizer.continuation)
      starts.append(s)
      ends.append(e)
    prepared = {f"query_{n}": features[n].numpy() for n in QUERY_FEATURES}
    prepared.update({f"reader_{n}": reader[n].reshape([batch, k, length])
                     for n in READER_FEATURES})
    prepared.update(rows=rows.astype(np.int64),
                    block_embeddings=embedding_file.gather(doc_index.embeddings, rows),
                    has_answer=has_answer, read_positions=positions.astype(np.int32),
                    gold_starts=np.stack(starts), gold_ends=np.stack(ends))
    return prepared
