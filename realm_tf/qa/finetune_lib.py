"""Open-QA fine-tuning (REALM §3.3 / ORQA): the query tower and the reader on a document index.

B questions a batch, K blocks scored by the retriever loss (reference: 5000), k blocks read
(5), D embedding dim. A step has two halves: on the host (`qa.open_qa_batches`) the current
query tower retrieves the top-K rows, their block embeddings [B, K, D] are read from the
index's memory-mapped file and the answer supervision of the K and of the k is computed; then
the replicated step (`qa.open_qa_step`) takes `open_qa_loss` and AdamW. The search stays on
the host, as in pre-training, since a TPU cannot run it.

`FineTuner` runs on pre-training's `training.train_loop.TrainLoop` (checkpoints, resume,
metrics, dev evaluation, `best/`; docs/training.md), the doc tower frozen or trained
(`task.train_doc_tower`) and the index refreshed, if asked, by pre-training's refreshers
(`task.index_refresh_steps`, `qa.index_snapshots`). Each checkpoint is paired with the index in
use at its step, in the model directory of `qa.model`.
"""
import dataclasses
import os
from typing import Callable, Dict, List, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import distribute
from realm_tf import graph_functions
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.keras import keras
from realm_tf.models import precision
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.presets import build_models
from realm_tf.presets import initialize as initialize_models
from realm_tf.qa import datasets
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.index_snapshots import SNAPSHOT_VARIABLE
from realm_tf.qa.index_snapshots import checkpoint_versions
from realm_tf.qa.index_snapshots import publish_initial_index
from realm_tf.qa.index_snapshots import snapshot_dirs
from realm_tf.qa.index_snapshots import snapshot_query_tower
from realm_tf.qa.index_snapshots import start_refresher
from realm_tf.qa.model import BEST_DIR
from realm_tf.qa.model import CORPUS
from realm_tf.qa.model import copy_corpus
from realm_tf.qa.model import VOCAB
from realm_tf.qa.model import ModelInfo
from realm_tf.qa.model import make_system
from realm_tf.qa.open_qa_batches import BatchPreparer
from realm_tf.qa.open_qa_batches import EpochBatches
from realm_tf.qa.open_qa_step import make_replica_step
from realm_tf.qa.open_qa_step import open_qa_losses
from realm_tf.qa.open_qa_step import reader_variables
from realm_tf.qa.open_qa_step import retriever_variables
from realm_tf.qa.supervision import check_answerable
from realm_tf.retrieval.block_fit import check_blocks_fit
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.optimizer import create_slots
from realm_tf.training.train_loop import Evaluation
from realm_tf.training.train_loop import TrainLoop


@dataclasses.dataclass
class FineTuneResult:
  """Attributes:
    step: the last step trained.
    losses: the loss of every step run by this call, in order.
    dev_metrics: {step: metrics} of the dev evaluations of this call.
    best_exact_match: the best dev exact match so far (-1 without dev data).
  """
  step: int
  losses: List[float]
  dev_metrics: Dict[int, Dict[str, float]]
  best_exact_match: float


def _saved_at(manager: tf.train.CheckpointManager, step: int) -> bool:
  return bool(manager.latest_checkpoint) and manager.latest_checkpoint.endswith(f"-{step}")


