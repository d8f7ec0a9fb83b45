"""The configuration of an Open-QA fine-tuning run (`realm_tf.qa.finetune_lib`)."""
import dataclasses
from typing import Optional

from realm_tf.mips.index_builder import ScannSettings
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.qa import datasets
from realm_tf.training.optimizer import OptimizerConfig


@dataclasses.dataclass(frozen=True)
class FineTuneConfig:
  """Open-QA fine-tuning.

  Attributes:
    model_dir: checkpoints, the doc index and `best/` are written here.
    corpus: the knowledge corpus (`realm_tf.retrieval.corpus.Corpus.load`).
    train_data: training questions (`realm_tf.qa.datasets.load_examples`).
    vocab_file: the wordpiece vocabulary of the pre-trained model.
    dev_data: dev questions for model selection ("" : none; `best/` is then the last step).
    dataset: "nq", "wq" or "curatedtrec" (string or regex answers).
    model: sizes and lengths.
    init: the pre-trained weights.
    batch_size: B, questions per step (global, across replicas).
    num_train_steps, learning_rate, warmup_steps: the schedule (docs/training.md, "Optimizer"); 0
      steps writes the pre-trained model as a QA model directory (evaluated on dev when given:
      the "before fine-tuning" figures).
    retriever_learning_rate: the query tower's peak learning rate (None: `learning_rate`);
      its own AdamW, so that the tower that must not forget its retrieval geometry can move
      slower than the reader, which learns its span head from scratch.
    reader_top_k: k, blocks read per question (5).
    retriever_top_k: K, blocks in the retriever loss (reference 5000; capped at N).
    max_gold_spans: A, gold spans kept per block.
    index_kind: "scann" or "brute_force".
    scann: the ScaNN settings of a "scann" index (`realm_tf.mips.index_builder`).
    index_refresh_steps: 0 (default): the index is built once and frozen; > 0: refresh it
      every that many steps (see the module docstring).
    eval_every_steps, eval_max_examples: dev evaluation cadence and size (0: all).
    checkpoint_every_steps, keep_checkpoints: checkpoint cadence and how many to keep.
    log_every_steps: cadence of the one-line progress messages (every step's metrics go to
      `metrics.jsonl` and TensorBoard).
    seed: shuffling and initialisation seed.
    compute_dtype: precision of the towers' and reader's matmuls ("float32", "bfloat16": Keras
      mixed_bfloat16 with float32 variables, or "auto": `models.precision`); the losses, the
      retriever scores stay float32.
    embedding_dtype: precision of the doc tower that embeds the doc index (and of its export)
      ("float32", "bfloat16" or "auto"), recorded in the index manifest's metadata.
  """
  model_dir: str
  corpus: str
  train_data: str
  vocab_file: str
  dev_data: str = ""
  dataset: str = "nq"
  model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
  init: InitConfig = dataclasses.field(default_factory=InitConfig)
  batch_size: int = 4
  num_train_steps: int = 10000
  learning_rate: float = 1e-5
  retriever_learning_rate: Optional[float] = None
  warmup_steps: Optional[int] = None
  reader_top_k: int = 5
  retriever_top_k: int = 5000
  max_gold_spans: int = 32
  index_kind: str = "scann"
  scann: ScannSettings = ScannSettings()
  index_refresh_steps: int = 0
  eval_every_steps: int = 1000
  eval_max_examples: int = 0
  checkpoint_every_steps: int = 1000
  keep_checkpoints: int = 3
  log_every_steps: int = 100
  seed: int = 0
  compute_dtype: str = "float32"
  embedding_dtype: str = "float32"

  def __post_init__(self):
    if self.num_train_steps < 0:
      raise ValueError(f"num_train_steps must be >= 0, got {self.num_train_steps}")
    for name in ("batch_size", "reader_top_k", "retriever_top_k",
                 "max_gold_spans", "eval_every_steps", "checkpoint_every_steps",
                 "keep_checkpoints", "log_every_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.retriever_learning_rate is not None and self.retriever_learning_rate < 0:
      raise ValueError(f"retriever_learning_rate must be >= 0, got "
                       f"{self.retriever_learning_rate}")
    if self.retriever_top_k < self.reader_top_k:
      raise ValueError(f"retriever_top_k {self.retriever_top_k} must be >= reader_top_k "
                       f"{self.reader_top_k}")
    if self.index_refresh_steps < 0:
      raise ValueError(f"index_refresh_steps must be >= 0, got {self.index_refresh_steps}")
    if self.index_refresh_steps and self.init.checkpoint and not (
        self.init.checkpoint_share_towers):
      raise ValueError("index refresh snapshots the query tower into the doc tower, which "
                       "needs a pre-trained retriever with shared towers")
    datasets.dataset_spec(self.dataset)

  def optimizer_config(self, tower: str = "reader") -> OptimizerConfig:
    """The schedule of the "reader" or the "retriever" (query tower) optimizer."""
    rate = self.learning_rate
    if tower == "retriever" and self.retriever_learning_rate is not None:
      rate = self.retriever_learning_rate
    return OptimizerConfig(learning_rate=rate, num_train_steps=max(1, self.num_train_steps),
                           warmup_steps=self.warmup_steps)
