"""The demo's settings and errors (no TensorFlow: `realm-demo --help` reads them)."""
import dataclasses
from typing import Any, Dict, Optional, Tuple

from realm_tf import errors

# Settings that may change between a run and its resumption.
_RESUMABLE_CHANGES = ("output_dir", "questions", "pipeline_options")


class DemoError(errors.InputError):
  """A demo run that cannot go on as asked; the message says what to do."""


class InvalidConfigError(DemoError, ValueError):
  """A `DemoConfig` with impossible settings."""


class MissingDataError(DemoError, FileNotFoundError):
  """A data package the demo reads is not installed; the message is the pip command."""


@dataclasses.dataclass(frozen=True)
class DemoConfig:
  """The demo's settings; every size scales a stage. A REALM step reads K = 8 blocks per
  masked sentence (5-10 s for 2 sentences with MiniLM on 2 CPU cores), so by default
  pre-training gets few steps and fine-tuning, which the dev figures measure, most of the time.

  Attributes:
    output_dir: everything is written here.
    num_docs: Wikipedia articles indexed (0: all 10,033).
    encoder: "minilm_l6" (all-MiniLM-L6-v2 weights) or "tiny" (random, for tests).
    block_length: wordpieces of a block `[CLS] title [SEP] body [SEP]`.
    query_length: wordpieces of a query `[CLS] x [SEP]` (ICT, pre-training, questions); the
      reader reads query_length + block_length.
    dev_percent: share of the answerable questions held out for dev (by hash).
    eval_questions: dev questions evaluated (0: all).
    ict_steps, ict_batch_size, ict_learning_rate: ICT (in-batch negatives).
    mlm_warmup_steps: MLM-head warm-up of the MiniLM reader on the corpus blocks before REALM
      (`training.mlm_warmup`; MiniLM has no MLM head; 0: none).
    pretrain_steps, pretrain_batch_size, pretrain_learning_rate, num_candidates: REALM
      pre-training, with `refresh_every` (K candidates with the null document; a doc-embedder
      snapshot for the asynchronous index builder every `refresh_every` steps).
    finetune_steps, finetune_batch_size, finetune_learning_rate, retriever_top_k: Open-QA
      fine-tuning (10% warm-up; the retriever loss over the top `retriever_top_k` blocks);
      `finetune_learning_rate` is the reader's peak rate.
    finetune_retriever_learning_rate: the query tower's peak rate in fine-tuning (None:
      `finetune_learning_rate`).
    finetune_reader_top_k: blocks the reader reads per training question (0: `k`); evaluation,
      the export and `ask` read `k`.
    read_answer_block: fine-tuning's reader also reads the best answer-bearing block of the
      top `retriever_top_k` when none of the top k holds an answer (`task.read_answer_block`).
    k: blocks read per question, and in the export.
    questions: questions to ask at the end (empty: the first dev questions).
    num_asked: dev questions asked when `questions` is empty.
    pipeline_options: Beam options of the corpus pipelines (default: DirectRunner).
    seed: initialisation and data order.
  """
  output_dir: str = "results/demo"
  num_docs: int = 1000
  encoder: str = "minilm_l6"
  block_length: int = 128
  query_length: int = 64
  dev_percent: int = 20
  eval_questions: int = 80
  ict_steps: int = 20
  ict_batch_size: int = 16
  ict_learning_rate: float = 1e-4
  mlm_warmup_steps: int = 20
  pretrain_steps: int = 24
  pretrain_batch_size: int = 2
  pretrain_learning_rate: float = 3e-5
  num_candidates: int = 8
  refresh_every: int = 8
  finetune_steps: int = 48
  finetune_batch_size: int = 4
  finetune_learning_rate: float = 5e-5
  finetune_retriever_learning_rate: Optional[float] = None
  retriever_top_k: int = 5000
  finetune_reader_top_k: int = 0
  read_answer_block: bool = False
  k: int = 5
  questions: Tuple[str, ...] = ()
  num_asked: int = 3
  pipeline_options: str = ""
  seed: int = 0

  def __post_init__(self):
    if self.encoder not in ("minilm_l6", "tiny"):
      raise InvalidConfigError(f"encoder must be 'minilm_l6' or 'tiny', got {self.encoder!r}")
    for name in ("ict_steps", "pretrain_steps", "finetune_steps", "ict_batch_size",
                 "pretrain_batch_size", "finetune_batch_size", "k", "refresh_every"):
      if getattr(self, name) < 1:
        raise InvalidConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
    for name in ("mlm_warmup_steps", "finetune_reader_top_k"):
      if getattr(self, name) < 0:
        raise InvalidConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
    if not 0 < self.dev_percent < 100:
      raise InvalidConfigError(f"dev_percent must be in 1..99, got {self.dev_percent}")
    if self.query_length + self.block_length > 512:
      raise InvalidConfigError(f"query_length + block_length (the reader's input) must be <= 512 "
                               f"BERT positions, got {self.query_length + self.block_length}")
    if (self.finetune_retriever_learning_rate is not None
        and self.finetune_retriever_learning_rate < 0):
      raise InvalidConfigError(f"finetune_retriever_learning_rate must be >= 0, got "
                               f"{self.finetune_retriever_learning_rate}")
    if self.retriever_top_k < max(self.k, self.finetune_reader_top_k):
      raise InvalidConfigError(f"retriever_top_k {self.retriever_top_k} must be >= k {self.k} "
                               f"and finetune_reader_top_k {self.finetune_reader_top_k}")

  def settings(self) -> Dict[str, Any]:
    """What a resumed run must share with the run it resumes."""
    return {k: v for k, v in dataclasses.asdict(self).items() if k not in _RESUMABLE_CHANGES}
