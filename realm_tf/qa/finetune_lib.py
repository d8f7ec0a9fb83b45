"""Open-QA fine-tuning (REALM §3.4 / ORQA): query tower + reader on a frozen document index.

Legend: B questions per batch, K blocks scored by the retriever loss (reference: 5000),
k blocks read (5), Lq / Lr query / reader length, S spans, A gold spans, N blocks, D dim.

Per step:
1. Host, outside the replicated step: the current query tower embeds the B questions
   (no dropout), the MIPS index returns their top-K corpus rows; `has_answer` [B, K] is
   computed on the block texts with `realm_tf.evaluation.has_answer` (what evaluation's
   recall@k uses); the top-k blocks are packed as reader inputs `[CLS] x [SEP] z_body [SEP]`
   (`Featurizer`, the inference featurization) and every occurrence of an answer's
   wordpieces in a block body becomes a gold span [B, k, A] (`supervision.gold_spans`).
2. Replicated step (`tf.distribute`): the query tower re-embeds the questions with dropout;
   retriever logits f(x, z) [B, K] are inner products with the block embeddings, gathered
   in-graph from the frozen [N, D] matrix the index was built from (the doc tower is not
   trained, so they are exact); the reader scores all spans of the k blocks [B, k, S];
   `open_qa_loss` (retriever marginal over K + reader marginal over k x S, each zero without
   a correct candidate) is minimised with AdamW (`training.optimizer.create_optimizer`).
3. Every `eval_every_steps`: dev exact match; the best checkpoint is copied to
   `<model_dir>/best/`. Checkpoints (model + optimizer + step) go through
   `tf.train.CheckpointManager`, and a restarted job resumes from the latest.
4. TensorBoard (`<model_dir>/train/`): every step `train/loss` (and the step's other
   statistics), `train/learning_rate`, `train/index_version` (the step of the doc tower the
   index was built from) and `train/index_staleness`; at every evaluation `eval/exact_match`
   and `eval/recall@k`. `train_log.jsonl` gets one record per `log_every_steps`.

Index refresh (`index_refresh_steps > 0`, off by default; the paper's footnote 3 suggests it
may help): every that many steps the doc tower becomes a snapshot of the current query tower
(as REALM's shared towers would be), the corpus is re-embedded through a fresh doc-embedder
export and the index and block-embedding matrix are swapped in, synchronously. It needs a
pre-trained retriever with shared towers.

Several workers (MultiWorkerMirroredStrategy): every worker prepares the same global batch
(step 1) and its replicas train on their rows of it, so a step is the single-worker step; the
chief writes the model directory, the other workers the same files into a scratch directory
(`distribute.output_dir`; each builds its own copy of the index from the same doc tower), and
every worker resumes from the chief's checkpoints. A worker that dies makes the others fail
with `distribute.WorkerLostError`.

Model directory layout: see `realm_tf.qa.model`.
"""
import dataclasses
import json
import os
import re
import time
from typing import Callable, Dict, List, Optional

from absl import logging
import numpy as np
import tensorflow as tf

from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.keras import keras
from realm_tf.layers.span_scorer import masked_logit_value
from realm_tf.losses.open_qa_loss import correct_spans
from realm_tf.losses.open_qa_loss import open_qa_loss
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.models import precision
from realm_tf.qa import datasets
from realm_tf.qa.corpus import load_corpus
from realm_tf.qa.corpus import write_corpus_jsonl
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.doc_index import embedding_tolerance
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.model import InitConfig
from realm_tf.qa.model import ModelConfig
from realm_tf.qa.model import ModelInfo
from realm_tf.qa.model import VOCAB
from realm_tf.qa.model import CORPUS
from realm_tf.qa.model import MODEL_INFO
from realm_tf.qa.model import build_models
from realm_tf.qa.model import initialize
from realm_tf.qa.model import make_system
from realm_tf.qa.model import model_checkpoint
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.signatures.doc_embedder import export_doc_embedder
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.training import distribute
from realm_tf.training import run_config
from realm_tf.training.optimizer import OptimizerConfig
from realm_tf.training.optimizer import apply_gradients
from realm_tf.training.optimizer import create_optimizer
from realm_tf.qa.supervision import gold_spans
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_READER_FEATURES = ("input_word_ids", "input_mask", "input_type_ids", "block_mask")
_QUERY_FEATURES = ("input_word_ids", "input_mask", "input_type_ids")
BEST_DIR = "best"
TRAIN_LOG = "train_log.jsonl"


