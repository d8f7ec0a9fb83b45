"""Host-side retrieval and supervision of an Open-QA fine-tuning batch, outside the
replicated step (the first half of a `qa.finetune_lib` step).

B questions, K blocks scored by the retriever loss, k read, A gold spans, D dim, F fresh
blocks. The current query tower (no dropout) embeds the questions and the MIPS index returns
their top-K rows; their block embeddings [B, K, D] are read from the index's memory-mapped
file (those rows only), `has_answer` [B, K] is evaluation's own matching on the block texts,
the k read are packed as reader inputs `[CLS] x [SEP] z_body [SEP]` by the inference
`Featurizer`, and every occurrence of an answer in a body is a gold span [B, k, A].

`task.read_answer_block` swaps the best answer-bearing block of the top-K in for the k-th when
the top k hold none, as DPR trains its reader (evaluation always reads the top k).
`task.null_document` puts the null document (`open_qa_step.NULL_ROW`) first among the K and
the k; its doc-tower features and the `num_fresh` top blocks' go as "fresh_*" [B, F, Lb].
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
from realm_tf.qa.open_qa_step import NULL_ROW
from realm_tf.qa.open_qa_step import QUERY_FEATURES
from realm_tf.qa.open_qa_step import READER_FEATURES
from realm_tf.qa.supervision import gold_spans
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


class EpochBatches:
  """The deterministic training batch of each step: B examples a step, every epoch in its own
  order from `seed`, so a resumed run reads the batches it would have read."""

  def __init__(self, examples: List[QAExample], batch_size: int, seed: int):
    self.examples, self.batch_size, self.seed = examples, batch_size, seed
    self._orders: Dict[int, np.ndarray] = {}  # the current epoch's order

  def __call__(self, step: int) -> List[QAExample]:
    count, picked = len(self.examples), []
    for position in range(step * self.batch_size, (step + 1) * self.batch_size):
      epoch = position // count
      if epoch not in self._orders:
        self._orders = {epoch: np.random.default_rng([self.seed, epoch]).permutation(count)}
      picked.append(self.examples[self._orders[epoch][position % count]])
    return picked


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
    self._blocks_fn = graph_functions.function(
        featurizer.blocks, input_signature=[tf.TensorSpec([None], tf.string)] * 2)

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
               num_retrieved: int, num_read: int, num_fresh: int = 0) -> Dict[str, np.ndarray]:
    """The prepared batch of `examples` over `doc_index`: K = `num_retrieved`, k = `num_read`,
    plus the null document first with `task.null_document`; F = `num_fresh` top blocks (and
    the null document) with their doc-tower features.

    Returns:
      numpy arrays: "query_*" [B, Lq], "rows" int64 [B, K] (-1: missing, `NULL_ROW`: the null
      document), "block_embeddings" float32 [B, K, D] (zeros where rows are not blocks),
      "has_answer" bool [B, K], "read_positions" int32 [B, k] (the blocks read among the
      K), "reader_*" int32 [B, k, Lr], "gold_starts" / "gold_ends" int32 [B, k, A], and with
      F > 0 "fresh_*" int32 [B, F, Lb].
    """
    null = int(task.null_document)
    batch, k, length = len(examples), num_read + null, task.model.reader_length
    features, query_ids, query_emb = self._embed_fn(tf.constant([e.question for e in examples]))
    _, rows = doc_index.index.search(query_emb, num_retrieved)
    rows = np.concatenate([np.full([batch, null], NULL_ROW), rows.numpy()], axis=1)
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
    fresh = num_fresh + null
    if fresh:
      picked = rows[:, :fresh].reshape([-1])
      blocks = self._blocks_fn(*(tf.constant([column[r] if r >= 0 else "" for r in picked],
                                             tf.string)
                                 for column in (self.corpus.titles, texts)))
      prepared.update({f"fresh_{n}": blocks[n].numpy().reshape([batch, fresh, -1])
                       for n in QUERY_FEATURES})
    prepared.update(rows=rows.astype(np.int64),
                    block_embeddings=embedding_file.gather(doc_index.embeddings, rows),
                    has_answer=has_answer, read_positions=positions.astype(np.int32),
                    gold_starts=np.stack(starts), gold_ends=np.stack(ends))
    return prepared