class FineTuner:
  """Runs Open-QA fine-tuning of an experiment (see the module docstring).

  Args:
    experiment: the run, its task an `OpenQATaskConfig` with what the Open-QA task resolves
      (`experiments.open_qa_task.OpenQATask.resolved`): `task.vocab_file` set, `task.model`
      for that vocabulary with a "realm" or "sentence" head, `task.init.checkpoint` a
      checkpoint (prefix or directory), not a model directory.
    strategy: a `tf.distribute.Strategy` (default: the current one).
    log: called with one-line progress messages.
    build_model: () -> (retriever, reader), called in the strategy's scope and precision
      (default: `presets.build_models(task.model)`; an Open-QA task's `build_model`).
    initialize: (retriever, reader) -> loads a fresh run's initial weights (default:
      `presets.initialize` of `task.init`; an Open-QA task's `initialize`).
  """

  def __init__(self, experiment: ExperimentConfig,
               strategy: Optional[tf.distribute.Strategy] = None,
               log: Callable[[str], None] = logging.info,
               build_model: Optional[Callable[[], Tuple[Retriever, Reader]]] = None,
               initialize: Optional[Callable[[Tuple[Retriever, Reader]], object]] = None):
    task, trainer = experiment.task, experiment.trainer
    build_model = build_model or (lambda: build_models(task.model))
    initialize = initialize or (lambda models: initialize_models(*models, task.model, task.init))
    self.experiment = experiment
    self.strategy = strategy or tf.distribute.get_strategy()
    self.log = log
    if trainer.batch_size % self.strategy.num_replicas_in_sync:
      raise ValueError(f"batch_size {trainer.batch_size} is not a multiple of the "
                       f"{self.strategy.num_replicas_in_sync} replicas")
    keras.utils.set_random_seed(experiment.runtime.seed)
    self.dataset = datasets.dataset_of(task.train_data, task.dataset)
    self.train_examples = datasets.load_examples(task.train_data, self.dataset)
    self.dev_examples = (datasets.load_examples(task.dev_data, self.dataset)
                         if task.dev_data else [])
    self.corpus = Corpus.load(task.corpus)
    if not task.allow_unanswerable:
      check_answerable(self.train_examples, self.corpus.texts, task.train_data, task.corpus)
    self.tokenizer = WordpieceTokenizer.from_vocab_file(task.vocab_file)
    if self.tokenizer.vocab_size != task.model.encoder.vocab_size:
      raise ValueError(f"vocabulary {task.vocab_file} has {self.tokenizer.vocab_size} "
                       f"wordpieces, the encoder {task.model.encoder.vocab_size}")
    check_blocks_fit(self.corpus, self.tokenizer, task.model.block_length,
                     trainer.model_dir or "being fine-tuned")
    self.featurizer = Featurizer(self.tokenizer, task.model.query_length,
                                 task.model.block_length, task.model.reader_length,
                                 doc_input=task.model.doc_input)
    self.num_retrieved = min(task.retriever_top_k, len(self.corpus))
    self.num_read = min(task.reader_top_k, self.num_retrieved)
    self.num_fresh = self.num_read if task.train_doc_tower else 0  # re-embedded in the step
    if task.refresh == "async" and distribute.num_workers(self.strategy) > 1:
      raise ValueError("an asynchronous index refresh in fine-tuning runs on one worker (each "
                       "worker keeps its own index, and theirs would swap at other steps)")

    schedule = dict(num_train_steps=max(1, trainer.num_steps), warmup_steps=trainer.warmup_steps)
    query_rate = trainer.retriever_learning_rate  # the query tower's (None: the reader's)
    with self.strategy.scope(), precision.policy_scope(experiment.runtime.compute_dtype):
      self.retriever, self.reader = build_model()
      self.optimizer = create_optimizer(OptimizerConfig(trainer.learning_rate, **schedule))
      self.retriever_optimizer = create_optimizer(OptimizerConfig(
          trainer.learning_rate if query_rate is None else query_rate, **schedule))
      self.doc_snapshot_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name=SNAPSHOT_VARIABLE)
    models = {"retriever": self.retriever, "reader": self.reader,
              SNAPSHOT_VARIABLE: self.doc_snapshot_step}
    self.loop = TrainLoop(
        trainer.model_dir, dict(models, optimizer=self.optimizer,
                                retriever_optimizer=self.retriever_optimizer),
        trainer.num_steps, checkpoint_every=trainer.checkpoint_every,
        max_to_keep=trainer.keep_checkpoints, verbose=False, strategy=self.strategy,
        run_config=dict(task="finetune", dataset=self.dataset, model=task.model.to_dict(),
                        vocab_fingerprint=run_config.vocab_fingerprint(
                            self.tokenizer.vocabulary),
                        corpus_fingerprint=self.corpus.fingerprint),
        checkpoint_subdir="", best_items=models, after_save=self._write_info,
        after_best=self._write_best_info, before_first_step=self._create_slots)
    self.step = self.loop.step
    self.output_dir = self.loop.output_dir  # the model directory on the chief
    tf.io.gfile.makedirs(self.output_dir)
    with tf.io.gfile.GFile(os.path.join(self.output_dir, VOCAB), "w") as f:
      f.write("\n".join(self.tokenizer.vocabulary) + "\n")
    copy_corpus(self.corpus, self.output_dir)
    latest = tf.train.latest_checkpoint(self.loop.checkpoint_dir)  # the chief's, on every worker
    if latest:
      self.loop.restore()
      self.log(f"resumed from {latest} at step {self._step()}")
    else:
      initialize((self.retriever, self.reader))
      if not task.init.checkpoint or task.init.checkpoint_share_towers:
        snapshot_query_tower(self.retriever)  # shared pre-trained towers: the same doc tower.
      if task.init.index:
        publish_initial_index(self.output_dir, self.corpus, self.tokenizer, task,
                              self.retriever, task.init.index)

    self.refresher = start_refresher(self.output_dir, self.corpus, self.tokenizer, task,
                                     self.retriever, self._snapshot(), self._checkpoints(),
                                     resumed=bool(latest))
    self.doc_index = self._refreshed_doc_index()
    self._replica_step = make_replica_step(self.retriever, self.reader, self.optimizer,
                                           trainer.batch_size, self.retriever_optimizer,
                                           task.model.span_normalization, task.train_doc_tower)
    self._systems: Dict[int, RetrieveAndRead] = {}  # blocks read -> the system reading that many
    self._prepare = BatchPreparer(self.retriever, self.featurizer, self.tokenizer, self.corpus)
    self._train_fn = graph_functions.function(self._distributed_step)
    self._batches = EpochBatches(self.train_examples, trainer.batch_size,
                                 experiment.runtime.seed)
    self._losses_run: List[float] = []
    self._dev_metrics: Dict[int, Dict[str, float]] = {}

  def _step(self) -> int:
    return int(self.step.numpy())

  def _create_slots(self) -> None:
    create_slots(self.retriever_optimizer, retriever_variables(
        self.retriever, self.experiment.task.train_doc_tower), self.strategy)
    create_slots(self.optimizer, reader_variables(self.reader), self.strategy)

  def _snapshot(self) -> int:
    return int(self.doc_snapshot_step.numpy())

  @property
  def best_exact_match(self) -> float:
    """The dev exact match of the checkpoint in `best/` (-1: none, or no dev data)."""
    return float((self.loop.best() or {}).get("exact_match", -1.0))

  def _refresh_index(self, step: int) -> None:
    """The index refresh before step `step` (0-based, > 0). A frozen doc tower becomes the
    query tower of `step` every `index_refresh_steps` and its index is swapped in, the
    checkpoint saved with it; a trained doc tower is snapshotted by the refresher on its
    schedule and a newer published index swapped in when there is one."""
    task = self.experiment.task
    if not task.train_doc_tower:
      if step % task.index_refresh_steps or self._snapshot() == step:
        return
      snapshot_query_tower(self.retriever)
      self.doc_snapshot_step.assign(step)
      self.refresher.maybe_refresh(step, self.retriever)
    elif not self.refresher.maybe_refresh(step, self.retriever,
                                          last_step=self.experiment.trainer.num_steps):
      return
    self.doc_snapshot_step.assign(self.refresher.snapshot_step)
    self.doc_index = self._refreshed_doc_index()
    self._systems = {}
    if not task.train_doc_tower:
      self.loop.save()  # the checkpoint's doc tower must match the live index.
    self._pin_checkpoint_indexes()

  def _refreshed_doc_index(self) -> DocIndex:
    """The refresher's index version in use, its embeddings file memory-mapped."""
    return DocIndex.from_index(self.refresher.index, self.refresher.metadata,
                               self.refresher.embeddings)

  def _checkpoints(self) -> List[str]:  # the kept checkpoints and the best one
    return list(self.loop.manager.checkpoints) + [self.loop.best_manager.latest_checkpoint]

  # Model directory ----------------------------------------------------------------------------

  def _info(self, step: int, prefix: str = "",
            metrics: Optional[Dict[str, float]] = None) -> ModelInfo:
    index_name, embedder_name = snapshot_dirs(self._snapshot())
    return ModelInfo(model=self.experiment.task.model, corpus=prefix + CORPUS,
                     corpus_fingerprint=self.corpus.fingerprint,
                     doc_index=prefix + index_name, doc_embedder=prefix + embedder_name,
                     dataset=self.dataset, vocab_file=prefix + VOCAB, step=step,
                     metrics=dict(metrics or {}),
                     vocab_fingerprint=run_config.vocab_fingerprint(self.tokenizer.vocabulary))

  def _write_info(self, step: int) -> None:
    self._info(step).write(self.output_dir)
    self._pin_checkpoint_indexes()

  def _write_best_info(self, step: int, metrics: Dict[str, float]) -> None:
    self._info(step, "../", metrics).write(os.path.join(self.output_dir, BEST_DIR))
    self._pin_checkpoint_indexes()

  def _pin_checkpoint_indexes(self) -> None:
    """Keeps the index versions the kept and best checkpoints use through the next swaps (a
    swap prunes the versions no checkpoint pinned)."""
    self.refresher.retain(checkpoint_versions(self._checkpoints()))

  # Batches ------------------------------------------------------------------------------------

  def prepare_batch(self, examples: List[datasets.QAExample]) -> Dict[str, np.ndarray]:
    """Host-side retrieval and supervision for a batch (`open_qa_batches.BatchPreparer`)."""
    return self._prepare(examples, self.doc_index, self.experiment.task, self.num_retrieved,
                         self.num_read, self.num_fresh)

  # The replicated step ------------------------------------------------------------------------

  def _losses(self, inputs: Dict[str, tf.Tensor], training: bool):
    return open_qa_losses(self.retriever, self.reader, inputs, training,
                          self.experiment.task.model.span_normalization)

  def loss(self, prepared: Dict[str, np.ndarray]) -> np.ndarray:
    """Per-question losses [B] of a `prepare_batch` result with the current weights, without
    dropout and without updating anything."""
    return self._losses({n: tf.constant(v) for n, v in prepared.items()},
                        training=False)[0].numpy()

  def _distributed_step(self, inputs) -> Dict[str, tf.Tensor]:
    sums = self.strategy.run(self._replica_step, args=(inputs,))
    return {name: self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
            for name, value in sums.items()}

  def _distribute(self, prepared: Dict[str, np.ndarray]):
    per_replica = self.experiment.trainer.batch_size // self.strategy.num_replicas_in_sync

    def value_fn(context):
      begin = context.replica_id_in_sync_group * per_replica
      return {n: tf.constant(v[begin:begin + per_replica]) for n, v in prepared.items()}

    return self.strategy.experimental_distribute_values_from_function(value_fn)

  def train_step(self, examples: List[datasets.QAExample]) -> Dict[str, float]:
    """One optimisation step on `examples` (B of them); returns per-question averages (the
    step counter is the loop's)."""
    sums = self._train_fn(self._distribute(self.prepare_batch(examples)))
    return {name: float(value) / len(examples) for name, value in sums.items()}

  def _train_at(self, step: int) -> Dict[str, float]:
    """The loop's step `step` (0-based): index refresh on schedule, then `train_step`."""
    trainer = self.experiment.trainer
    if self.experiment.task.index_refresh_steps and step:
      self._refresh_index(step)
    stats = self.train_step(self._batches(step))
    if not np.isfinite(stats["loss"]):
      raise FloatingPointError(f"non-finite loss {stats['loss']} at step {step}")
    self._losses_run.append(stats["loss"])
    stats.update(index_version=float(self._snapshot()),
                 index_staleness=float(step - self._snapshot()))
    if self.experiment.task.refresh == "async":
      stats["index_wait_seconds"] = self.refresher.wait_seconds
    if (step + 1) % trainer.log_every == 0 or step + 1 == trainer.num_steps:
      self.log(f"step {step + 1} " + " ".join(f"{k}={v:.4g}" for k, v in stats.items()))
    return stats

  # Evaluation and the loop --------------------------------------------------------------------

  def system(self, k: Optional[int] = None) -> RetrieveAndRead:
    """The retrieve-and-read system with the current weights and index, reading `k` blocks
    per question (None: the `task.reader_top_k` that training reads)."""
    k = self.num_read if k is None else min(k, self.num_retrieved)
    if k not in self._systems:
      self._systems[k] = make_system(self.retriever, self.reader, self.tokenizer,
                                     self.experiment.task.model, self.corpus, self.doc_index,
                                     k=k)
    return self._systems[k]

  def evaluate_dev(self) -> Dict[str, float]:
    """Dev metrics (exact match, recall@k) with the current weights and index."""
    return evaluate(self.system(), self.dev_examples,
                    EvalConfig(max_examples=self.experiment.trainer.eval_max_examples)).metrics

  def _validate(self) -> Dict[str, float]:
    """The loop's periodic evaluation: `evaluate_dev`, kept in this run's result."""
    metrics = self._dev_metrics[self._step()] = self.evaluate_dev()
    self.log(f"step {self._step()} dev " + " ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
    return metrics

  def run(self) -> FineTuneResult:
    """Trains up to `trainer.num_steps`, evaluating, checkpointing and refreshing on schedule.

    Raises:
      distribute.WorkerLostError: another worker of a multi-worker job stopped.
    """
    trainer = self.experiment.trainer
    self._losses_run, self._dev_metrics = [], {}
    evaluation = None
    if self.dev_examples:  # 0 steps: the pre-trained model's figures
      evaluation = Evaluation(self._validate, trainer.eval_every, "exact_match",
                              at_start=trainer.num_steps == 0)
    try:
      self.loop.run(self._train_at, evaluation=evaluation)
    finally:
      self.refresher.close()  # an asynchronous builder still running is stopped
    step = self._step()
    if not self.dev_examples and not _saved_at(self.loop.best_manager, step):
      self.loop.save_best({})  # without dev data `best/` is the last step
    if not _saved_at(self.loop.manager, step):
      self.loop.save()  # 0 steps: the pre-trained model as a QA model directory
    distribute.barrier(self.strategy)  # workers exit together (see RealmPretrainer.train)
    return FineTuneResult(step, self._losses_run, self._dev_metrics, self.best_exact_match)
