"""The experiment config tree: an `ExperimentConfig` is runtime / trainer / task.

`runtime` says where and how the step runs, `trainer` is the loop's schedule
(`training.train_loop.TrainLoop`), `task` an `IctTaskConfig`, `PretrainTaskConfig`,
`OpenQATaskConfig` or `ClassificationTaskConfig` (data, model, initial weights and the task's
own settings). The tasks of
`realm_tf.experiments` build it (their registered experiments hold the defaults of `realm-ict`,
`realm-pretrain` and `realm-finetune`) and `training.ict_lib.train_ict`,
`training.pretraining_lib.RealmPretrainer` and `qa.finetune_lib.FineTuner` take it.

It sits outside `realm_tf.experiments`, below `training` and `qa`, so that those libraries
import it without a cycle. The configs are plain frozen dataclasses, not Model Garden's
`hyperparams.Config` (docs/decisions.md).
"""
import dataclasses
from typing import Optional, Tuple, Union

from realm_tf.evaluation.qa_example import dataset_spec
from realm_tf.losses.mlm_marginal_likelihood import MLM_LOSS_FORMS
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.retrieval.embedding_file import check_storage_dtype

EXPERIMENT_FILE = "experiment.json"  # a run's resolved config, in its model directory


@dataclasses.dataclass(frozen=True)
class RuntimeConfig:
  """Where the step runs.

  Attributes:
    strategy: "default", "mirrored", "multi_worker_mirrored" or "tpu" (`realm_tf.distribute`).
    tpu: the TPU address of strategy "tpu".
    num_cpu_devices: split the CPU into this many logical devices (0: no split).
    seed: initialisers and data order.
    compute_dtype: the training step's matmuls: "auto", "float32" or "bfloat16"
      (`models.precision`; variables, scores and losses stay float32).
  """
  strategy: str = "default"
  tpu: str = ""
  num_cpu_devices: int = 0
  seed: int = 0
  compute_dtype: str = "auto"


