"""The trained rows of the real-data benchmark: ICT -> REALM pre-training -> fine-tuning.

One `Chain` is one seed's training runs over the benchmark corpus, each a registered
experiment with the chain's settings over it (`experiments.chain`):

    ict               ICT warm-start of all-MiniLM-L6-v2 (sentence head, one tower for
                      queries and blocks)                                 -> <run_dir>/ict/
    realm-<masking>   REALM pre-training from ict/ (a MiniLM reader, its MLM head warmed up
                      first), K candidates with the null document, the query's own block
                      excluded, a brute-force index refreshed synchronously
                      -> <run_dir>/realm-<masking>/ (-sequence_mlm: the per-example marginal)

A finished stage writes `done.json` and is not run again; an interrupted one resumes from its
last checkpoint. Dev questions take no part: every retriever is its run's last step.
"""
import dataclasses
import fcntl
import hashlib
import json
import os
from typing import Any, Dict

import apache_beam as beam
import tensorflow as tf

from pipelines import beam_runner
from pipelines import pretraining_examples_lib
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiments import registry
from realm_tf.experiments.chain import Stage
from realm_tf.experiments.chain import stage_experiment
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.losses.mlm_marginal_likelihood import MLM_LOSS_FORMS
from realm_tf.models.saving import load_model
from realm_tf.models import precision
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.presets import build_models
from realm_tf.presets import encoder_config
from realm_tf.presets import load_reader_weights
from realm_tf.tokenization import doc_input as doc_inputs

DONE = "done.json"
MASKINGS = ("salient_span", "random_span", "spanbert")


@dataclasses.dataclass(frozen=True)
class ChainConfig:
  """The chain's settings (a run directory's key: `digest`).

  Attributes:
    block_length, query_length: wordpieces of a block and of a pre-training query (specials
      included); the reader reads both.
    ict_steps, ict_batch_size, ict_learning_rate: ICT (in-batch negatives).
    mlm_warmup_steps: the reader's MLM-head warm-up before REALM (MiniLM has no MLM head).
    pretrain_steps, pretrain_batch_size, pretrain_learning_rate: REALM pre-training.
    num_candidates: K retrieved blocks per masked sentence, the null document included.
    refresh_every: steps between index rebuilds with the current doc tower.
    compute_dtype: the training steps' and the index's matmuls ("auto": bfloat16 where the
      CPU has bfloat16 units, `models.precision`).
    mlm_loss: REALM's MLM marginal, per masked token (here the default: BENCHMARKS.md §7b's
      rows were measured in it) or per example (`MLM_LOSS_FORMS`). Not in the digest: the
      REALM stage's directory names it, so both forms start from one ICT run.
    doc_input: the doc tower's block form (`tokenization.doc_input`): REALM's "title_body"
      or the patent's "body". In the digest only when not the default, so the runs made
      before the setting keep their directories.
  """
  block_length: int = 128
  query_length: int = 64
  ict_steps: int = 100
  ict_batch_size: int = 32
  ict_learning_rate: float = 1e-5
  mlm_warmup_steps: int = 50
  pretrain_steps: int = 100
  pretrain_batch_size: int = 4
  pretrain_learning_rate: float = 1e-5
  num_candidates: int = 8
  refresh_every: int = 50
  compute_dtype: str = "auto"
  mlm_loss: str = "token"
  doc_input: str = doc_inputs.DEFAULT_DOC_INPUT

  def __post_init__(self):
    if self.mlm_loss not in MLM_LOSS_FORMS:
      raise ValueError(f"mlm_loss must be one of {MLM_LOSS_FORMS}, got {self.mlm_loss!r}")
    doc_inputs.check(self.doc_input)
    for name in ("ict_steps", "ict_batch_size", "pretrain_steps", "pretrain_batch_size",
                 "num_candidates", "refresh_every"):
      if getattr(self, name) < 1:
        raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

  def settings(self) -> Dict[str, Any]:
    """The settings with `compute_dtype` resolved on this machine."""
    return dict(dataclasses.asdict(self), compute_dtype=precision.resolve(self.compute_dtype))

  def digest(self) -> str:
    settings = self.settings()
    del settings["mlm_loss"]
    if settings["doc_input"] == doc_inputs.DEFAULT_DOC_INPUT:
      del settings["doc_input"]
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:8]


def examples_dir(cache_dir: str, masking: str, query_length: int) -> str:
  return os.path.join(cache_dir, f"examples-{masking}-q{query_length}")


