"""REALM pre-training: backpropagation through retrieval (REALM §3).

B batch, K candidates, M masked positions, D embedding dim. Per step:
  1. replicated: embed the masked queries with the current θ;
  2. host: search the (possibly stale) index, drop the source block, null document first,
     cut to K, pack candidate and reader inputs (`CandidateBuilder`);
  3. replicated: re-embed query and candidates with the current θ (fresh p(z|x) and its
     gradient), read every (x, z) and minimise the marginal negative log-likelihood over the
     K (`task.mlm_loss`); the retriever's gradient is p(z|y,x) − p(z|x) (Appendix A).
The search stays on the host (a TPU cannot run it) and an `IndexRefresher` swaps the index
between steps. Logged: loss, MLM accuracy of the marginal prediction, `retrieval_utility` of
the marginal vs the null document, `top_document_ru` (Appendix D's RU(z|x) of the best-scored
block), `null_prior` and `null_posterior` (the null document's share of the retrieval mass),
how often the source block is retrieved, index version and staleness, step time.
"""
import os
from typing import Dict, Optional

import numpy as np
import tensorflow as tf

from realm_tf import distribute
from realm_tf import graph_functions
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.losses.mlm_marginal_likelihood import marginal_mlm_loss
from realm_tf.losses.mlm_marginal_likelihood import marginal_token_log_probs
from realm_tf.losses.retrieval_utility import document_retrieval_utility
from realm_tf.losses.retrieval_utility import retrieval_utility
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.models.saving import save_model
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training.candidates import CandidateBuilder
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import apply_gradients
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.optimizer import create_slots
from realm_tf.training.pretraining_data import masked_query_dataset
from realm_tf.training import run_config
from realm_tf.training.recall_monitor import RecallMonitor
from realm_tf.training.train_loop import Evaluation
from realm_tf.training.train_loop import TrainLoop


def pretraining_step(retriever: Retriever, reader: Reader, optimizer, null_document: bool,
                     mlm_loss: str = "token", num_candidates: int = 8):
  """The replicated REALM step: batch -> per-replica metric sums (see module docstring), the
  loss in `mlm_loss`'s form (`losses.mlm_marginal_likelihood`) over `num_candidates` K.
  Retriever gradients are zeroed where `batch["train_retriever"]` is False (reader warm-up)."""

  def step(batch):
    with tf.GradientTape() as tape:
      # float32 scores and loss whatever the towers' compute dtype (`models.precision`).
      query = tf.cast(retriever.embed_query(batch["query"], training=True), tf.float32)  # [b, D]
      candidates = tf.cast(retriever.embed_candidates(batch["candidates"], training=True),
                           tf.float32)  # [b, K, D]
      logits = Retriever.score(query, candidates)  # [b, K]
      logits = tf.where(batch["candidate_mask"], logits, -1e9)
      shape = tf.shape(batch["reader"]["input_word_ids"])
      b, k = shape[0], shape[1]
      flat = {n: tf.reshape(t, [b * k, -1]) for n, t in batch["reader"].items()}
      positions = tf.repeat(batch["masked_lm_positions"], k, axis=0)  # [b*K, M]
      mlm = reader.mlm_logits(flat, positions, training=True)
      mlm = tf.reshape(tf.cast(mlm, tf.float32), [b, k, tf.shape(positions)[1], -1])  # [b, K, M, V]
      loss, token_log_probs = marginal_mlm_loss(logits, mlm, batch["masked_lm_ids"],
                                                batch["masked_lm_weights"],
                                                normalizer=batch["normalizer"][0], form=mlm_loss)
    variables = retriever.trainable_variables + reader.trainable_variables
    gradients = tape.gradient(loss, variables)
    train_retriever = batch["train_retriever"][0]
    gradients = [_scaled(g, train_retriever) if i < len(retriever.trainable_variables) else g
                 for i, g in enumerate(gradients)]
    # The span head and the reader's pooler take no part in masked-LM pre-training.
    apply_gradients(optimizer, [(g, v) for g, v in zip(gradients, variables) if g is not None])

    weights = batch["masked_lm_weights"]
    candidate_log_probs = tf.nn.log_softmax(logits, axis=-1)[:, :, None, None]
    marginal_vocab = tf.reduce_logsumexp(candidate_log_probs + tf.nn.log_softmax(mlm), axis=1)
    predicted = tf.argmax(marginal_vocab, axis=-1, output_type=tf.int32)  # [b, M]
    correct = tf.cast(tf.equal(predicted, batch["masked_lm_ids"]), tf.float32) * weights
    has_mask = tf.cast(tf.reduce_sum(weights, -1) > 0, tf.float32)
    metrics = {"loss": loss, "correct": tf.reduce_sum(correct),
               "masked_tokens": tf.reduce_sum(weights), "examples": tf.reduce_sum(has_mask),
               "marginal_log_prob": tf.reduce_sum(
                   marginal_token_log_probs(logits, token_log_probs) * weights)}
    if null_document:
      metrics["retrieval_utility"] = tf.reduce_sum(
          retrieval_utility(logits, token_log_probs, weights) * has_mask)
      # The null document's share of the retrieval mass: prior p(∅|x) per example, posterior
      # p(∅|y_j,x) per masked token (the gradient moves f(x, ∅) by posterior - prior).
      metrics["null_prior"] = tf.reduce_sum(tf.exp(candidate_log_probs[:, 0, 0, 0]) * has_mask)
      joint = candidate_log_probs[:, :, 0] + token_log_probs  # [b, K, M]
      posterior = tf.exp(joint[:, 0] - tf.reduce_logsumexp(joint, axis=1))  # [b, M]
      metrics["null_posterior"] = tf.reduce_sum(posterior * weights)
    if null_document and num_candidates > 1:
      # Appendix D's RU(z|x) of the best-scored retrieved block (candidate 1, after the null
      # document), over the examples that retrieved one.
      top = tf.cast(batch["candidate_mask"][:, 1], tf.float32) * has_mask
      document_ru = document_retrieval_utility(token_log_probs, weights)  # [b, K]
      metrics["top_document_ru"] = tf.reduce_sum(document_ru[:, 1] * top)
      metrics["top_document_examples"] = tf.reduce_sum(top)
    return metrics

  return step


