"""The served model, loaded at start: a QA model (`AskService`, an `Asker`) or a classification
run (`ClassifyService`, a `ClassificationModel`), answering batches of texts.

`answer_batch(texts [B], top_k)` runs one retrieval and one reader pass over the B texts
(`RetrieveAndRead.answer`, the path of `realm-ask`; `ClassificationModel.classify`, that of
the classification evaluation), reading `top_k` blocks each; `kind` is "qa" or
"classification"; `info()` names the kind, the model, its corpus and its index.
"""
import os
from typing import Any, Dict, List, Sequence

from realm_tf.errors import InputError
from realm_tf.errors import describe
from realm_tf.errors import one_line


class AskService:
  """A loaded QA model.

  Args:
    asker: a `realm_tf.qa.ask_lib.Asker`.
    batch_size: most questions per forward pass.
  """

  kind = "qa"

  def __init__(self, asker, batch_size: int = 16):
    self.asker, self.batch_size = asker, int(batch_size)
    self.model = asker.model

  @classmethod
  def load(cls, model_dir: str, corpus: str = "", embeddings_dir: str = "", k: int = 5,
           index_kind: str = "", batch_size: int = 16, scann=None,
           embedding_dtype: str = "float32", released=None, sharding=None,
           compute_dtype: str = "float32") -> "AskService":
    """Loads a model directory as `realm-ask` does; `scann`, `sharding`: the `ScannSettings`
    and `Sharding` of an index built for `corpus` (default: the automatic rules);
    `embedding_dtype`: the precision `corpus` is embedded in; `released`: the
    `ReleasedSettings` of a released model's import; `compute_dtype`: the precision the query
    tower and the reader answer in.

    Raises:
      InputError: the directory (or the corpus) does not load; the message says why.
    """
    # pylint: disable=g-import-not-at-top (TensorFlow)
    from realm_tf.mips.index_builder import ScannSettings
    from realm_tf.mips.index_builder import Sharding
    from realm_tf.qa import ask_lib
    from realm_tf.qa.released_imports import ReleasedSettings
    try:
      asker = ask_lib.Asker(model_dir, corpus, embeddings_dir, k, index_kind,
                            scann or ScannSettings(), sharding or Sharding(), embedding_dtype,
                            released or ReleasedSettings(), compute_dtype)
    except Exception as e:  # pylint: disable=broad-except
      problem = f"does not load as a QA model ({one_line(e).rstrip('.')})"
      raise InputError(describe(model_dir or "--model_dir", problem, "Pass --model_dir=<a "
                                "directory written by realm-finetune>")) from e
    return cls(asker, batch_size)

  @property
  def num_blocks(self) -> int:
    return len(self.model.corpus)

  @property
  def default_top_k(self) -> int:
    return self.asker.system.k

  def answer_batch(self, questions: Sequence[str], top_k: int) -> List[Any]:
    """`Answer`s of the questions, each read from its `top_k` best blocks."""
    return self.model.system(k=top_k, batch_size=self.batch_size).answer(questions)

  def info(self) -> Dict[str, Any]:
    """The model, corpus and index identity (`GET /v1/info`)."""
    info, index = self.model.info, self.model.doc_index
    return {
        "kind": self.kind,
        "model_dir": os.path.abspath(self.model.directory),
        "step": info.step,
        "config": info.model.to_dict(),
        "metrics": info.metrics,
        "corpus": {"source": self.model.corpus.source,
                   "fingerprint": self.model.corpus.fingerprint,
                   "num_blocks": self.num_blocks},
        "index": {"version": f"{index.kind}@{index.snapshot_step}:{index.corpus_fingerprint[:12]}",
                  "kind": index.kind, "snapshot_step": index.snapshot_step,
                  "corpus_fingerprint": index.corpus_fingerprint, "dim": index.dim},
        "default_top_k": self.default_top_k,
        "compute_dtype": self.model.reader.encoder.compute_dtype,
    }


class ClassifyService:
  """A loaded classification run, `model` (a `classification.model.ClassificationModel`),
  classifying at most `batch_size` texts per forward pass."""

  kind = "classification"

  def __init__(self, model, batch_size: int = 16):
    self.model, self.batch_size = model, int(batch_size)

  @classmethod
  def load(cls, model_dir: str, corpus: str = "", batch_size: int = 16) -> "ClassifyService":
    """Loads a classification run's directory (`ClassificationModel.load`; `corpus`: another
    knowledge corpus).

    Raises:
      InputError: the directory (or the corpus) does not load; the message says why.
    """
    # pylint: disable=g-import-not-at-top (TensorFlow)
    from realm_tf.classification.model import ClassificationModel
    try:
      model = ClassificationModel.load(model_dir, corpus)
    except Exception as e:  # pylint: disable=broad-except
      problem = f"does not load as a classification run ({one_line(e).rstrip('.')})"
      raise InputError(describe(model_dir, problem, "Pass --model_dir=<the trainer.model_dir "
                                "of realm-train --experiment=classification>")) from e
    return cls(model, batch_size)

  @property
  def num_blocks(self) -> int:
    """Blocks a request may read: the corpus's (0 for a run without retrieval)."""
    return 0 if self.model.block_index is None else len(self.model.corpus)

  @property
  def default_top_k(self) -> int:
    return self.model.default_k

  def answer_batch(self, texts: Sequence[str], top_k: int) -> List[Any]:
    """`Classification`s of the texts, each reading its `top_k` best blocks."""
    return [result for begin in range(0, len(texts), self.batch_size)
            for result in self.model.classify(texts[begin:begin + self.batch_size], top_k)]

  def info(self) -> Dict[str, Any]:
    """The kind, model, labels and corpus (`GET /v1/info`)."""
    model = self.model
    return {"kind": self.kind, "model_dir": os.path.abspath(model.directory),
            "step": model.step, "config": model.config.to_dict(), "labels": list(model.labels),
            "retrieval": model.settings.retrieval,
            "corpus": {"source": model.corpus.source, "fingerprint": model.corpus.fingerprint,
                       "num_blocks": len(model.corpus)},
            "default_top_k": self.default_top_k}
