"""A training task, after Model Garden's `base_task.Task`: what differs between ICT, REALM
pre-training and Open-QA fine-tuning, run by the one loop (`training.train_loop.TrainLoop`).

    task = IctTask(config, strategy)
    task.run()   # build_inputs(), initialize(build_model()), the task's trainer

`build_model()` builds the towers of `task.model` inside the strategy's scope and the runtime's
precision (pre-training loads an ICT run's saved `retriever/` whole); `initialize(model)` loads
the previous stage's checkpoint (`previous_run`) or BERT weights; `build_inputs()` loads the
corpus (ICT, pre-training); `run()` trains through the task's library, whose steps,
checkpoints, resume, summaries, validation and best checkpoint are the loop's.
"""
import abc
import contextlib
import dataclasses
import json
import os
from typing import Any, Dict, Optional

import tensorflow as tf

from realm_tf import distribute
from realm_tf import errors
from realm_tf import pretrained
from realm_tf import presets
from realm_tf.data import shards
from realm_tf.experiments import overrides
from realm_tf.experiments import registry
from realm_tf.experiment_config import EXPERIMENT_FILE
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.models import precision
from realm_tf.qa import datasets
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config
from realm_tf.training.recall_monitor import RecallMonitor

# `run_config.retriever_structure`'s "pooling/projection" -> the `presets` head.
_HEADS = {"mean/l2_normalize": "sentence", "cls_pooled/dense_layernorm": "realm"}


@dataclasses.dataclass(frozen=True)
class PreviousRun:
  """A previous stage's model directory: ICT or pre-training (checkpoints in `checkpoints/`),
  or Open-QA fine-tuning (a QA model directory, its checkpoints beside `model.json`: a second
  fine-tuning goes on from its last checkpoint, as after the cloze warm-up of
  `realm_tf.qa.cloze_questions`).

  Attributes:
    model_dir: the directory.
    checkpoint_dir: its checkpoints (`TrainLoop`'s `checkpoints/`, or the QA model directory).
    structure: its `run_config.json` (task, retriever and reader structure).
  """
  model_dir: str
  checkpoint_dir: str
  structure: Dict[str, Any]

  @property
  def fine_tuned(self) -> bool:
    """An Open-QA model directory (separate towers, `task.model` in the structure)."""
    return self.structure.get("task") == "finetune"

  @property
  def retriever_head(self) -> str:
    if self.fine_tuned:
      return self.structure["model"]["retriever_head"]
    return _HEADS[self.structure["retriever"]["retriever_head"]]

  @property
  def projection_size(self) -> Optional[int]:
    """Its retriever's projection size (None: a run without a retriever)."""
    if self.fine_tuned:
      return int(self.structure["model"]["projection_size"])
    retriever = self.structure.get("retriever")
    return int(retriever["projection_size"]) if retriever else None

  @property
  def doc_input(self) -> Optional[str]:
    """Its retriever's doc-tower block form (None: a run without a retriever)."""
    retriever = self.structure["model"] if self.fine_tuned else self.structure.get("retriever")
    return retriever.get("doc_input", doc_inputs.DEFAULT_DOC_INPUT) if retriever else None

  @property
  def share_towers(self) -> bool:
    return not self.fine_tuned and bool(self.structure["retriever"]["share_towers"])

  def saved(self, tower: str) -> str:
    """Its saved `tower` ("retriever", "reader"), or "" without one."""
    path = os.path.join(self.model_dir, tower)
    return path if tf.io.gfile.isdir(path) else ""


def previous_run(model_dir: str) -> Optional[PreviousRun]:
  """The run written into `model_dir` by a task of this package, or None for another kind
  of path (a checkpoint prefix, a checkpoint directory)."""
  for checkpoint_dir in (os.path.join(model_dir, "checkpoints"), model_dir):
    path = os.path.join(checkpoint_dir, run_config.RUN_CONFIG)
    if tf.io.gfile.exists(path):
      with tf.io.gfile.GFile(path, "r") as f:
        run = PreviousRun(model_dir, checkpoint_dir, json.load(f))
      # Only a QA model directory keeps its checkpoints and run_config.json at the top.
      return run if checkpoint_dir != model_dir or run.fine_tuned else None
  return None


