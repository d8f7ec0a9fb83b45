"""The end-to-end `realm_classifier` export: text in -> label, probabilities and evidence out.

B texts, C labels, K = k + 1 blocks read (the null document among them), N corpus blocks:
  "serving_default": texts string [B] -> "label" string [B], "probability" p(ŷ|x) float32 [B],
     "label_probabilities" p(y|x) float32 [B, C] (in the order of the `label_names` [C]
     attribute), "evidence_block_ids" int64 [B, K] (-2: the null document),
     "evidence_titles", "evidence_texts" string [B, K], "evidence_probabilities" p(z|x) and
     "evidence_label_probabilities" p(ŷ|z,x) float32 [B, K]
The evidence is ranked by p(z|x) p(ŷ|z,x), as predictions.jsonl ranks it. Like `realm_qa` it
packages the query tower, the reader's encoder, the classification head, the corpus and its
block embeddings [N, D] (exact in-graph search), so it needs only TensorFlow and
`import tensorflow_text`; the computation is `classification_log_probs`, the training loss's.
Runs with `task.retrieval="bm25"` are not exported (BM25 is host-side). docs/exports.md.
"""
import tempfile

import tensorflow as tf

from realm_tf import errors
from realm_tf import graph_functions
from realm_tf.export.realm_qa import checked_nonblank
from realm_tf.losses.classification_loss import classification_log_probs
from realm_tf.mips.index_builder import build_index
from realm_tf.signatures.doc_embedder import Untracked
from realm_tf.signatures.doc_embedder import vocab_asset
from realm_tf.signatures.reusable import ReusableModule
from realm_tf.tokenization.featurizers import FEATURES

TEXTS_SPEC = tf.TensorSpec([None], tf.string, name="texts")
NULL_BLOCK_ID = -2  # the null document's id: predictions.jsonl's row (`open_qa_step.NULL_ROW`)


class _RealmClassifierModule(ReusableModule):

  def __init__(self, model, k: int, staging_dir: str):
    retriever, reader, head, corpus = model.retriever, model.reader, model.head, model.corpus
    constant = lambda value, dtype: tf.Variable(value, dtype=dtype, trainable=False)
    self._k = 0 if model.block_index is None else min(k, len(corpus))
    self._null = bool(model.settings.null_document)
    state = [constant(list(model.labels), tf.string)]
    index = None
    if self._k:
      index = build_index(model.block_index.embeddings, "brute_force")
      state += [index.embeddings, constant(model.block_index.null_embedding, tf.float32),
                constant(corpus.block_ids, tf.int64), constant(list(corpus.titles), tf.string),
                constant(list(corpus.texts), tf.string)]
      (self.block_embeddings, self.null_embedding, self.block_ids, self.titles,
       self.texts) = state[1:]
    super().__init__(retriever.query_encoder.variables + retriever.query_projection.variables +
                     reader.encoder.variables + head.variables, state=state)
    self.label_names = state[0]
    self._parts = Untracked(retriever=retriever, reader=reader, head=head, index=index,
                            featurizer=model.featurizer)
    self.k = constant(self._k, tf.int64)
    self.num_blocks = constant(len(corpus) if self._k else 0, tf.int64)
    self.vocab_file = vocab_asset(model.tokenizer, staging_dir)
    self.do_lower_case = tf.Variable(model.tokenizer.lower_case, trainable=False)

  def _blocks(self, query_emb):
    """[B, K] retriever logits, block ids and titles and texts (the null document first)."""
    batch = tf.shape(query_emb)[0]
    logits, ids = [], []
    if self._null:
      logits.append(tf.linalg.matvec(query_emb, self.null_embedding)[:, None] if self._k else
                    tf.zeros([batch, 1]))  # one block: p(z|x) = 1 whatever its score
      ids.append(tf.fill([batch, 1], tf.constant(NULL_BLOCK_ID, tf.int64)))
    if not self._k:
      empty = tf.fill([batch, 1], "")
      return logits[0], ids[0], empty, empty
    scores, rows = self._parts.index.search(query_emb, self._k)
    null = tf.fill([batch, int(self._null)], "")
    ids.append(tf.gather(self.block_ids, rows))
    return (tf.concat(logits + [scores], 1), tf.concat(ids, 1),
            tf.concat([null, tf.gather(self.titles, rows)], 1),
            tf.concat([null, tf.gather(self.texts, rows)], 1))

  def _classify(self, texts, training=False):
    parts = self._parts
    features, query_ids = parts.featurizer.questions(
        checked_nonblank(texts, "realm_classifier: empty text in"))
    query_emb = tf.cast(parts.retriever.embed_query(features, training=training), tf.float32)
    retriever_logits, ids, titles, bodies = self._blocks(query_emb)
    batch, k = tf.shape(ids)[0], tf.shape(ids)[1]
    reader = parts.featurizer.reader_inputs(query_ids, titles, bodies)  # [B*K, Lr]
    logits = parts.head(parts.reader.sequence_output(
        {n: reader[n] for n in FEATURES}, training=training), training=training)
    probs = classification_log_probs(
        retriever_logits, tf.reshape(logits, [batch, k, -1]), tf.ones([batch, k], tf.bool))
    p_y = tf.exp(probs["log_p_y"])  # [B, C]
    label = tf.argmax(p_y, axis=-1, output_type=tf.int32)
    p_z = tf.exp(probs["log_p_z"])  # [B, K]
    p_label = tf.exp(tf.gather(probs["log_p_y_given_z"], label, axis=2, batch_dims=1))
    order = tf.argsort(p_z * p_label, axis=1, direction="DESCENDING", stable=True)
    ranked = lambda values: tf.gather(values, order, batch_dims=1)
    return {"label": tf.gather(self.label_names, label),
            "probability": tf.reduce_max(p_y, axis=-1),
            "label_probabilities": p_y,
            "evidence_block_ids": ranked(ids),
            "evidence_titles": ranked(titles),
            "evidence_texts": ranked(bodies),
            "evidence_probabilities": ranked(p_z),
            "evidence_label_probabilities": ranked(p_label)}

  @graph_functions.function
  def __call__(self, texts, training=False):
    return self._classify(texts, training)


def export_realm_classifier(model, path: str, k: int) -> str:
  """Writes the end-to-end module of `model` (a loaded
  `realm_tf.classification.model.ClassificationModel`) reading `k` blocks per text at `path`;
  returns `path`.

  Raises:
    errors.InputError: the run retrieves with BM25.
  """
  if model.settings.retrieval == "bm25":
    raise errors.InputError(errors.describe(
        model.directory, "retrieves with BM25, which the in-graph export cannot run",
        "Serve it with realm-serve, or export a run with task.retrieval=dense or none"))
  with tempfile.TemporaryDirectory() as staging_dir:
    module = _RealmClassifierModule(model, k, staging_dir)
    module.save(path, [TEXTS_SPEC], {"serving_default": lambda: (
        module.__call__.get_concrete_function(TEXTS_SPEC, training=False))})
  return path