def _scaled(gradient, keep: tf.Tensor):
  """`gradient` where `keep` (a bool scalar), zeros of its shape otherwise."""
  if gradient is None:
    return None
  if isinstance(gradient, tf.IndexedSlices):
    return tf.IndexedSlices(gradient.values * tf.cast(keep, gradient.values.dtype),
                            gradient.indices, gradient.dense_shape)
  return gradient * tf.cast(keep, gradient.dtype)


class RealmPretrainer:
  """Runs REALM pre-training under a `tf.distribute` strategy with an index refresher.

  Args:
    experiment: the run, its task a `PretrainTaskConfig`: `trainer` (model_dir, the schedule,
      checkpoints), `task.examples_dir`, the candidates (`num_candidates`, `null_document`,
      `exclude_source`), `masking`, `max_predictions`, `reader_warmup_steps`, `task.model`'s
      query and block lengths, `runtime.seed`.
    retriever, reader: built inside `strategy.scope()`.
    store: the block corpus; row order must match the refresher's indexes.
    tokenizer: the wordpieces the candidates' `Featurizer` packs with.
    refresher: an `IndexRefresher` (synchronous or asynchronous).
    strategy: a `tf.distribute` strategy (default: the default strategy).
    monitor: held-out recall over the store, measured through the MIPS index in use at the
      start and every `monitor.every_n_steps` (`TrainLoop`: `eval.jsonl`, `best/`).
  """

  def __init__(self, experiment: ExperimentConfig, retriever: Retriever, reader: Reader,
               store: Corpus, tokenizer: WordpieceTokenizer, refresher, strategy=None,
               monitor: Optional[RecallMonitor] = None):
    self.experiment = experiment
    task, trainer = experiment.task, experiment.trainer
    self.monitor = monitor
    self.retriever, self.reader, self.store = retriever, reader, store
    self.refresher = refresher
    self.strategy = strategy or tf.distribute.get_strategy()
    self.tokenizer = tokenizer
    self.candidates = CandidateBuilder(
        store, Featurizer(tokenizer, task.model.query_length, task.model.block_length,
                          doc_input=retriever.doc_input),
        task.num_candidates, task.null_document, task.exclude_source)
    with self.strategy.scope():
      self.optimizer = create_optimizer(OptimizerConfig(learning_rate=trainer.learning_rate,
                                                        num_train_steps=trainer.num_steps,
                                                        warmup_steps=trainer.warmup_steps))
    # A host value (collectives do not carry strings): each worker sets it to the same version.
    self.index_version = tf.Variable("", trainable=False, name="index_version")
    self.loop = TrainLoop(trainer.model_dir, dict(retriever=retriever, reader=reader,
                                                  optimizer=self.optimizer,
                                                  index_version=self.index_version),
                          trainer.num_steps, checkpoint_every=trainer.checkpoint_every,
                          max_to_keep=trainer.keep_checkpoints, strategy=self.strategy,
                          run_config=dict(
                              task="pretrain", retriever=run_config.retriever_structure(retriever),
                              reader=run_config.reader_structure(reader),
                              vocab_fingerprint=run_config.vocab_fingerprint(
                                  tokenizer.vocabulary),
                              corpus_fingerprint=store.fingerprint),
                          before_first_step=lambda: create_slots(
                              self.optimizer,
                              retriever.trainable_variables + reader.trainable_variables,
                              self.strategy))
    self._train_step = graph_functions.function(
        pretraining_step(retriever, reader, self.optimizer, task.null_document, task.mlm_loss,
                         task.num_candidates))
    self._embed_query = graph_functions.function(
        lambda f: retriever.embed_query(f, training=False))

  def _source_rows(self, block_ids: np.ndarray) -> np.ndarray:
    rows = np.searchsorted(self.store.block_ids, block_ids)
    rows = np.minimum(rows, len(self.store) - 1)
    return np.where(self.store.block_ids[rows] == block_ids, rows, -1)

  def _step(self, batch) -> Dict[str, float]:
    strategy = self.strategy
    index = self.refresher.index
    if index.dim != self.retriever.projection_size:
      raise ValueError(f"index dim {index.dim} != embedder dim {self.retriever.projection_size}")
    if index.num_docs != len(self.store):
      raise ValueError(f"index has {index.num_docs} blocks, the corpus {len(self.store)}")
    size = int(batch["block_id"].shape[0])
    if self.candidates.num_to_retrieve:
      query_emb = distribute.global_batch(strategy, strategy.run(
          self._embed_query, args=(distribute.distribute_batch(strategy, batch["query"]),)))
      retrieved = index.search(query_emb, self.candidates.num_to_retrieve)[1].numpy()
    else:  # the null document alone: a masked LM without retrieval
      retrieved = np.zeros([size, 0], np.int64)
    selection = self.candidates.select(retrieved, self._source_rows(batch["block_id"].numpy()))
    query_ids = tf.RaggedTensor.from_tensor(batch["query_ids"], lengths=batch["query_length"])
    docs, reader = self.candidates.features(tf.constant(selection.rows), query_ids)
    total_weight = tf.reduce_sum(batch["masked_lm_weights"])
    step_batch = {
        "query": batch["query"], "candidates": docs, "reader": reader,
        "candidate_mask": tf.constant(selection.mask),
        "masked_lm_positions": batch["masked_lm_positions"],
        "masked_lm_ids": batch["masked_lm_ids"],
        "masked_lm_weights": batch["masked_lm_weights"],
        "normalizer": tf.fill([size], total_weight),
        "train_retriever": tf.fill(
            [size],
            int(self.optimizer.iterations.numpy()) >= self.experiment.task.reader_warmup_steps)}
    sums = strategy.run(self._train_step,
                        args=(distribute.distribute_batch(strategy, step_batch),))
    sums = {k: float(strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None))
            for k, v in sums.items()}
    examples = max(sums.pop("examples"), 1.0)
    tokens = max(sums.pop("masked_tokens"), 1.0)
    metrics = {"loss": sums["loss"], "mlm_accuracy": sums["correct"] / tokens,
               "unmaskable": 1.0 - examples / size,
               "source_retrieved": float(selection.source_retrieved.mean()),
               "index_staleness": float(self.loop.step.numpy() - self.refresher.snapshot_step),
               "index_snapshot_step": float(self.refresher.snapshot_step),
               "index_wait_seconds": self.refresher.wait_seconds}
    if "retrieval_utility" in sums:
      metrics["retrieval_utility"] = sums["retrieval_utility"] / examples
      metrics["null_prior"] = sums["null_prior"] / examples
      metrics["null_posterior"] = sums["null_posterior"] / tokens
    if "top_document_ru" in sums:
      metrics["top_document_ru"] = sums["top_document_ru"] / max(
          sums.pop("top_document_examples"), 1.0)
    return metrics

  def _search(self, queries: np.ndarray, k: int) -> np.ndarray:
    """Corpus rows [Q, k] of the index in use for query embeddings [Q, D]."""
    return self.refresher.index.search(queries, k=k)[1].numpy()

  def train(self, verbose: bool = True):
    """Trains to `num_steps` (resuming from the last checkpoint); returns the step history."""
    self.loop.verbose = verbose
    start = self.loop.restore()
    self.refresher.start(start, self.retriever, resume_version=self.index_version.numpy().decode(),
                         strategy=self.strategy)
    self.index_version.assign(self.refresher.version)
    task = self.experiment.task
    data = iter(masked_query_dataset(
        task.examples_dir, self.tokenizer, self.experiment.trainer.batch_size, task.masking,
        task.model.query_length, task.max_predictions, seed=self.experiment.runtime.seed + start,
        allow_unverified=task.allow_unverified_examples))

    def after_step(step: int):
      if self.refresher.maybe_refresh(step, self.retriever, last_step=self.loop.num_steps):
        self.index_version.assign(self.refresher.version)

    evaluation = None
    if self.monitor:
      evaluation = Evaluation(lambda: self.monitor(self.retriever, self._search),
                              self.monitor.every_n_steps, self.monitor.metric)
    try:
      self.loop.run(lambda _: self._step(next(data)), after_step=after_step,
                    evaluation=evaluation)
    finally:
      self.refresher.close()
    output = distribute.output_dir(self.strategy, self.experiment.trainer.model_dir)
    save_model(self.retriever, os.path.join(output, "retriever"))
    save_model(self.reader, os.path.join(output, "reader"))
    # Workers exit together: one gone early reads as a crash to the others' coordination
    # service, which then makes the last one wait and log errors at exit.
    distribute.barrier(self.strategy)
    return self.loop.history
