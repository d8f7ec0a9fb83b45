"""A trained classification run loaded for use (`realm-export-hub`, `realm-serve`): its
weights, labels and corpus, classifying texts with their evidence.

The run's directory (`realm-train --experiment=classification`) holds `experiment.json` (corpus,
vocabulary, k, retrieval), `labels.json`, `checkpoints/` with `run_config.json` (the model's
sizes, vocabulary and corpus fingerprints) and `best/`. Loading reads `best/` (else the latest
checkpoint), checks the vocabulary against the run's, and embeds the corpus with the frozen doc
tower as training did (`BlockIndex`). `classify` is the evaluation's computation
(`BlockRetrieval`, `classification_outputs`) over K = k + 1 blocks read (the null document row
-2), its evidence ranked by p(z|x) p(ŷ|z,x) as predictions.jsonl ranks it.
"""
import dataclasses
import json
import os
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf import graph_functions
from realm_tf import pretrained
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.classification import data
from realm_tf.classification.evaluation import ranked_evidence
from realm_tf.classification.retrieval import BlockIndex
from realm_tf.classification.retrieval import BlockRetrieval
from realm_tf.classification.step import classification_outputs
from realm_tf.experiment_config import EXPERIMENT_FILE
from realm_tf.layers.classification_head import ClassificationHead
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models
from realm_tf.qa.open_qa_step import NULL_ROW
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from realm_tf.training import run_config
from realm_tf.training.train_loop import BEST_DIR

_FIX = "Pass --model_dir=<the trainer.model_dir of realm-train --experiment=classification>"


@dataclasses.dataclass(frozen=True)
class RunSettings:
  """The settings of the run's `task` (`ClassificationTaskConfig`) that using it needs."""
  corpus: str
  vocab_file: str
  reader_top_k: int
  retrieval: str
  null_document: bool
  head_dropout: float

  @classmethod
  def read(cls, path: str) -> "RunSettings":
    """Those of `path`, a run's experiment.json."""
    task = _read_json(path)["task"]
    return cls(**{field.name: task[field.name] for field in dataclasses.fields(cls)})


@dataclasses.dataclass(frozen=True)
class Evidence:
  """One block read: its corpus block id (`NULL_ROW` for the null document, title and text
  ""), p(z|x) ("probability") and p(ŷ|z,x) of the predicted label ("label_probability")."""
  block_id: int
  title: str
  text: str
  probability: float
  label_probability: float


@dataclasses.dataclass(frozen=True)
class Classification:
  """A text's predicted label, its p(ŷ|x), p(y|x) of every label and the blocks read."""
  text: str
  label: str
  probability: float
  label_probabilities: Dict[str, float]
  evidence: List[Evidence]


def classification_run_dir(model_dir: str) -> str:
  """The classification run `model_dir` names: itself when it holds `labels.json`, the run
  when it is the run's `best/` (as a QA model's `best/` is passed), else ""."""
  model_dir = model_dir.rstrip("/")
  for directory in (model_dir, os.path.dirname(model_dir)
                    if os.path.basename(model_dir) == BEST_DIR else None):
    if directory and tf.io.gfile.exists(os.path.join(directory, data.LABELS_FILE)):
      return directory
  return ""


def _require(path: str) -> str:
  if not tf.io.gfile.exists(path):
    raise errors.InputError(errors.describe(
        path, "missing: not a classification run's directory, or an incomplete copy", _FIX))
  return path


def _read_json(path: str):
  with tf.io.gfile.GFile(_require(path), "r") as f:
    return json.load(f)


