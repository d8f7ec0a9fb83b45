"""The end-to-end `realm_qa` export: question in -> answer, score and evidence blocks out.

Legend: B questions, k evidence blocks, N corpus blocks, D embedding dim, Lq query length.

One SavedModel packages the query tower, the reader, the corpus (block ids, titles, texts as
string variables) and its block embeddings [N, D], searched exactly in-graph (chunked
matmul + top-k, `realm_tf.mips.BruteForceIndex`), so it runs anywhere TensorFlow runs with
`import tensorflow_text` (the tokenizer's ops) and nothing else: no realm_tf, no ScaNN. The
computation is `RetrieveAndRead.read`, the code the Python API runs. Everything is held in
memory: fine for corpora up to a few million blocks; for the 13M-block Wikipedia corpus
(6.4 GiB of embeddings plus the texts) serve `realm-ask` with its ScaNN index instead.

Signatures:
  "serving_default": questions string [B] -> the outputs below
  "answer_ids":      input_word_ids, input_mask, input_type_ids int32 [B, L] (`[CLS] x [SEP]`
                     as the "tokenize" signature of the query embedder makes them)
                     -> the outputs below
Outputs:
  "answer" string [B]                 the best span under one softmax over all k x S
                                      (block, span) pairs ("" when no block has a span)
  "score" float32 [B]                 its probability
  "answer_block" int32 [B]            which evidence block it was read from (-1: none)
  "evidence_block_ids" int64 [B, k]   the k retrieved blocks, best first (-1: missing)
  "evidence_titles", "evidence_texts" string [B, k]
  "evidence_probabilities" float32 [B, k]   p(z | x) over the k blocks
`__call__(inputs, training=False)` (`hub.KerasLayer`; `training` turns dropout on): string [B]
or the id dict -> the same dict. Empty questions fail with an InvalidArgumentError ("empty
question"). It is a Reusable SavedModel: `hub.KerasLayer(path, trainable=True)` fine-tunes the
query tower and the reader ("score" and "evidence_probabilities" are differentiable); the
corpus and its block embeddings are non-trainable `variables`.
Attributes: `vocab_file` (asset), `do_lower_case`, `k`, `num_blocks`, `query_length`.
"""
import tempfile

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.mips.index_builder import build_index
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.signatures.doc_embedder import Untracked
from realm_tf.signatures.doc_embedder import vocab_asset
from realm_tf.signatures.reusable import ReusableModule
from realm_tf.tokenization.featurizers import Featurizer

ID_SPECS = {n: tf.TensorSpec([None, None], tf.int32, name=n)
            for n in ("input_word_ids", "input_mask", "input_type_ids")}
QUESTIONS_SPEC = tf.TensorSpec([None], tf.string, name="questions")


class _RealmQAModule(ReusableModule):

  def __init__(self, system: RetrieveAndRead, embeddings: np.ndarray, staging_dir: str):
    index = build_index(embeddings, "brute_force")
    block_ids = tf.Variable(system.block_ids, dtype=tf.int64, trainable=False)
    titles = tf.Variable(system.titles, dtype=tf.string, trainable=False)
    texts = tf.Variable(system.bodies, dtype=tf.string, trainable=False)
    retriever, reader = system.retriever, system.reader
    super().__init__(retriever.query_encoder.variables + retriever.query_projection.variables +
                     reader.encoder.variables + reader.span_scorer.variables,
                     state=[index.embeddings, block_ids, titles, texts])
    self._parts = Untracked(system=system, index=index)
    self.block_embeddings, self.block_ids, self.titles, self.texts = (
        index.embeddings, block_ids, titles, texts)
    self._k = system.k
    int64 = lambda value: tf.Variable(value, dtype=tf.int64, trainable=False)
    self.k = int64(system.k)
    self.num_blocks = int64(len(system.titles))
    self.query_length = int64(system.featurizer.query_length)
    self.vocab_file = vocab_asset(system.tokenizer, staging_dir)
    self.do_lower_case = tf.Variable(system.tokenizer.lower_case, trainable=False)

  def _answer(self, features, training=False):
    features = {n: tf.cast(features[n], tf.int32) for n in ID_SPECS}
    system = self._parts.system
    query_emb = tf.cast(system.retriever.embed_query(features, training=training), tf.float32)
    scores, rows = self._parts.index.search(query_emb, self._k)  # [B, k]
    valid = rows >= 0
    safe = tf.maximum(rows, 0)
    titles = tf.where(valid, tf.gather(self.titles, safe), "")
    texts = tf.where(valid, tf.gather(self.texts, safe), "")
    out = system.read(Featurizer.query_ids(features), titles, texts, scores, valid, training)
    return {
        "answer": out["answer"],
        "score": out["probability"],
        "answer_block": out["block"],
        "evidence_block_ids": tf.where(valid, tf.gather(self.block_ids, safe),
                                       tf.constant(-1, tf.int64)),
        "evidence_titles": titles,
        "evidence_texts": texts,
        "evidence_probabilities": out["block_probabilities"],
    }

  def _answer_questions(self, questions, training=False):
    blank = tf.equal(tf.strings.length(tf.strings.strip(questions)), 0)
    check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(blank)),
                                ["realm_qa: empty question in", questions], summarize=8)
    with tf.control_dependencies([check]):
      features, _ = self._parts.system.featurizer.questions(tf.identity(questions))
    return self._answer(features, training)

  @graph_functions.function
  def __call__(self, inputs, training=False):
    if isinstance(inputs, dict):
      return self._answer(inputs, training)
    return self._answer_questions(inputs, training)


def export_realm_qa(system: RetrieveAndRead, embeddings: np.ndarray, path: str) -> str:
  """Writes the end-to-end module of `system` over `embeddings` [N, D] (the doc-tower
  embeddings of `system`'s corpus, row r = block r) at `path`; returns `path`."""
  embeddings = np.asarray(embeddings, np.float32)
  if embeddings.shape[0] != len(system.titles):
    raise ValueError(f"{embeddings.shape[0]} embeddings for {len(system.titles)} blocks")
  with tempfile.TemporaryDirectory() as staging_dir:
    module = _RealmQAModule(system, embeddings, staging_dir)
    inference = lambda spec: lambda: module.__call__.get_concrete_function(spec, training=False)
    module.save(path, [QUESTIONS_SPEC, dict(ID_SPECS)], {  # the signatures are `__call__`'s
        "serving_default": inference(QUESTIONS_SPEC), "answer_ids": inference(dict(ID_SPECS))})
  return path