def prepare_examples(corpus_dir: str, cache_dir: str, masking: str, query_length: int,
                     pipeline_options: str = "") -> str:
  """Pre-training examples of `corpus_dir` with `masking` (Beam pipeline 2: spaCy salient
  spans, or random word spans for the ablation), written once under `cache_dir` and shared by
  every seed (a lock file lets seeds run as parallel processes).

  Returns:
    Their directory (`examples_dir`).
  """
  if masking not in MASKINGS:
    raise ValueError(f"masking must be one of {MASKINGS}, got {masking!r}")
  output = examples_dir(cache_dir, masking, query_length)
  os.makedirs(cache_dir, exist_ok=True)
  # Seeds run as parallel processes share the examples: one writes them, the others wait.
  with open(output + ".lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    if not os.path.exists(os.path.join(output, DONE)):
      counters = pretraining_examples_lib.run_pipeline(
          beam.Pipeline(options=beam_runner.pipeline_options(pipeline_options)),
          pretraining_examples_lib.ExamplesConfig(corpus_dir, output, masking=masking,
                                                  max_query_wordpieces=query_length - 2))
      _write_done(output, counters)
  return output


def _write_done(directory: str, figures: Dict[str, Any]) -> None:
  with open(os.path.join(directory, DONE), "w", encoding="utf-8") as f:
    json.dump(figures, f, indent=1, default=float)


class Chain:
  """One seed's ICT and REALM pre-training runs over `corpus_dir` (module docstring).

  Args:
    config: the chain's settings.
    corpus_dir: the block shards (pipeline 1).
    cache_dir: where the runs (`chain-<digest>-seed<seed>/`) and the examples go.
    vocab_file: the corpus's WordPiece vocabulary (MiniLM's).
    vocab_size: its size.
    seed: initialisation and data order.
    log: called with a line when a stage starts and ends.
  """

  def __init__(self, config: ChainConfig, corpus_dir: str, cache_dir: str, vocab_file: str,
               vocab_size: int, seed: int, log=print):
    self.config, self.corpus_dir, self.cache_dir = config, corpus_dir, cache_dir
    self.vocab_file, self.seed, self.log = vocab_file, seed, log
    self.run_dir = os.path.join(cache_dir, f"chain-{config.digest()}-seed{seed}")
    self.model = ModelConfig(encoder=encoder_config("minilm_l6", vocab_size),
                             retriever_head="sentence", query_length=config.query_length,
                             block_length=config.block_length,
                             reader_length=config.query_length + config.block_length,
                             doc_input=config.doc_input)

  def path(self, *parts: str) -> str:
    return os.path.join(self.run_dir, *parts)

  def _experiment(self, name: str, stage: str, schedule: Stage,
                   settings: Dict[str, Any]) -> ExperimentConfig:
    return stage_experiment(name, self.path(stage), schedule, {
        "task.corpus": self.corpus_dir, "task.vocab_file": self.vocab_file,
        "task.model": self.model, "trainer.keep_checkpoints": 1, "runtime.seed": self.seed,
        "runtime.compute_dtype": precision.resolve(self.config.compute_dtype)}, settings)

  def _run(self, stage: str, experiment: ExperimentConfig) -> str:
    """Runs `experiment` into `<run_dir>/<stage>` unless it finished; returns that directory."""
    directory = self.path(stage)
    if not os.path.exists(os.path.join(directory, DONE)):
      self.log(f"[seed {self.seed}] {stage} ...")
      metrics = run_experiment(experiment, verbose=False)
      _write_done(directory, {k: float(v) for k, v in metrics.items()})
      self.log(f"[seed {self.seed}] {stage} done: " + ", ".join(
          f"{k} {float(v):.4f}" for k, v in sorted(metrics.items())))
    return directory

  def ict(self) -> str:
    """The ICT run's directory (its retriever in `retriever/`)."""
    config = self.config
    return self._run("ict", self._experiment("ict", "ict", Stage.of(config, "ict"), {
        "task.init": InitConfig(bert_weights="minilm")}))

  def realm_stage(self, masking: str) -> str:
    """The name of the REALM stage of `masking` in the chain's MLM loss form."""
    if masking not in MASKINGS:
      raise ValueError(f"masking must be one of {MASKINGS}, got {masking!r}")
    form = self.config.mlm_loss
    return f"realm-{masking}" + ("" if form == "token" else f"-{form}_mlm")

  def pretrain(self, masking: str) -> str:
    """The REALM pre-training run of `masking` from the ICT run (retriever in `retriever/`,
    reader in `reader/`)."""
    config = self.config
    stage = self.realm_stage(masking)
    examples = prepare_examples(self.corpus_dir, self.cache_dir, masking, config.query_length)
    ict_dir = self.ict()
    return self._run(stage, self._experiment("pretrain", stage, Stage.of(config, "pretrain"), {
        "task.examples_dir": examples,
        "task.init": InitConfig(checkpoint=ict_dir, bert_weights="minilm"),
        "task.masking": masking, "task.num_candidates": config.num_candidates,
        "task.null_document": True, "task.exclude_source": True,
        "task.mlm_warmup_steps": config.mlm_warmup_steps, "task.refresh": "sync",
        "task.mlm_loss": config.mlm_loss, "task.refresh_every": config.refresh_every,
        "task.index_kind": "brute_force", "task.embedding_dtype": config.compute_dtype}))

  def finetune_init(self, stage: str) -> InitConfig:
    """The `task.init` of fine-tuning from `stage` ("ict" or a `realm_stage`), trained first
    when it has not been: a REALM stage's model directory (its retriever and reader); for
    ICT, ORQA's system, a checkpoint of the ICT retriever beside a new reader with MiniLM's
    weights (`<run_dir>/orqa-init/`)."""
    if stage != "ict":
      maskings = [m for m in MASKINGS if self.realm_stage(m) == stage]
      if not maskings:
        raise ValueError(f"stage must be 'ict' or one of "
                         f"{[self.realm_stage(m) for m in MASKINGS]}, got {stage!r}")
      return InitConfig(checkpoint=self.pretrain(maskings[0]))
    prefix = self.path("orqa-init", "ckpt")
    if not tf.io.gfile.exists(prefix + ".index"):
      retriever = load_model(os.path.join(self.ict(), "retriever"))
      _, reader = build_models(self.model)
      load_reader_weights(reader, "minilm")
      tf.train.Checkpoint(retriever=retriever, reader=reader).write(prefix)
    return InitConfig(checkpoint=prefix, checkpoint_share_towers=self.ict_shares_towers())

  def ict_shares_towers(self) -> bool:
    return registry.get("ict").task.share_towers