@dataclasses.dataclass(frozen=True)
class FineTuneConfig:
  """Open-QA fine-tuning.

  Attributes:
    model_dir: checkpoints, the doc index and `best/` are written here.
    corpus: the knowledge corpus (`realm_tf.qa.corpus.load_corpus`).
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
    log_every_steps: training-log cadence.
    seed: shuffling and initialisation seed.
    compute_dtype: precision of the towers' and reader's matmuls ("float32", "bfloat16": Keras
      mixed_bfloat16 with float32 variables, or "auto": `models.precision`); the losses, the
      retriever scores stay float32.
    embedding_dtype: precision of the doc-embedder export that embeds the doc index
      ("float32", "bfloat16" or "auto"), recorded in the index's info.json.
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


def open_qa_losses(retriever, reader, block_embeddings: tf.Variable,
                   inputs: Dict[str, tf.Tensor], training: bool):
  """Per-question Open-QA losses of prepared inputs (`FineTuner.prepare_batch` names).

  Args:
    retriever, reader: the models (the query tower and the reader run here).
    block_embeddings: float32 [N, D], the frozen doc-tower embeddings of the corpus rows.
    inputs: "query_*" [B, Lq], "rows" [B, K], "has_answer" [B, K], "reader_*" [B, k, Lr],
      "gold_starts" / "gold_ends" [B, k, A].
    training: dropout on or off.

  Returns:
    (loss [B], retriever loss [B], reader loss [B], correct spans bool [B, k, S]).
  """
  query = {n: inputs[f"query_{n}"] for n in _QUERY_FEATURES}
  features = {n: inputs[f"reader_{n}"] for n in _READER_FEATURES}
  batch = tf.shape(features["input_word_ids"])[0]
  k = tf.shape(features["input_word_ids"])[1]
  flat = {n: tf.reshape(t, [batch * k, -1]) for n, t in features.items()}
  rows = inputs["rows"]
  query_emb = tf.cast(retriever.embed_query(query, training=training), tf.float32)
  blocks = tf.gather(block_embeddings, tf.maximum(rows, 0))  # [B, K, D]
  retriever_logits = tf.where(rows >= 0, tf.einsum("bd,bkd->bk", query_emb, blocks),
                              masked_logit_value(tf.float32))  # [B, K]
  span_logits, starts, ends = reader.span_logits(
      {n: flat[n] for n in _QUERY_FEATURES}, flat["block_mask"], training=training)
  span_logits = tf.reshape(span_logits, [batch, k, -1])  # [B, k, S]
  correct = correct_spans(starts, ends, inputs["gold_starts"], inputs["gold_ends"])
  _, parts = open_qa_loss(retriever_logits, inputs["has_answer"], span_logits, correct)
  per_question = parts["retriever_loss"] + parts["reader_loss"]
  return per_question, parts["retriever_loss"], parts["reader_loss"], correct


def make_replica_step(retriever, reader, optimizer, block_embeddings: tf.Variable,
                      global_batch_size: int, retriever_optimizer=None
                      ) -> Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]]:
  """The replicated training step: Open-QA loss, gradients, AdamW updates (the query tower's
  by `retriever_optimizer` when given, else by `optimizer` with the reader's).

  The returned function takes one replica's prepared inputs and returns sums over its
  questions ("loss", "retriever_loss", "reader_loss", "retrieved_answer": questions with an
  answer-bearing block in the top-K, "read_answer": with a gold span in the top-k).
  """
  query_tower = query_tower_variables(retriever)
  variables = query_tower + reader_variables(reader)

  def replica_step(inputs: Dict[str, tf.Tensor]) -> Dict[str, tf.Tensor]:
    with tf.GradientTape() as tape:
      per_question, retriever_loss, reader_loss, correct = open_qa_losses(
          retriever, reader, block_embeddings, inputs, training=True)
      loss = tf.reduce_sum(per_question) / float(global_batch_size)
    pairs = [(g, v) for g, v in zip(tape.gradient(loss, variables), variables)]
    updates = [(g, v) for g, v in pairs if g is not None]  # e.g. an unused pooler
    if retriever_optimizer is None:
      apply_gradients(optimizer, updates)
    else:
      split = len([p for p in pairs[:len(query_tower)] if p[0] is not None])
      apply_gradients(retriever_optimizer, updates[:split])
      apply_gradients(optimizer, updates[split:])
    return {
        "loss": tf.reduce_sum(per_question),
        "retriever_loss": tf.reduce_sum(retriever_loss),
        "reader_loss": tf.reduce_sum(reader_loss),
        "retrieved_answer": tf.reduce_sum(tf.cast(tf.reduce_any(inputs["has_answer"], 1),
                                                  tf.float32)),
        "read_answer": tf.reduce_sum(tf.cast(tf.reduce_any(correct, [1, 2]), tf.float32)),
    }

  return replica_step


def query_tower_variables(retriever) -> List[tf.Variable]:
  """The retriever variables fine-tuning trains: the query tower (not the doc tower)."""
  return (retriever.query_encoder.trainable_variables +
          retriever.query_projection.trainable_variables)


def reader_variables(reader) -> List[tf.Variable]:
  """The reader variables fine-tuning trains: its BERT and span head (not the MLM head)."""
  return reader.encoder.trainable_variables + reader.span_scorer.trainable_variables



def _snapshot_dirs(step: int):
  return f"doc_index-{step}", f"doc_embedder-{step}"


class FineTuner:
  """Runs Open-QA fine-tuning for a `FineTuneConfig` (see the module docstring).

  Args:
    config: the run.
    strategy: a `tf.distribute.Strategy` (default: the current one).
    log: called with one-line progress messages.
  """

  def __init__(self, config: FineTuneConfig, strategy: Optional[tf.distribute.Strategy] = None,
               log: Callable[[str], None] = logging.info):
    self.config = config
    self.strategy = strategy or tf.distribute.get_strategy()
    self.log = log
    if config.batch_size % self.strategy.num_replicas_in_sync:
      raise ValueError(f"batch_size {config.batch_size} is not a multiple of the "
                       f"{self.strategy.num_replicas_in_sync} replicas")
    self.output_dir = distribute.output_dir(self.strategy, config.model_dir)
    tf.io.gfile.makedirs(self.output_dir)
    keras.utils.set_random_seed(config.seed)
    self.dataset = datasets.dataset_of(config.train_data, config.dataset)
    self.train_examples = datasets.load_examples(config.train_data, self.dataset)
    self.dev_examples = (datasets.load_examples(config.dev_data, self.dataset)
                         if config.dev_data else [])
    self.corpus = load_corpus(config.corpus)
    self.tokenizer = WordpieceTokenizer.from_vocab_file(config.vocab_file)
    if self.tokenizer.vocab_size != config.model.encoder.vocab_size:
      raise ValueError(f"vocabulary {config.vocab_file} has {self.tokenizer.vocab_size} "
                       f"wordpieces, the encoder {config.model.encoder.vocab_size}")
    with tf.io.gfile.GFile(os.path.join(self.output_dir, VOCAB), "w") as f:
      f.write("\n".join(self.tokenizer.vocabulary) + "\n")
    self._copy_corpus()
    self.featurizer = Featurizer(self.tokenizer, config.model.query_length,
                                 config.model.block_length, config.model.reader_length)
    self.num_retrieved = min(config.retriever_top_k, len(self.corpus))
    self.num_read = min(config.reader_top_k, self.num_retrieved)

    with self.strategy.scope(), precision.policy_scope(config.compute_dtype):
      self.retriever, self.reader = build_models(config.model)
      self.optimizer = create_optimizer(config.optimizer_config("reader"))
      self.retriever_optimizer = create_optimizer(config.optimizer_config("retriever"))
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step")
      self.doc_snapshot_step = tf.Variable(0, dtype=tf.int64, trainable=False,
                                           name="doc_snapshot_step")
    self.checkpoint = model_checkpoint(self.retriever, self.reader, optimizer=self.optimizer,
                                       retriever_optimizer=self.retriever_optimizer,
                                       step=self.step, doc_snapshot_step=self.doc_snapshot_step)
    self.manager = tf.train.CheckpointManager(self.checkpoint, self.output_dir,
                                              max_to_keep=config.keep_checkpoints)
    self.best_manager = tf.train.CheckpointManager(
        model_checkpoint(self.retriever, self.reader, step=self.step,
                         doc_snapshot_step=self.doc_snapshot_step),
        os.path.join(self.output_dir, BEST_DIR), max_to_keep=1)
    self.run_config = dict(task="finetune", dataset=self.dataset, model=config.model.to_dict(),
                           vocab_fingerprint=run_config.vocab_fingerprint(
                               self.tokenizer.vocabulary),
                           corpus_fingerprint=self.corpus.fingerprint)
    latest = tf.train.latest_checkpoint(config.model_dir)  # the chief's, on every worker
    self._save_run_config = not latest
    if latest:
      run_config.check(config.model_dir, self.run_config)
      run_config.restore_checked(self.checkpoint, latest)
      self.log(f"resumed from {latest} at step {self._step()}")
    else:
      initialize(self.retriever, self.reader, config.model, config.init)
      if not config.init.checkpoint or config.init.checkpoint_share_towers:
        self._snapshot_query_tower()  # shared pre-trained towers: the doc tower is the same.
    self.best_exact_match = self._read_best()

    self.doc_index = self._load_or_build_index(self._snapshot())
    with tf.device("CPU:0"):
      self.block_embeddings = tf.Variable(self.doc_index.embeddings, trainable=False,
                                          name="block_embeddings")
    self._replica_step = make_replica_step(self.retriever, self.reader, self.optimizer,
                                           self.block_embeddings, config.batch_size,
                                           self.retriever_optimizer)
    self._system = None
    self._embed_fn = tf.function(self._embed_questions, reduce_retracing=True)
    self._reader_inputs_fn = tf.function(self.featurizer.reader_inputs, reduce_retracing=True)
    self._train_fn = tf.function(self._distributed_step)
    self._epoch_orders = {}

  def _step(self) -> int:
    return int(self.step.numpy())

  def _snapshot(self) -> int:
    return int(self.doc_snapshot_step.numpy())

  # Doc index ----------------------------------------------------------------------------------

  def _snapshot_query_tower(self) -> None:
    retriever = self.retriever
    retriever.doc_encoder.set_weights(retriever.query_encoder.get_weights())
    retriever.doc_projection.set_weights(retriever.query_projection.get_weights())

  def _load_or_build_index(self, snapshot: int) -> DocIndex:
    index_name, embedder_name = _snapshot_dirs(snapshot)
    index_dir = os.path.join(self.output_dir, index_name)
    embedder_dir = os.path.join(self.output_dir, embedder_name)
    if DocIndex.exists(index_dir) and tf.io.gfile.exists(embedder_dir):
      doc_index = DocIndex.load(index_dir, self.corpus)
      if self._matches_doc_tower(doc_index):
        return doc_index
      self.log(f"{index_dir} was built by another doc tower; rebuilding it")
    start = time.perf_counter()
    for stale in (index_dir, embedder_dir):
      if tf.io.gfile.exists(stale):
        tf.io.gfile.rmtree(stale)
    export_doc_embedder(self.retriever, embedder_dir, cls_id=self.tokenizer.cls_id,
                        sep_id=self.tokenizer.sep_id, pad_id=self.tokenizer.pad_id,
                        block_length=self.config.model.block_length, snapshot_step=snapshot,
                        tokenizer=self.tokenizer, compute_dtype=self.config.embedding_dtype)
    doc_index = DocIndex.build(DocEmbedder(embedder_dir), self.corpus, self.config.index_kind,
                               snapshot_step=snapshot, scann=self.config.scann,
                               embedding_dtype=precision.resolve(self.config.embedding_dtype))
    doc_index.save(index_dir)
    self.log(f"indexed {len(self.corpus)} blocks with the doc tower of step {snapshot} in "
             f"{time.perf_counter() - start:.1f} s ({index_dir})")
    return doc_index

  def _matches_doc_tower(self, doc_index: DocIndex, sample: int = 4) -> bool:
    rows = np.unique(np.linspace(0, len(self.corpus) - 1, min(sample, len(self.corpus))
                                 ).astype(int))
    blocks = self.featurizer.block_featurizer((
        tf.constant([self.corpus.titles[r] for r in rows], tf.string),
        tf.constant([self.corpus.texts[r] for r in rows], tf.string)))
    fresh = tf.cast(self.retriever.embed_documents(blocks, training=False), tf.float32).numpy()
    tolerance = embedding_tolerance((self.retriever.doc_encoder.compute_dtype,
                                     doc_index.embedding_dtype), float(np.max(np.abs(fresh))))
    return bool(np.allclose(fresh, doc_index.embeddings[rows], rtol=0.0, atol=tolerance))

  def _refresh_index(self) -> None:
    step = self._step()
    self._snapshot_query_tower()
    self.doc_snapshot_step.assign(step)
    self.doc_index = self._load_or_build_index(step)
    self.block_embeddings.assign(self.doc_index.embeddings)
    self._system = None
    self._save_checkpoint()  # the checkpoint's doc tower must match the live index.
    self._remove_unused_snapshots()

  def _remove_unused_snapshots(self) -> None:
    keep = {self._snapshot()}
    paths = list(self.manager.checkpoints) + [self.best_manager.latest_checkpoint]
    for path in filter(None, paths):
      keep.add(int(tf.train.load_checkpoint(path).get_tensor(
          "doc_snapshot_step/.ATTRIBUTES/VARIABLE_VALUE")))
    for name in tf.io.gfile.listdir(self.output_dir):
      found = re.fullmatch(r"doc_(?:index|embedder)-(\d+)/?", name)
      if found and int(found.group(1)) not in keep:
        tf.io.gfile.rmtree(os.path.join(self.output_dir, name.rstrip("/")))

  # Model directory ----------------------------------------------------------------------------

  def _info(self, prefix: str = "", metrics: Optional[Dict[str, float]] = None) -> ModelInfo:
    index_name, embedder_name = _snapshot_dirs(self._snapshot())
    return ModelInfo(model=self.config.model, corpus=prefix + CORPUS,
                     corpus_fingerprint=self.corpus.fingerprint,
                     doc_index=prefix + index_name, doc_embedder=prefix + embedder_name,
                     dataset=self.dataset, vocab_file=prefix + VOCAB, step=self._step(),
                     metrics=dict(metrics or {}),
                     vocab_fingerprint=run_config.vocab_fingerprint(self.tokenizer.vocabulary))

  def _copy_corpus(self) -> None:
    """Writes the corpus into the model directory (so that it can move), unless the copy is
    there already (its fingerprint in model.json)."""
    model_dir = self.output_dir
    path = os.path.join(model_dir, CORPUS)
    if tf.io.gfile.exists(path) and tf.io.gfile.exists(os.path.join(model_dir, MODEL_INFO)) and (
        ModelInfo.read(model_dir).corpus_fingerprint == self.corpus.fingerprint):
      return
    write_corpus_jsonl(self.corpus, path + ".tmp")
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)

  def _save_checkpoint(self) -> None:
    if self._save_run_config:  # before the first checkpoint: never a checkpoint without it
      run_config.save(self.output_dir, self.run_config)
      self._save_run_config = False
    self.manager.save(checkpoint_number=self._step())
    self._info().write(self.output_dir)

  def _read_best(self) -> float:
    best_dir = os.path.join(self.output_dir, BEST_DIR)
    if not self.best_manager.latest_checkpoint:
      return -1.0
    return float(ModelInfo.read(best_dir).metrics.get("exact_match", -1.0))

  def _save_best(self, metrics: Dict[str, float]) -> None:
    self.best_manager.save(checkpoint_number=self._step())
    self._info("../", metrics).write(os.path.join(self.output_dir, BEST_DIR))

  # Batches ------------------------------------------------------------------------------------

  def _examples(self, step: int) -> List[datasets.QAExample]:
    """The deterministic batch of `step` (epochs reshuffled by seed, resumable by step)."""
    count, batch = len(self.train_examples), self.config.batch_size
    picked = []
    for position in range(step * batch, (step + 1) * batch):
      epoch = position // count
      if epoch not in self._epoch_orders:
        self._epoch_orders = {epoch: np.random.default_rng(
            [self.config.seed, epoch]).permutation(count)}
      picked.append(self.train_examples[self._epoch_orders[epoch][position % count]])
    return picked

  def _embed_questions(self, questions):
    features, query_ids = self.featurizer.questions(questions)
    return features, query_ids, self.retriever.embed_query(features, training=False)

  def prepare_batch(self, examples: List[datasets.QAExample]) -> Dict[str, np.ndarray]:
    """Host-side retrieval and supervision for a batch (step 1 of the module docstring).

    Returns:
      numpy arrays: "query_*" [B, Lq], "rows" int64 [B, K] (-1: missing), "has_answer" bool
      [B, K], "reader_*" int32 [B, k, Lr], "gold_starts" / "gold_ends" int32 [B, k, A].
    """
    batch, k, length = len(examples), self.num_read, self.config.model.reader_length
    features, query_ids, query_emb = self._embed_fn(tf.constant([e.question for e in examples]))
    _, rows = self.doc_index.index.search(query_emb, self.num_retrieved)
    rows = rows.numpy()
    matchers = [AnswerMatcher(e.answers, e.match) for e in examples]
    texts = self.corpus.texts
    has_answer = np.array([[r >= 0 and m.has_answer(texts[r]) for r in row]
                           for m, row in zip(matchers, rows)], bool)
    read = rows[:, :k]
    titles = [[self.corpus.titles[r] if r >= 0 else "" for r in row] for row in read]
    bodies = [[texts[r] if r >= 0 else "" for r in row] for row in read]
    reader = {n: t.numpy() for n, t in self._reader_inputs_fn(
        query_ids, tf.constant(titles, tf.string), tf.constant(bodies, tf.string)).items()}
    strings = [[m.answer_strings(body) for body in row] for m, row in zip(matchers, bodies)]
    vocabulary = sorted({s for row in strings for block in row for s in block})
    tokens = dict(zip(vocabulary, self.tokenizer(tf.constant(vocabulary, tf.string)).to_list()
                      if vocabulary else []))
    starts, ends = [], []
    for b in range(batch):
      s, e = gold_spans(reader["input_word_ids"][b * k:(b + 1) * k],
                        reader["block_mask"][b * k:(b + 1) * k],
                        [[tokens[a] for a in block] for block in strings[b]],
                        self.config.model.max_span_width, self.config.max_gold_spans)
      starts.append(s)
      ends.append(e)
    prepared = {f"query_{n}": features[n].numpy() for n in _QUERY_FEATURES}
    prepared.update({f"reader_{n}": reader[n].reshape([batch, k, length])
                     for n in _READER_FEATURES})
    prepared.update(rows=rows.astype(np.int64), has_answer=has_answer,
                    gold_starts=np.stack(starts), gold_ends=np.stack(ends))
    return prepared

  # The replicated step ------------------------------------------------------------------------

  def _losses(self, inputs: Dict[str, tf.Tensor], training: bool):
    return open_qa_losses(self.retriever, self.reader, self.block_embeddings, inputs, training)

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
    per_replica = self.config.batch_size // self.strategy.num_replicas_in_sync

    def value_fn(context):
      begin = context.replica_id_in_sync_group * per_replica
      return {n: tf.constant(v[begin:begin + per_replica]) for n, v in prepared.items()}

    return self.strategy.experimental_distribute_values_from_function(value_fn)

  def train_step(self, examples: List[datasets.QAExample]) -> Dict[str, float]:
    """One optimisation step on `examples` (B of them); returns per-question averages."""
    sums = self._train_fn(self._distribute(self.prepare_batch(examples)))
    self.step.assign_add(1)
    return {name: float(value) / len(examples) for name, value in sums.items()}

  # Evaluation and the loop --------------------------------------------------------------------

  def system(self):
    """The retrieve-and-read system with the current weights and index."""
    if self._system is None:
      self._system = make_system(self.retriever, self.reader, self.tokenizer,
                                 self.config.model, self.corpus, self.doc_index,
                                 k=self.num_read)
    return self._system

  def evaluate_dev(self) -> Dict[str, float]:
    """Dev metrics with the current weights; keeps `best/` by exact match."""
    result = evaluate(self.system(), self.dev_examples,
                      EvalConfig(max_examples=self.config.eval_max_examples))
    metrics = result.metrics
    if metrics["exact_match"] > self.best_exact_match:
      self.best_exact_match = metrics["exact_match"]
      self._save_best(metrics)
    return metrics

  def run(self) -> FineTuneResult:
    """Trains up to `num_train_steps`, evaluating, checkpointing and refreshing on schedule.

    Raises:
      distribute.WorkerLostError: another worker of a multi-worker job stopped.
    """
    with distribute.reporting_lost_workers(self.strategy, self.config.model_dir, self.step):
      result = self._run()
      distribute.barrier(self.strategy)  # workers exit together (see RealmPretrainer.train)
    return result

  def _run(self) -> FineTuneResult:
    config = self.config
    losses, dev_metrics = [], {}
    log_path = os.path.join(self.output_dir, TRAIN_LOG)
    writer = tf.summary.create_file_writer(os.path.join(self.output_dir, "train"))
    start, last_log = time.perf_counter(), self._step()
    while self._step() < config.num_train_steps:
      step = self._step()
      if config.index_refresh_steps and step and step % config.index_refresh_steps == 0 and (
          self._snapshot() != step):
        self._refresh_index()
      stats = self.train_step(self._examples(step))
      losses.append(stats["loss"])
      if not np.isfinite(stats["loss"]):
        raise FloatingPointError(f"non-finite loss {stats['loss']} at step {step}")
      step += 1
      schedule = self.optimizer.learning_rate
      learning_rate = float(schedule(self.optimizer.iterations) if callable(schedule)
                            else schedule)
      _write_scalars(writer, step, "train", dict(
          stats, learning_rate=learning_rate, index_version=self._snapshot(),
          index_staleness=step - 1 - self._snapshot()))
      if step % config.log_every_steps == 0 or step == config.num_train_steps:
        rate = (step - last_log) / max(time.perf_counter() - start, 1e-9)
        start, last_log = time.perf_counter(), step
        record = dict(step=step, learning_rate=learning_rate, steps_per_s=rate, **stats)
        with tf.io.gfile.GFile(log_path, "a") as f:
          f.write(json.dumps(record) + "\n")
        self.log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in record.items()))
      if step % config.checkpoint_every_steps == 0 or step == config.num_train_steps:
        self._save_checkpoint()
      if self.dev_examples and (step % config.eval_every_steps == 0 or
                                step == config.num_train_steps):
        dev_metrics[step] = self.evaluate_dev()
        _write_scalars(writer, step, "eval", dev_metrics[step])
        self.log(f"step {step} dev " + " ".join(f"{k}={v:.4f}"
                                                for k, v in dev_metrics[step].items()))
    step = self._step()
    if self.dev_examples and step not in dev_metrics and (
        self.best_manager.latest_checkpoint is None or not losses):
      dev_metrics[step] = self.evaluate_dev()
      _write_scalars(writer, step, "eval", dev_metrics[step])
    writer.flush()
    if not self.dev_examples and not _saved_at(self.best_manager, step):
      self._save_best({})
    if not _saved_at(self.manager, step):
      self._save_checkpoint()
    return FineTuneResult(self._step(), losses, dev_metrics, self.best_exact_match)


def _write_scalars(writer, step: int, prefix: str, values: Dict[str, float]) -> None:
  """TensorBoard scalars `<prefix>/<name>` at `step`."""
  with writer.as_default(step=step):
    for name, value in values.items():
      tf.summary.scalar(f"{prefix}/{name}", value)


def run_finetuning(config: FineTuneConfig, strategy: Optional[tf.distribute.Strategy] = None,
                   log: Callable[[str], None] = logging.info) -> FineTuneResult:
  """Builds a `FineTuner` for `config` and runs it."""
  return FineTuner(config, strategy, log).run()


