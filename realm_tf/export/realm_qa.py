"""The end-to-end `realm_qa` export: question in -> answer, score and evidence blocks out.

B questions, k evidence blocks, N corpus blocks, D embedding dim:
  "serving_default": questions string [B]; "answer_ids": input ids int32 [B, L]
  -> "answer" string [B], "score" float32 [B], "answer_block" int32 [B],
     "evidence_block_ids" int64 [B, k], "evidence_titles", "evidence_texts" string [B, k],
     "evidence_probabilities" float32 [B, k]
It packages the query tower, the reader, the corpus (string variables) and its block
embeddings [N, D], searched exactly in-graph (`mips.BruteForceIndex`), so it needs only
TensorFlow and `import tensorflow_text`: no realm_tf, no ScaNN. The computation is
`RetrieveAndRead.read`, the Python API's own. All of it is held in memory, which suits up to
a few million blocks; the 13M-block Wikipedia corpus is served by `realm-ask` with ScaNN.
docs/exports.md has the details.
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


def checked_nonblank(strings: tf.Tensor, message: str) -> tf.Tensor:
  """`strings` [B], failing with InvalidArgumentError ("`message` [the strings]") where one is
  empty or blank."""
  blank = tf.equal(tf.strings.length(tf.strings.strip(strings)), 0)
  check = tf.debugging.Assert(tf.logical_not(tf.reduce_any(blank)), [message, strings],
                              summarize=8)
  with tf.control_dependencies([check]):
    return tf.identity(strings)


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
    features, _ = self._parts.system.featurizer.questions(
        checked_nonblank(questions, "realm_qa: empty question in"))
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