class ClassificationModel:
  """A loaded classification run (module docstring); `load` builds one.

  Attributes:
    directory, settings, labels, step: the run's directory, `RunSettings`, label names and
      the step of the weights loaded.
    config: the model's `presets.ModelConfig` (its sizes, as the run resolved them).
    retriever, reader, head, tokenizer, featurizer, corpus: its parts.
    block_index: the corpus embedded by the doc tower (None with `task.retrieval` "none").
  """

  def __init__(self, directory: str, settings: RunSettings, labels: Tuple[str, ...],
               config: ModelConfig, parts: Tuple, featurizer: Featurizer, corpus: Corpus,
               step: int):
    self.directory, self.settings, self.labels, self.step = directory, settings, labels, step
    self.config = config
    self.retriever, self.reader, self.head = parts
    self.featurizer, self.tokenizer, self.corpus = featurizer, featurizer.tokenizer, corpus
    self.block_index = None if settings.retrieval == "none" else BlockIndex.build(
        self.retriever, featurizer, corpus, "brute_force")
    self.retrieval = BlockRetrieval(self.retriever, featurizer, corpus, settings.retrieval,
                                    settings.reader_top_k, settings.null_document,
                                    self.block_index)
    self._outputs = graph_functions.function(lambda inputs: classification_outputs(
        self.retriever, self.reader, self.head, inputs, training=False))

  @classmethod
  def load(cls, model_dir: str, corpus: str = "") -> "ClassificationModel":
    """Loads the run in `model_dir`; `corpus`: another knowledge corpus to read (default the
    run's `task.corpus`), embedded by the run's doc tower.

    Raises:
      errors.InputError: a file of the run missing, a vocabulary that is not the run's, or a
        checkpoint that does not fit the model.
    """
    task = RunSettings.read(os.path.join(model_dir, EXPERIMENT_FILE))
    labels = tuple(_read_json(os.path.join(model_dir, data.LABELS_FILE)))
    structure = _read_json(os.path.join(model_dir, "checkpoints", run_config.RUN_CONFIG))
    vocab_file = task.vocab_file or os.path.join(pretrained.minilm_dir(), "vocab.txt")
    tokenizer = WordpieceTokenizer.from_vocab_file(vocab_file)
    if run_config.vocab_fingerprint(tokenizer.vocabulary) != structure["vocab_fingerprint"]:
      raise errors.InputError(errors.describe(
          vocab_file, f"is not the vocabulary {model_dir} was trained with",
          "Restore the run's task.vocab_file"))
    model = ModelConfig.from_dict(structure["model"])
    retriever, reader = build_models(model)
    head = ClassificationHead(len(labels), task.head_dropout, model.encoder.initializer_range,
                              name="classifier")
    head(tf.zeros([1, 1, model.encoder.hidden_size]))
    checkpoint = (tf.train.latest_checkpoint(os.path.join(model_dir, BEST_DIR)) or
                  tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints")))
    if not checkpoint:
      raise errors.InputError(errors.describe(model_dir, "holds no checkpoint", _FIX))
    step = tf.Variable(0, dtype=tf.int64)
    tf2_checkpoint.restore_checked(tf.train.Checkpoint(
        step=step, retriever=retriever, reader=reader, classifier=head), checkpoint, read=True)
    featurizer = Featurizer(tokenizer, model.query_length, model.block_length,
                            model.reader_length, doc_input=model.doc_input)
    return cls(model_dir, task, labels, model, (retriever, reader, head), featurizer,
               Corpus.load(corpus or task.corpus), int(step.numpy()))

  @property
  def default_k(self) -> int:
    """k of the run (0 without retrieval), at most the corpus size."""
    return self.retrieval.num_read

  def classify(self, texts: Sequence[str], k: Optional[int] = None) -> List[Classification]:
    """The `Classification` of each text, reading its `k` best blocks (default the run's)
    and the null document; the evidence lists every block read."""
    prepared = self.retrieval(list(texts), k)
    outputs = {name: value.numpy() for name, value in self._outputs(
        {n: tf.constant(v) for n, v in prepared.items()}).items()}
    p_z, p_y = np.exp(outputs["log_p_z"]), np.exp(outputs["log_p_y"])
    results = []
    for b, text in enumerate(texts):
      label = int(np.argmax(p_y[b]))
      p_label = np.exp(outputs["log_p_y_given_z"][b, :, label])
      evidence = [Evidence(int(self.corpus.block_ids[row]) if row >= 0 else NULL_ROW, *read)
                  for row, *read in ranked_evidence(prepared["rows"][b], p_z[b], p_label,
                                                    self.corpus.titles, self.corpus.texts)]
      results.append(Classification(
          text, self.labels[label], float(p_y[b, label]),
          {name: float(p_y[b, c]) for c, name in enumerate(self.labels)}, evidence))
    return results

