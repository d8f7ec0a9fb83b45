"""ICT warm-start of the retriever with in-batch negatives gathered across replicas.

Per replica with b examples: scores = q [b, D] · all_gather(z) [B, D]ᵀ, the positive of query i
is the block at global row replica_id·b + i; loss = Σ softmax cross-entropy / B (the global
batch), so gradients summed over replicas equal the single-device gradient. Every worker reads
the same global batches (`distribute.distribute_batch`): a multi-worker step is the
single-worker step on the same batch.
"""
import os
from typing import Dict, Optional

import tensorflow as tf
from absl import logging

from realm_tf import distribute
from realm_tf import errors
from realm_tf import graph_functions
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.models.retriever import Retriever
from realm_tf.models.saving import save_model
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training.ict_data import IctCorpus
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import apply_gradients
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.optimizer import create_slots
from realm_tf.training import run_config
from realm_tf.training.recall_monitor import RecallMonitor
from realm_tf.training.train_loop import Evaluation
from realm_tf.training.train_loop import TrainLoop


def ict_step(retriever: Retriever, optimizer, global_batch_size: int):
  """The replicated ICT train step: batch -> {"loss", "accuracy"} (per-replica sums)."""

  def step(batch):
    context = tf.distribute.get_replica_context()
    with tf.GradientTape() as tape:
      # float32 scores and loss whatever the towers' compute dtype (`models.precision`).
      queries = tf.cast(retriever.embed_query(batch["query"], training=True), tf.float32)  # [b, D]
      blocks = tf.cast(retriever.embed_documents(batch["block"], training=True),
                       tf.float32)  # [b, D]
      all_blocks = context.all_gather(blocks, axis=0)  # [B, D]
      logits = tf.matmul(queries, all_blocks, transpose_b=True)  # [b, B]
      local = tf.shape(queries)[0]
      labels = context.replica_id_in_sync_group * local + tf.range(local)
      losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits)
      loss = tf.reduce_sum(losses) / global_batch_size
    variables = retriever.trainable_variables
    gradients = tape.gradient(loss, variables)  # None for a pooler the head does not use
    apply_gradients(optimizer, [(g, v) for g, v in zip(gradients, variables) if g is not None])
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), labels), tf.float32)
    return {"loss": loss, "accuracy": tf.reduce_sum(correct) / global_batch_size}

  return step


def check_corpus(store: Corpus, tokenizer: WordpieceTokenizer, batch_size: int) -> IctCorpus:
  """`store`'s ICT examples; raises InputError naming `--batch_size` if fewer than a batch of
  its blocks have the two sentences an example needs (pseudo-query and context)."""
  corpus = IctCorpus(store, tokenizer)
  if not corpus.has_at_least(batch_size):
    found = len(corpus)
    raise errors.InputError(errors.describe(
        store.source or "corpus", f"ICT needs a batch of --batch_size={batch_size} blocks of "
        f"two or more sentences, and the corpus has {found}",
        f"Pass --batch_size={found} or less, or a larger corpus" if found else
        "Pass a corpus of blocks with two or more sentences"))
  return corpus


def train_ict(experiment: ExperimentConfig, retriever: Retriever, store: Corpus,
              tokenizer: WordpieceTokenizer, strategy=None, verbose: bool = True,
              monitor: Optional[RecallMonitor] = None):
  """Trains `retriever` (built in `strategy.scope()`) with ICT; writes checkpoints, the final
  retriever (`model_dir/retriever`) and a doc-embedder export (`model_dir/doc_embedder`) (the
  chief of a multi-worker job; the other workers into scratch, `distribute.output_dir`).

  Args:
    experiment: the run, its task an `IctTaskConfig`: `trainer` (model_dir, the schedule,
      checkpoints), `task.model`'s query and block lengths, `task.remove_prob`, `runtime.seed`.
    retriever, store, tokenizer: the towers, the block corpus and its wordpieces.
    strategy: a `tf.distribute` strategy (default: the current one).
    verbose: the loop's progress bar.
    monitor: held-out recall, measured at the start and every `monitor.every_n_steps`
      (`TrainLoop`); the retriever written at the end is then the best checkpoint's (the
      start included: ICT that only loses recall leaves the start).

  Returns:
    (last metrics, per-step history).
  """
  trainer, task = experiment.trainer, experiment.task
  strategy = strategy or tf.distribute.get_strategy()
  corpus = check_corpus(store, tokenizer, trainer.batch_size)
  with strategy.scope():
    optimizer = create_optimizer(OptimizerConfig(learning_rate=trainer.learning_rate,
                                                num_train_steps=trainer.num_steps,
                                                warmup_steps=trainer.warmup_steps))
  structure = dict(task="ict", retriever=run_config.retriever_structure(retriever),
                   vocab_fingerprint=run_config.vocab_fingerprint(tokenizer.vocabulary),
                   corpus_fingerprint=store.fingerprint)
  loop = TrainLoop(trainer.model_dir, dict(retriever=retriever, optimizer=optimizer),
                   trainer.num_steps, checkpoint_every=trainer.checkpoint_every,
                   verbose=verbose, max_to_keep=trainer.keep_checkpoints, run_config=structure,
                   strategy=strategy, before_first_step=lambda: create_slots(
                       optimizer, retriever.trainable_variables, strategy))
  start = loop.restore()
  dataset = corpus.dataset(trainer.batch_size, seed=experiment.runtime.seed + start,
                           remove_prob=task.remove_prob, query_length=task.model.query_length,
                           block_length=task.model.block_length,
                           doc_input=retriever.doc_input)
  iterator = iter(dataset)
  step = graph_functions.function(ict_step(retriever, optimizer, trainer.batch_size))

  def run_step(_) -> Dict[str, tf.Tensor]:
    per_replica = strategy.run(step, args=(distribute.distribute_batch(strategy,
                                                                       next(iterator)),))
    return {k: strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None)
            for k, v in per_replica.items()}

  evaluation = (Evaluation(lambda: monitor(retriever), monitor.every_n_steps, monitor.metric)
                if monitor else None)
  metrics = loop.run(run_step, evaluation=evaluation)
  if monitor:
    best = loop.best()
    loop.restore_best()
    logging.info("ICT keeps the best checkpoint: %s", best)
  output = distribute.output_dir(strategy, trainer.model_dir)
  save_model(retriever, os.path.join(output, "retriever"))
  export_doc_embedder(retriever, os.path.join(output, "doc_embedder"),
                      tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id,
                      block_length=task.model.block_length, snapshot_step=trainer.num_steps)
  distribute.barrier(strategy)  # workers exit together (see RealmPretrainer.train)
  return metrics, loop.history
