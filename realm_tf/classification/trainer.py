"""Retrieval-augmented classification training (`realm-train --experiment=classification`).

B texts a step, k blocks read plus the null document, C labels. A step retrieves on the host
(`classification.retrieval`: the frozen doc tower's index, BM25, or none) and runs the
replicated update of `classification.step` (the query tower, the reader's BERT and the
classification head, end to end through p(z|x)). The run lives on the one
`training.train_loop.TrainLoop` (checkpoints in `<model_dir>/checkpoints`, resume,
`metrics.jsonl`, `eval.jsonl`, `best/` by dev accuracy); `labels.json` holds the label order and
`predictions.jsonl` the latest dev evaluation's predictions with their evidence
(`classification.evaluation`).

Weights start as Open-QA's do (`presets.initialize`: a REALM pre-training or ICT checkpoint,
released towers, BERT weights); the classification head starts at random.
"""
import json
import os
from typing import Callable, Dict, List, Optional, Tuple

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf import distribute
from realm_tf import graph_functions
from realm_tf.classification import data
from realm_tf.classification import evaluation
from realm_tf.classification.retrieval import BlockIndex
from realm_tf.classification.retrieval import BlockRetrieval
from realm_tf.classification.step import classification_outputs
from realm_tf.classification.step import make_replica_step
from realm_tf.classification.step import trained_variables
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.keras import keras
from realm_tf.layers.classification_head import ClassificationHead
from realm_tf.models import precision
from realm_tf.presets import build_models
from realm_tf.qa.index_snapshots import snapshot_query_tower
from realm_tf.qa.open_qa_batches import EpochBatches
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import create_optimizer
from realm_tf.training.optimizer import create_slots
from realm_tf.training.train_loop import Evaluation
from realm_tf.training.train_loop import TrainLoop

PREDICTIONS_FILE = "predictions.jsonl"
_EVAL_BATCH = 16


