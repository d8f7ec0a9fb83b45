"""The Open-QA training step (REALM §3.3 / ORQA): the loss of a prepared batch, the replicated
update, and the variables fine-tuning trains.

B questions, K blocks scored, k read, F fresh, S spans, D dim, Lb block length. The query
tower re-embeds the questions; the retriever logits f(x, z) [B, K] are inner products with
the K blocks' embeddings [B, K, D], an input the host reads from the index's embeddings file,
so that no [N, D] copy lives in the trainer (REALM's 13.3M blocks: 6.8 GB in float32). The
first F of the K may come with doc-tower features ("fresh_*" [B, F, Lb]), re-embedded in the
step by the current doc tower, as pre-training does, so that their f(x, z) is fresh and
carries the doc tower's gradient when it trains. The reader scores the spans of the k
[B, k, S]; `open_qa_loss` is minimised with AdamW (`training.optimizer.create_optimizer`).

Static shapes and no host op, so the step compiles with XLA (`tests/xla_steps_test.py`). Row
ids: -1 a missing result (masked out), `NULL_ROW` the null document.
"""
from typing import Callable, Dict, List

import tensorflow as tf

from realm_tf.layers.span_scorer import masked_logit_value
from realm_tf.losses.open_qa_loss import correct_spans
from realm_tf.losses.open_qa_loss import open_qa_loss
from realm_tf.tokenization.featurizers import FEATURES
from realm_tf.training.optimizer import apply_gradients

READER_FEATURES = FEATURES + ("block_mask",)
QUERY_FEATURES = FEATURES
MISSING_ROW = -1
NULL_ROW = -2


def open_qa_losses(retriever, reader, inputs: Dict[str, tf.Tensor], training: bool,
                   span_normalization: str = "joint"):
  """Per-question Open-QA losses of prepared inputs (`FineTuner.prepare_batch` names).

  Args:
    retriever, reader: the models (the query tower and the reader run here).
    inputs: "query_*" [B, Lq], "rows" [B, K], "block_embeddings" float32 [B, K, D] (the
      index's doc-tower embeddings of those rows), "has_answer" [B, K], "reader_*"
      [B, k, Lr], "gold_starts" / "gold_ends" [B, k, A], optional "read_positions" [B, k]
      (the blocks read among the K; default the top k), optional "fresh_*" [B, F, Lb] (the
      first F of the K, re-embedded here by the current doc tower).
    training: dropout on or off.
    span_normalization: the reader term's form (`losses.open_qa_loss`).

  Returns:
    (loss [B], retriever loss [B], reader loss [B], correct spans bool [B, k, S]).
  """
  query = {n: inputs[f"query_{n}"] for n in QUERY_FEATURES}
  features = {n: inputs[f"reader_{n}"] for n in READER_FEATURES}
  batch = tf.shape(features["input_word_ids"])[0]
  k = tf.shape(features["input_word_ids"])[1]
  flat = {n: tf.reshape(t, [batch * k, -1]) for n, t in features.items()}
  rows = inputs["rows"]
  query_emb = tf.cast(retriever.embed_query(query, training=training), tf.float32)
  blocks = tf.cast(inputs["block_embeddings"], tf.float32)  # [B, K, D]
  if "fresh_input_word_ids" in inputs:
    fresh = retriever.embed_candidates({n: inputs[f"fresh_{n}"] for n in QUERY_FEATURES},
                                       training=training)  # [B, F, D]
    fresh = tf.cast(fresh, tf.float32)
    blocks = tf.concat([fresh, blocks[:, tf.shape(fresh)[1]:]], axis=1)
  retriever_logits = tf.where(rows != MISSING_ROW, tf.einsum("bd,bkd->bk", query_emb, blocks),
                              masked_logit_value(tf.float32))  # [B, K]
  span_logits, starts, ends = reader.span_logits(
      {n: flat[n] for n in QUERY_FEATURES}, flat["block_mask"], training=training)
  span_logits = tf.reshape(span_logits, [batch, k, -1])  # [B, k, S]
  correct = correct_spans(starts, ends, inputs["gold_starts"], inputs["gold_ends"])
  _, parts = open_qa_loss(retriever_logits, inputs["has_answer"], span_logits, correct,
                         read_positions=inputs.get("read_positions"),
                         span_normalization=span_normalization)
  per_question = parts["retriever_loss"] + parts["reader_loss"]
  return per_question, parts["retriever_loss"], parts["reader_loss"], correct


def make_replica_step(retriever, reader, optimizer, global_batch_size: int,
                      retriever_optimizer=None, span_normalization: str = "joint",
                      train_doc_tower: bool = False
                      ) -> Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]:
  """The replicated training step: Open-QA loss (`span_normalization`'s reader term),
  gradients, AdamW updates (the retriever's towers by `retriever_optimizer` when given, else
  by `optimizer` with the reader's; the doc tower too with `train_doc_tower`).

  The returned function takes one replica's prepared inputs and returns sums over its
  questions ("loss", "retriever_loss", "reader_loss", "retrieved_answer": questions with an
  answer-bearing block in the top-K, "read_answer": with a gold span in the top-k).
  """
  query_tower = retriever_variables(retriever, train_doc_tower)
  variables = query_tower + reader_variables(reader)

  def replica_step(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    with tf.GradientTape() as tape:
      per_question, retriever_loss, reader_loss, correct = open_qa_losses(
          retriever, reader, inputs, training=True, span_normalization=span_normalization)
      loss = tf.reduce_sum(per_question) / float(global_batch_size)
    pairs = [(g, v) for g, v in zip(tape.gradient(loss, variables), variables)]
    updates = [(g, v) for g, v in pairs if g is not None]  # e.g. an unused pooler
    if retriever_optimizer is None:
      apply_gradients(optimizer, updates)
    else:
      split = len([p for p in pairs[:len(query_tower)] if p[0] is not None])
      apply_gradients(retriever_optimizer, updates[:split])
      apply_gradients(optimizer, updates[split:])
    return {
        "loss": tf.reduce_sum(per_question),
        "retriever_loss": tf.reduce_sum(retriever_loss),
        "reader_loss": tf.reduce_sum(reader_loss),
        "retrieved_answer": tf.reduce_sum(tf.cast(tf.reduce_any(inputs["has_answer"], 1),
                                                  tf.float32)),
        "read_answer": tf.reduce_sum(tf.cast(tf.reduce_any(correct, [1, 2]), tf.float32)),
    }

  return replica_step


def query_tower_variables(retriever) -> List[tf.Variable]:
  """The query tower's variables."""
  return (retriever.query_encoder.trainable_variables +
          retriever.query_projection.trainable_variables)


def retriever_variables(retriever, train_doc_tower: bool = False) -> List[tf.Variable]:
  """The retriever variables fine-tuning trains: the query tower, and the doc tower with
  `train_doc_tower` (the patent's variant; REALM and ORQA freeze it)."""
  if not train_doc_tower:
    return query_tower_variables(retriever)
  doc_tower = (retriever.doc_encoder.trainable_variables +
               retriever.doc_projection.trainable_variables)
  seen = {id(v) for v in query_tower_variables(retriever)}
  return query_tower_variables(retriever) + [v for v in doc_tower if id(v) not in seen]


def reader_variables(reader) -> List[tf.Variable]:
  """The reader variables fine-tuning trains: its BERT and span head (not the MLM head)."""
  return reader.encoder.trainable_variables + reader.span_scorer.trainable_variables