class Task(abc.ABC):
  """A task of an `ExperimentConfig` under a `tf.distribute` strategy (module docstring).

  Writes the config to `<trainer.model_dir>/experiment.json` (the chief; the other workers
  into scratch).

  Args:
    config: the experiment.
    strategy: built before any other TensorFlow op (`train_lib.run_experiment`).
    verbose: the loop's progress bar.
    monitor: ICT and pre-training: a `training.recall_monitor.RecallMonitor` run by the loop
      (held-out recall, `eval.jsonl`, `best/`) instead of one over `task.dev_data`; Open-QA
      validates on `task.dev_data`.
  """

  min_steps = 1  # trainer.num_steps; Open-QA: 0 writes the initialisation as a QA model

  def __init__(self, config: ExperimentConfig, strategy: tf.distribute.Strategy,
               verbose: bool = True, monitor: Optional[RecallMonitor] = None):
    if not config.trainer.model_dir:
      raise errors.InputError(errors.describe(
          "trainer.model_dir", "not set", "Set it (--params_override=trainer.model_dir=...)"))
    output = distribute.output_dir(strategy, config.trainer.model_dir)
    shards.check_output_directory(config.trainer.model_dir, "--model_dir",
                                  "Pass a directory: new, or the one a run to resume wrote")
    self.verbose, self.monitor = verbose, monitor
    self.config = config
    self.task = config.task
    self.strategy = strategy
    self.previous = previous_run(config.task.init.checkpoint) if (
        config.task.init.checkpoint) else None
    self.check_settings()
    tf.io.gfile.makedirs(output)
    overrides.write_file(config, os.path.join(output, EXPERIMENT_FILE),
                         experiment=registry.name_of(config))
    self.vocab_file = config.task.vocab_file or os.path.join(pretrained.minilm_dir(),
                                                             "vocab.txt")
    self.tokenizer = WordpieceTokenizer.from_vocab_file(self.vocab_file)

  def check_settings(self) -> None:
    """Settings that cannot go together, checked before anything is read or written:
    raises `errors.InputError` naming the flag (subclasses add their own)."""
    steps = self.config.trainer.num_steps
    if steps < self.min_steps:
      raise errors.InputError(errors.describe(
          f"--num_steps={steps}", f"the {registry.name_of(self.config)} experiment needs at "
          f"least {self.min_steps} training step (trainer.num_steps)",
          f"Pass --num_steps={self.min_steps} or more"))

  def scope(self):
    """The strategy's scope in the runtime's precision: where models are built."""
    stack = contextlib.ExitStack()
    stack.enter_context(self.strategy.scope())
    stack.enter_context(precision.policy_scope(self.config.runtime.compute_dtype))
    return stack

  def model_config(self) -> presets.ModelConfig:
    """`task.model` for the vocabulary, its "auto" head resolved: the previous run's head,
    else REALM's for released towers (`init.realm_embedder`, `init.orqa`), else the head of
    `init.bert_weights`; a previous run's retriever sets the projection size and `doc_input`
    (the form it was trained on; another non-default one in `task.model` is refused)."""
    model = self.task.model
    head, projection_size = model.retriever_head, model.projection_size
    doc_input = model.doc_input
    if self.previous and self.previous.projection_size is not None:
      projection_size = self.previous.projection_size
      head = self.previous.retriever_head if head == "auto" else head
      doc_input = self.previous.doc_input
      if model.doc_input not in (doc_inputs.DEFAULT_DOC_INPUT, doc_input):
        raise errors.InputError(errors.describe(
            f"--doc_input={model.doc_input}", f"the retriever of {self.previous.model_dir} "
            f"reads doc_input={doc_input!r}", f"Drop --doc_input (the retriever's own form "
            f"is used), or start from a retriever trained with doc_input={model.doc_input!r}"))
    init = self.task.init
    # Released REALM and ORQA towers hold REALM's head, whatever BERT weights fill the rest,
    # and so does a bare TF2 checkpoint (REALM pre-training's) that no run directory describes.
    head_weights = ("" if init.realm_embedder or init.orqa or (
        init.checkpoint and self.previous is None) else init.bert_weights)
    return dataclasses.replace(
        model, encoder=dataclasses.replace(model.encoder, vocab_size=self.tokenizer.vocab_size),
        retriever_head=presets.resolve_head(head, head_weights),
        projection_size=projection_size, doc_input=doc_input)

  def recall_monitor(self, store: Corpus) -> Optional[RecallMonitor]:
    """ICT's and pre-training's held-out recall: the monitor given, else one over
    `task.dev_data` (the first `trainer.eval_max_examples`) every `trainer.eval_every` steps,
    else None."""
    dev_data = self.task.dev_data
    if self.monitor is not None and dev_data:
      raise ValueError("pass a recall monitor or set task.dev_data, not both")
    if self.monitor is not None or not dev_data:
      return self.monitor
    trainer, model = self.config.trainer, self.task.model
    examples = datasets.load_examples(dev_data)[:trainer.eval_max_examples or None]
    return RecallMonitor(store, examples, self.tokenizer, trainer.eval_every,
                         query_length=model.query_length, block_length=model.block_length)

  def require(self, *names: str) -> None:
    """Raises `errors.InputError` for a `task.<name>` left empty."""
    for name in names:
      if not getattr(self.task, name):
        raise errors.InputError(errors.describe(
            f"task.{name}", "not set", f"Set it (--params_override=task.{name}=...)"))

  @abc.abstractmethod
  def build_model(self):
    """The task's towers, built in `scope()`."""

  @abc.abstractmethod
  def initialize(self, model):
    """`model` with its initial weights; returns the model."""

  @abc.abstractmethod
  def run(self) -> Dict[str, float]:
    """Trains; returns the last step's (or the final) metrics."""