class ClassificationTrainer:
  """Trains and evaluates a retrieval-augmented classifier (module docstring).

  Args:
    experiment: the run; its task a `ClassificationTaskConfig` resolved by the task
      (`experiments.classification_task`): `task.vocab_file` set, `task.model` for it,
      `task.init.checkpoint` a checkpoint (prefix or directory).
    strategy: a `tf.distribute.Strategy` (default: the current one).
    log: called with one-line progress messages.
    initialize: (retriever, reader) -> loads a fresh run's initial weights (None: random).
  """

  def __init__(self, experiment: ExperimentConfig,
               strategy: Optional[tf.distribute.Strategy] = None,
               log: Callable[[str], None] = logging.info,
               initialize: Optional[Callable[[Tuple], object]] = None):
    task, trainer = experiment.task, experiment.trainer
    self.experiment, self.log = experiment, log
    self.strategy = strategy or tf.distribute.get_strategy()
    if trainer.batch_size % self.strategy.num_replicas_in_sync:
      raise ValueError(f"batch_size {trainer.batch_size} is not a multiple of the "
                       f"{self.strategy.num_replicas_in_sync} replicas")
    keras.utils.set_random_seed(experiment.runtime.seed)
    self.train_examples = data.load_examples(task.train_data)
    self.labels = self._label_set()
    self.train_ids = data.label_ids(self.train_examples, self.labels, task.train_data)
    self.dev_examples = data.load_examples(task.dev_data) if task.dev_data else []
    self.dev_ids = data.label_ids(self.dev_examples, self.labels, task.dev_data)
    self.corpus = Corpus.load(task.corpus)
    self.tokenizer = WordpieceTokenizer.from_vocab_file(task.vocab_file)
    if self.tokenizer.vocab_size != task.model.encoder.vocab_size:
      raise ValueError(f"vocabulary {task.vocab_file} has {self.tokenizer.vocab_size} "
                       f"wordpieces, the encoder {task.model.encoder.vocab_size}")
    featurizer = Featurizer(self.tokenizer, task.model.query_length, task.model.block_length,
                            task.model.reader_length, doc_input=task.model.doc_input)
    schedule = dict(num_train_steps=max(1, trainer.num_steps), warmup_steps=trainer.warmup_steps)
    query_rate = trainer.retriever_learning_rate
    with self.strategy.scope(), precision.policy_scope(experiment.runtime.compute_dtype):
      self.retriever, self.reader = build_models(task.model)
      self.head = ClassificationHead(len(self.labels), task.head_dropout,
                                     task.model.encoder.initializer_range, name="classifier")
      self.head(tf.zeros([1, 1, task.model.encoder.hidden_size]))
      self.optimizer = create_optimizer(OptimizerConfig(trainer.learning_rate, **schedule))
      self.retriever_optimizer = create_optimizer(OptimizerConfig(
          trainer.learning_rate if query_rate is None else query_rate, **schedule))
    models = dict(retriever=self.retriever, reader=self.reader, classifier=self.head)
    self.loop = TrainLoop(
        trainer.model_dir, dict(models, optimizer=self.optimizer,
                                retriever_optimizer=self.retriever_optimizer),
        trainer.num_steps, checkpoint_every=trainer.checkpoint_every,
        max_to_keep=trainer.keep_checkpoints, verbose=False, strategy=self.strategy,
        run_config=dict(task="classification", labels=list(self.labels),
                        model=task.model.to_dict(), retrieval=task.retrieval,
                        vocab_fingerprint=run_config.vocab_fingerprint(
                            self.tokenizer.vocabulary),
                        corpus_fingerprint=self.corpus.fingerprint),
        best_items=models, before_first_step=self._create_slots)
    self.output_dir = self.loop.output_dir
    tf.io.gfile.makedirs(self.output_dir)
    with tf.io.gfile.GFile(os.path.join(self.output_dir, data.LABELS_FILE), "w") as f:
      json.dump(list(self.labels), f)
    latest = tf.train.latest_checkpoint(self.loop.checkpoint_dir)
    if latest:
      self.loop.restore()
      self.log(f"resumed from {latest} at step {int(self.loop.step.numpy())}")
    else:
      if initialize:
        initialize((self.retriever, self.reader))
      if task.init.checkpoint_share_towers:  # shared (or new) towers: the same doc tower
        snapshot_query_tower(self.retriever)
    block_index = (None if task.retrieval == "none" else
                   BlockIndex.build(self.retriever, featurizer, self.corpus, task.index_kind))
    self.retrieval = BlockRetrieval(self.retriever, featurizer, self.corpus, task.retrieval,
                                    task.reader_top_k, task.null_document, block_index)
    self._replica_step = make_replica_step(self.retriever, self.reader, self.head,
                                           self.optimizer, self.retriever_optimizer,
                                           trainer.batch_size)
    self._train_fn = graph_functions.function(self._replicated_sums)
    self._eval_fn = graph_functions.function(
        lambda inputs: classification_outputs(self.retriever, self.reader, self.head, inputs,
                                              training=False))
    self._batches = EpochBatches(list(range(len(self.train_examples))), trainer.batch_size,
                                 experiment.runtime.seed)
    self.losses: List[float] = []

  def _label_set(self) -> Tuple[str, ...]:
    """`task.labels`, else a resumed run's `labels.json`, else the training file's."""
    task = self.experiment.task
    path = os.path.join(self.experiment.trainer.model_dir, data.LABELS_FILE)
    if not task.labels and tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path, "r") as f:
        return tuple(json.load(f))
    return data.label_set(task.labels, task.train_data, self.train_examples)

  def _create_slots(self) -> None:
    query_tower, reader = trained_variables(self.retriever, self.reader, self.head)
    create_slots(self.retriever_optimizer, query_tower, self.strategy)
    create_slots(self.optimizer, reader, self.strategy)

  def prepare(self, texts: List[str], label_ids: List[int]) -> Dict[str, np.ndarray]:
    """The step's inputs of `texts` (`BlockRetrieval`) with their "labels" int32 [B]."""
    return dict(self.retrieval(texts), labels=np.asarray(label_ids, np.int32))

  def _replicated_sums(self, inputs) -> Dict[str, tf.Tensor]:
    sums = self.strategy.run(self._replica_step, args=(inputs,))
    return {name: self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
            for name, value in sums.items()}

  def _train_at(self, step: int) -> Dict[str, float]:
    picked = self._batches(step)
    prepared = self.prepare([self.train_examples[i].text for i in picked],
                            [self.train_ids[i] for i in picked])
    sums = self._train_fn(distribute.distribute_batch(
        self.strategy, {n: tf.constant(v) for n, v in prepared.items()}))
    stats = {name: float(value) / len(picked) for name, value in sums.items()}
    if not np.isfinite(stats["loss"]):
      raise FloatingPointError(f"non-finite loss {stats['loss']} at step {step}")
    self.losses.append(stats["loss"])
    if (step + 1) % self.experiment.trainer.log_every == 0:
      self.log(f"step {step + 1} loss={stats['loss']:.4g} accuracy={stats['correct']:.4g}")
    return stats

  def evaluate(self, examples: List[data.TextExample], label_ids: List[int],
               predictions_path: str = "") -> Dict[str, float]:
    """Accuracy and macro-F1 of `examples` with the current weights (no dropout); with
    `predictions_path` each prediction and its evidence go there as JSONL."""
    max_examples = self.experiment.trainer.eval_max_examples or len(examples)
    examples, label_ids = examples[:max_examples], label_ids[:max_examples]
    predicted, records = [], []
    for begin in range(0, len(examples), _EVAL_BATCH):
      texts = [e.text for e in examples[begin:begin + _EVAL_BATCH]]
      gold = label_ids[begin:begin + _EVAL_BATCH]
      prepared = self.prepare(texts, gold)
      outputs = {n: t.numpy() for n, t in self._eval_fn(
          {n: tf.constant(v) for n, v in prepared.items()}).items()}
      predicted.extend(np.argmax(outputs["log_p_y"], axis=-1).tolist())
      if predictions_path:
        records += evaluation.prediction_records(
            texts, gold, self.labels, prepared["rows"], outputs["log_p_z"],
            outputs["log_p_y_given_z"], outputs["log_p_y"], self.corpus.titles,
            self.corpus.texts)
    if predictions_path:
      evaluation.write_predictions(predictions_path, records)
    return evaluation.metrics(label_ids, predicted, len(self.labels))

  def _validate(self) -> Dict[str, float]:
    metrics = self.evaluate(self.dev_examples, self.dev_ids,
                            os.path.join(self.output_dir, PREDICTIONS_FILE))
    self.log(f"step {int(self.loop.step.numpy())} dev " +
             " ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
    return metrics

  def run(self) -> Dict[str, float]:
    """Trains to `trainer.num_steps`, evaluating on dev on schedule; returns the last dev
    metrics (without dev data: the last step's training loss)."""
    trainer = self.experiment.trainer
    evaluation_ = None
    if self.dev_examples:
      evaluation_ = Evaluation(self._validate, trainer.eval_every, "accuracy", at_start=False)
    last = self.loop.run(self._train_at, evaluation=evaluation_)
    if not self.dev_examples:
      self.loop.save_best({})
      return {"loss": last.get("loss", float("nan"))}
    return {k: v for k, v in self.loop.evaluations()[-1].items() if k != "eval_time_s"}