@dataclasses.dataclass(frozen=True)
class TrainerConfig:
  """The loop's schedule (`TrainLoop`), shared by every task.

  Attributes:
    model_dir: checkpoints, `metrics.jsonl`, summaries, `experiment.json` and the task's
      outputs.
    num_steps: training steps (Open-QA: 0 writes the initialisation as a QA model, evaluated
      on dev when given: the "before fine-tuning" figures).
    batch_size: global batch, across replicas.
    learning_rate: peak learning rate (`training.optimizer`; docs/training.md, "Optimizer").
    retriever_learning_rate: Open-QA's query-tower peak rate (None: `learning_rate`), its own
      AdamW, so that the tower that must not forget its retrieval geometry can move slower
      than the reader, which learns its span head from scratch.
    warmup_steps: linear warm-up (None: min(10000, max(100, num_steps / 10))).
    checkpoint_every, keep_checkpoints: checkpoint cadence and how many are kept.
    eval_every, eval_max_examples: the dev evaluation's cadence and size (0: all): Open-QA's
      exact match and recall@k, ICT's and pre-training's recall@k (`task.dev_data`).
    log_every: Open-QA's one-line progress cadence (every step's metrics go to
      `metrics.jsonl` and TensorBoard).
  """
  model_dir: str = ""
  num_steps: int = 1000
  batch_size: int = 32
  learning_rate: float = 1e-4
  retriever_learning_rate: Optional[float] = None
  warmup_steps: Optional[int] = None
  checkpoint_every: int = 100
  keep_checkpoints: int = 3
  eval_every: int = 1000
  eval_max_examples: int = 0
  log_every: int = 100

  def __post_init__(self):
    if self.num_steps < 0:
      raise ValueError(f"num_steps must be >= 0, got {self.num_steps}")
    for name in ("batch_size", "eval_every", "checkpoint_every", "keep_checkpoints",
                 "log_every"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.retriever_learning_rate is not None and self.retriever_learning_rate < 0:
      raise ValueError(f"retriever_learning_rate must be >= 0, got "
                       f"{self.retriever_learning_rate}")


@dataclasses.dataclass(frozen=True)
class IctTaskConfig:
  """ICT warm-start of the retriever (`training.ict_lib`).

  Attributes:
    corpus: directory of blocks-*.tfrecord shards.
    vocab_file: the wordpieces ("": MiniLM's uncased vocabulary); it decides
      `model.encoder.vocab_size`.
    model: the retriever's BERT, head ("auto": the head of `init.bert_weights`), projection
      size and the query / block lengths.
    init: `bert_weights` of new towers ('minilm', HF safetensors, a TF1 BERT ckpt or 'random').
    share_towers: one BERT for queries and blocks.
    remove_prob: probability of removing the pseudo-query from its block.
    dev_data: held-out questions (ORQA JSONL, DPR TSV or pyserini:<name>; never a test set):
      their recall@5 and @20 over the whole corpus are measured at the start and every
      `trainer.eval_every` steps (`eval.jsonl`), the best checkpoint is kept in `best/` and
      the retriever written at the end is the best one ("": no evaluation).
  """
  corpus: str = ""
  vocab_file: str = ""
  model: ModelConfig = ModelConfig(retriever_head="auto")
  init: InitConfig = InitConfig(bert_weights="minilm")
  share_towers: bool = True
  remove_prob: float = 0.9
  dev_data: str = ""


@dataclasses.dataclass(frozen=True)
class PretrainTaskConfig:
  """REALM pre-training with a refreshed MIPS index (`training.pretraining_lib`).

  Attributes:
    corpus, examples_dir: blocks-*.tfrecord and examples-*.tfrecord directories.
    allow_unverified_examples: read examples shards without a manifest (uncounted) instead
      of refusing them.
    vocab_file, model: as `IctTaskConfig` (the reader shares the retriever's BERT size).
    init: `checkpoint`: the previous stage's model directory (an ICT run's `retriever/`, a
      pre-training run's `retriever/` and `reader/`); `bert_weights` of the towers it does
      not hold.
    retriever_dir, reader_dir: saved towers to start from, instead of `init.checkpoint`'s.
    reader_seed: the initialiser seed of a new reader (none saved), set just before it is
      built: the same reader initialisation whatever the retriever and `runtime.seed` (the
      knowledge-world ablations' readers); None: the stream `runtime.seed` starts before the
      retriever is built.
    share_towers: one BERT for queries and blocks (new retrievers).
    num_candidates, null_document, exclude_source: K candidates, the null document among
      them, the query's own block dropped.
    masking: "salient_span", "random_span", "random_token" or "spanbert"
      (`training.pretraining_data`).
    mlm_loss: "sequence" (the paper: one document explains all the masks of x) or "token"
      (each masked token marginalised over the candidates on its own, as the released code
      computes it), `losses.mlm_marginal_likelihood`. "sequence" is the default: better on
      the knowledge world, a tie on real data (BENCHMARKS.md §18).
    max_predictions: masked positions per query.
    reader_warmup_steps: the first steps train the reader alone; the retriever stays at its
      warm start (its gradient is zeroed: Adam's update is zero, only AdamW's decoupled weight
      decay, lr x 0.01 of each weight per step, still applies). While the reader cannot yet
      use a block, p(y|z,x) hardly depends on z, the retriever gradient p(z|y,x) - p(z|x) is
      noise, and Adam's normalised steps turn that noise into full-size updates that erode
      the ICT retriever (the paper's cold-start problem, on the reader's side). 0: joint from
      step 0.
    mlm_warmup_steps: steps of masked-LM warm-up of the reader (its MLM head and BERT) on the
      corpus blocks before REALM (`training.mlm_warmup`, in `<model_dir>/mlm_warmup`), for a
      new reader whose `init.bert_weights` have no MLM head (all-MiniLM-L6-v2): without it
      REALM starts with an untrained head (MLM accuracy 0). 300: where MiniLM's held-out MLM
      accuracy levels off (0.17, BENCHMARKS.md §11). Skipped for a saved reader and for
      weights with a head (Google BERT, REALM); 0: never.
    refresh: "async" (a background index builder) or "sync".
    refresh_every: steps between doc-embedder snapshots / index rebuilds.
    index_kind, scann, sharding: the MIPS index, its ScaNN settings and its shard size.
    builder_args: extra flags for the asynchronous index builder (e.g. a Beam runner).
    max_builder_failures: index builds that may fail in a row before training stops.
    max_index_staleness: with "async", the most steps the index in use may lag training
      while a newer build is running or pending: training waits for it beyond that
      (`retrieval.async_refresh`); 0: unbounded.
    keep_indexes: index versions kept.
    embedding_dtype, embedding_jit_compile: the doc tower's precision and XLA when embedding
      the corpus.
    dev_data: as `IctTaskConfig` (recall through the index the trainer searches).
  """
  corpus: str = ""
  examples_dir: str = ""
  allow_unverified_examples: bool = False
  vocab_file: str = ""
  model: ModelConfig = ModelConfig(retriever_head="auto", query_length=96)
  init: InitConfig = InitConfig(bert_weights="minilm")
  retriever_dir: str = ""
  reader_dir: str = ""
  reader_seed: Optional[int] = None
  share_towers: bool = True
  num_candidates: int = 8
  null_document: bool = True
  exclude_source: bool = True
  masking: str = "salient_span"
  mlm_loss: str = "sequence"
  max_predictions: int = 10
  reader_warmup_steps: int = 0
  mlm_warmup_steps: int = 300
  refresh: str = "async"
  refresh_every: int = 500
  index_kind: str = "scann"
  scann: ScannSettings = ScannSettings()
  sharding: Sharding = Sharding()
  builder_args: Tuple[str, ...] = ()
  max_builder_failures: int = 2
  max_index_staleness: int = 0
  keep_indexes: int = 3
  embedding_dtype: str = "auto"
  embedding_jit_compile: bool = False
  dev_data: str = ""

  def __post_init__(self):
    if self.refresh not in ("async", "sync"):
      raise ValueError(f"refresh must be 'async' or 'sync', got {self.refresh!r}")
    if self.max_index_staleness < 0:
      raise ValueError(f"max_index_staleness must be >= 0 (0: unbounded), got "
                       f"{self.max_index_staleness}")
    if self.mlm_loss not in MLM_LOSS_FORMS:
      raise ValueError(f"mlm_loss must be one of {MLM_LOSS_FORMS}, got {self.mlm_loss!r}")


@dataclasses.dataclass(frozen=True)
class OpenQATaskConfig:
  """Open-QA fine-tuning (`qa.finetune_lib`).

  Attributes:
    corpus: the knowledge corpus: blocks-*.tfrecord directory, JSONL or DPR TSV.
    train_data, dev_data: questions (ORQA JSONL, DPR TSV or pyserini:<name>); dev: model
      selection ("": none; `best/` is then the last step).
    vocab_file: as `IctTaskConfig` ("": MiniLM's uncased vocabulary).
    dataset: "nq", "wq" or "curatedtrec" (string or regex answers).
    model: the three towers; `retriever_head` "auto": the head of `init.checkpoint`'s run,
      else of `init.bert_weights`.
    init: the pre-trained weights; `checkpoint` may be a REALM pre-training model directory,
      or an Open-QA model directory (fine-tuning goes on from its last checkpoint);
      `bert_weights` ('minilm' as in ICT and pre-training) fill the towers nothing else does.
    reader_top_k, retriever_top_k, max_gold_spans: k blocks read, K in the retriever loss
      (reference 5000; capped at the corpus size), A gold spans per block.
    read_answer_block: in training, when none of the top k holds an answer, the reader reads
      the best answer-bearing block of the top K instead of the k-th (DPR's reader training:
      supervision for every question the top K answers; False: REALM's and ORQA's top k).
    index_kind, scann, sharding: the document index ("scann" or "brute_force"), ScaNN's
      settings and the index's shard size.
    index_refresh_steps: refresh the index every that many steps (0: frozen). Without
      `train_doc_tower` the doc tower becomes a copy of the query tower first (what shared
      towers would hold; needs a pre-trained retriever with shared towers).
    train_doc_tower: the doc tower trains too (the patent's fine-tuning variant; REALM and
      ORQA freeze it): the k blocks read (and the null document) are re-embedded by it in the
      step, so their f(x, z) is fresh and has its gradient, as in pre-training; the index is
      refreshed from the doc tower itself.
    refresh: "sync" (the trainer rebuilds the index, `retrieval.index_refresh`) or "async"
      (a doc-embedder snapshot every `index_refresh_steps`, built by the index-builder
      process while training goes on, swapped in when published,
      `retrieval.async_refresh`; needs `train_doc_tower`).
    builder_args, max_builder_failures, max_index_staleness: the asynchronous builder's
      extra flags, the failed builds in a row that stop training, and the bounded staleness
      (as `PretrainTaskConfig`'s).
    null_document: the null document (an empty block) first among the K scored and the k
      read, as the patent's fine-tuning allows (REALM's pre-training always has it).
    embedding_dtype: the doc tower's precision when embedding the index (and of its
      export), recorded in the index manifest's metadata.
    embedding_storage_dtype: "float32", "bfloat16" or "float16": the dtype the index's block
      embeddings are stored in (`retrieval.embedding_file`; 4, 2 or 2 bytes per value),
      recorded in the index manifest's metadata.
    allow_unanswerable: train even when no training question has an answer in the corpus
      (refused otherwise: nothing can be learned); the knowledge-world ablation's no-retrieval
      baseline reads a corpus of one empty block on purpose.
  """
  corpus: str = ""
  train_data: str = ""
  dev_data: str = ""
  vocab_file: str = ""
  dataset: str = "nq"
  model: ModelConfig = ModelConfig(retriever_head="auto")
  init: InitConfig = InitConfig(bert_weights="minilm")
  reader_top_k: int = 5
  retriever_top_k: int = 5000
  max_gold_spans: int = 32
  read_answer_block: bool = False
  index_kind: str = "scann"
  scann: ScannSettings = ScannSettings()
  sharding: Sharding = Sharding()
  index_refresh_steps: int = 0
  train_doc_tower: bool = False
  refresh: str = "sync"
  builder_args: Tuple[str, ...] = ()
  max_builder_failures: int = 2
  max_index_staleness: int = 0
  null_document: bool = False
  embedding_dtype: str = "auto"
  embedding_storage_dtype: str = "float32"
  allow_unanswerable: bool = False

  def __post_init__(self):
    check_storage_dtype(self.embedding_storage_dtype)
    for name in ("reader_top_k", "retriever_top_k", "max_gold_spans"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
    if self.retriever_top_k < self.reader_top_k:
      raise ValueError(f"retriever_top_k {self.retriever_top_k} must be >= reader_top_k "
                       f"{self.reader_top_k}")
    if self.index_refresh_steps < 0:
      raise ValueError(f"index_refresh_steps must be >= 0, got {self.index_refresh_steps}")
    if self.refresh not in ("async", "sync"):
      raise ValueError(f"refresh must be 'async' or 'sync', got {self.refresh!r}")
    if self.max_index_staleness < 0:
      raise ValueError(f"max_index_staleness must be >= 0 (0: unbounded), got "
                       f"{self.max_index_staleness}")
    if self.refresh == "async" and not self.train_doc_tower:
      raise ValueError("an asynchronous index refresh needs train_doc_tower (a frozen doc "
                       "tower is refreshed by copying the query tower, synchronously)")
    if self.index_refresh_steps and not self.train_doc_tower and self.init.checkpoint and not (
        self.init.checkpoint_share_towers):
      raise ValueError("index refresh snapshots the query tower into the doc tower, which "
                       "needs a pre-trained retriever with shared towers")
    dataset_spec(self.dataset)


CLASSIFICATION_RETRIEVALS = ("dense", "bm25", "none")


@dataclasses.dataclass(frozen=True)
class ClassificationTaskConfig:
  """Retrieval-augmented classification (`classification.trainer`): p(y|x) = Σ_z p(z|x)
  p(y|z,x) over the top k blocks and the null document.

  Attributes:
    corpus: the knowledge corpus (blocks-*.tfrecord directory, JSONL or DPR TSV).
    train_data, dev_data: JSONL `{"text": ..., "label": ...}`; dev: evaluation every
      `trainer.eval_every` steps and at the end, its predictions with their evidence in
      `<model_dir>/predictions.jsonl` ("": none; `best/` is then the last step).
    labels: the label set, in order ((): the sorted labels of `train_data`).
    vocab_file, model, init: as `OpenQATaskConfig` (`init.checkpoint`: a REALM pre-training
      or ICT model directory).
    reader_top_k: k blocks read per text (the null document comes on top).
    retrieval: the k blocks' source: "dense" (the query tower's MIPS search over the frozen
      doc tower's index), "bm25" (BM25 picks them, the query tower still weighs them) or
      "none" (the null document alone: the reader without retrieval).
    null_document: the null document (an empty block) among the blocks read (needed by
      "bm25" and "none").
    index_kind: the document index, "brute_force" or "scann".
    head_dropout: dropout on the reader's [CLS] vector before the classification head.
  """
  corpus: str = ""
  train_data: str = ""
  dev_data: str = ""
  labels: Tuple[str, ...] = ()
  vocab_file: str = ""
  model: ModelConfig = ModelConfig(retriever_head="auto")
  init: InitConfig = InitConfig()
  reader_top_k: int = 5
  retrieval: str = "dense"
  null_document: bool = True
  index_kind: str = "brute_force"
  head_dropout: float = 0.1

  def __post_init__(self):
    if self.reader_top_k < 1:
      raise ValueError(f"reader_top_k must be >= 1, got {self.reader_top_k}")
    if self.retrieval not in CLASSIFICATION_RETRIEVALS:
      raise ValueError(f"retrieval must be one of {CLASSIFICATION_RETRIEVALS}, got "
                       f"{self.retrieval!r}")
    if self.retrieval != "dense" and not self.null_document:
      raise ValueError(f"retrieval {self.retrieval!r} needs null_document (BM25 finds no block "
                       f"for a text sharing no term with the corpus; 'none' reads it alone)")
    if not 0 <= self.head_dropout < 1:
      raise ValueError(f"head_dropout must be in [0, 1), got {self.head_dropout}")
    if len(set(self.labels)) != len(self.labels) or len(self.labels) == 1:
      raise ValueError(f"labels must be >= 2 distinct names (or none), got {self.labels}")


TaskConfig = Union[IctTaskConfig, PretrainTaskConfig, OpenQATaskConfig,
                   ClassificationTaskConfig]


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """One run: `runtime`, `trainer` and the `task` (whose type names the task)."""
  task: TaskConfig
  trainer: TrainerConfig = TrainerConfig()
  runtime: RuntimeConfig = RuntimeConfig()
