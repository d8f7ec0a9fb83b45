"""Running the knowledge-world ablations (`ablation_config`): one seed's stages, and the seeds.

`AblationRunner` writes a seed's world, trains the ICT warm-start, the pre-training runs and
fine-tunes every system; `run_seeds` runs seeds as parallel processes (one intra-op thread
each), reusing a seed whose directory holds a finished result with the same settings
(`ablation_result`).

Every stage is a registered experiment (`ict`, `pretrain`, `open_qa`) with the seed's world,
towers and schedule over it (`experiments.chain`), run by `run_experiment` in float32. Pre-training
sync-refreshes a brute-force index, from the ICT retriever (`task.retriever_dir`) and the
previous run's reader (`task.reader_dir`) or, K = 1 ("bert", "bert_pairs"), a new reader from
`task.reader_seed` = seed + 1 (one initialisation for every run); fine-tuning from a checkpoint
of the system's retriever and reader (`task.init.checkpoint`).
"""
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import shutil
import time
from typing import Callable, Dict, List, Optional

import numpy as np
import tensorflow as tf

from realm_tf.experiments.chain import Stage
from realm_tf.experiments.chain import stage_experiment
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.knowledge_world.ablation_config import DESCRIPTIONS
from realm_tf.knowledge_world.ablation_config import FINETUNE_SETTINGS
from realm_tf.knowledge_world.ablation_config import PRETRAINING_RUNS
from realm_tf.knowledge_world.ablation_config import SEQUENCE_MLM_RUNS
from realm_tf.knowledge_world.ablation_config import SYSTEMS
from realm_tf.knowledge_world.ablation_config import AblationConfig
from realm_tf.knowledge_world.ablation_config import lineage
from realm_tf.knowledge_world.ablation_result import AblationResult
from realm_tf.knowledge_world.ablation_result import load_result
from realm_tf.knowledge_world.ablation_result import save_result
from realm_tf.knowledge_world.writer import WorldFiles
from realm_tf.knowledge_world.writer import write_world
from realm_tf.knowledge_world.zero_shot import zero_shot_recall
from realm_tf.models.saving import load_model
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.qa import datasets
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.training.train_loop import read_step_records

NULL_CORPUS = "null_corpus.jsonl"
# The QA system's stand-in for the null document: one block without content. (A block with an
# empty text cannot go through `RetrieveAndRead`: its span-to-text step gathers from the empty
# tokenization; a lone "." has no answer span either.)
NULL_TEXT = "."
nan = float("nan")


def _lengths(files: WorldFiles) -> Dict[str, int]:
  """Packed lengths that fit the world: no block, sentence or question is ever cut."""
  block = files.max_block_wordpieces
  query = files.max_question_wordpieces + 2
  return {"block": block, "pretrain_query": files.max_sentence_wordpieces + 2,
          "qa_query": query, "qa_reader": query + block}


class AblationRunner:
  """Runs the stages of one seed of an `AblationConfig` (`config.seed`); `run()` does them all.

  Args:
    config: the run; `config.output_dir` is this seed's directory.
    log: called with one-line progress messages.
  """

  def __init__(self, config: AblationConfig, log: Callable[[str], None] = print):
    self.config = config
    self.log = log
    self.timings: Dict[str, float] = {}
    self.files: Optional[WorldFiles] = None

  def _path(self, *parts: str) -> str:
    return os.path.join(self.config.output_dir, *parts)

  def _timed(self, name: str, fn: Callable[[], object]):
    start = time.perf_counter()
    result = fn()
    self.timings[name] = time.perf_counter() - start
    self.log(f"[seed {self.config.seed}] [{name}] {self.timings[name]:.1f} s")
    return result

  # Stages -------------------------------------------------------------------------------------

  def write_world(self) -> WorldFiles:
    self.files = write_world(self._path("world"), self.config.world)
    self.tokenizer = self.files.tokenizer()
    self.store = self.files.store()
    self.lengths = _lengths(self.files)
    encoder = self.config.encoder(
        self.tokenizer.vocab_size, max(self.lengths["qa_reader"],
                                       self.lengths["pretrain_query"] + self.lengths["block"]))
    # Open-QA's towers; ICT and pre-training read the longer X sentences as queries.
    self.model = ModelConfig(encoder=encoder, projection_size=self.config.projection_size,
                             span_hidden_size=self.config.span_hidden_size,
                             query_length=self.lengths["qa_query"],
                             block_length=self.lengths["block"],
                             reader_length=self.lengths["qa_reader"])
    self.pretrain_model = dataclasses.replace(self.model,
                                              query_length=self.lengths["pretrain_query"])
    self.test = datasets.load_examples(self.files.test)
    with open(self._path(NULL_CORPUS), "w", encoding="utf-8") as f:
      f.write(json.dumps({"id": 0, "title": "", "text": NULL_TEXT}) + "\n")
    self.log(f"world: {len(self.store)} blocks, {self.files.num_examples} X sentences, "
             f"vocabulary {self.tokenizer.vocab_size}, lengths {self.lengths}")
    return self.files

  def _recall(self, retriever_dir: str) -> float:
    return zero_shot_recall(load_model(retriever_dir), self.store, self.tokenizer, self.test,
                            self.config.recall_k, self.lengths["qa_query"],
                            self.lengths["block"])

  def _experiment(self, name: str, model_dir: str, stage: Stage,
                  settings: Dict[str, object]):
    """The registered experiment `name` of `stage` training into `model_dir` on this seed's
    world (the pre-training corpus, ICT's and pre-training's towers), `settings` over it."""
    return stage_experiment(name, model_dir, stage, {
        "task.corpus": self.files.directory, "task.vocab_file": self.files.vocab_file,
        "task.model": self.pretrain_model, "task.init": InitConfig(),
        "runtime.seed": self.config.seed, "runtime.compute_dtype": "float32"}, settings)

  def train_ict(self) -> float:
    """ICT warm-start; returns its zero-shot recall@k."""
    config = self.config
    run_experiment(self._experiment(
        "ict", self._path("ict"), Stage.of(config, "ict", checkpoint_every=config.ict_steps), {}),
        verbose=False)
    self.ict_recall = self._recall(self._path("ict", "retriever"))
    self.log(f"[seed {config.seed}] ICT zero-shot recall@{config.recall_k}: "
             f"{self.ict_recall:.3f}")
    return self.ict_recall

  def pretrain(self, run: str) -> Dict[str, float]:
    """One pre-training run of `PRETRAINING_RUNS` (after the run its reader starts from)."""
    config = self.config
    masking, start = PRETRAINING_RUNS[run]
    bert = start is None
    if bert:  # K = 1: the null document ("bert") or the ICT top block; never refreshed
      steps = config.bert_steps
      settings = {"task.reader_seed": config.seed + 1, "task.num_candidates": 1,
                  "task.null_document": run == "bert", "task.refresh_every": steps + 1}
    else:
      steps = config.pretrain_steps
      settings = {"task.reader_dir": self._path("pretrain", start, "reader"),
                  "task.num_candidates": config.num_candidates, "task.null_document": True,
                  "task.refresh_every": config.refresh_every * (
                      config.stale_factor if run == "realm_stale_index" else 1),
                  "task.reader_warmup_steps": config.reader_warmup_steps}
    model_dir = self._path("pretrain", run)
    run_experiment(self._experiment(
        "pretrain", model_dir, Stage.of(config, "pretrain", steps=steps, checkpoint_every=steps),
        dict(settings, **{
            "task.examples_dir": self.files.directory,
            "task.retriever_dir": self._path("ict", "retriever"), "task.exclude_source": False,
            "task.masking": masking,
            "task.mlm_loss": "sequence" if run in SEQUENCE_MLM_RUNS else "token",
            "task.refresh": "sync", "task.index_kind": "brute_force",
            "task.embedding_dtype": "float32"})), verbose=False)
    history = read_step_records(os.path.join(model_dir, "metrics.jsonl"))
    tenth = max(1, len(history) // 10)
    mean = lambda records, key: float(np.mean([h[key] for h in records]))
    tail = history[-tenth:]
    summary = {key: mean(tail, key) for key in ("mlm_accuracy", "loss")}
    if not bert:
      summary.update({key: mean(tail, key) for key in (
          "retrieval_utility", "null_prior", "null_posterior", "source_retrieved")})
      summary["null_prior_first"] = mean(history[:tenth], "null_prior")
      summary["recall"] = self._recall(os.path.join(model_dir, "retriever"))
    self.log(f"[seed {config.seed}] pre-training {run}: " +
             " ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    return summary

  def _init_checkpoint(self, variant: str) -> str:
    """A checkpoint of the variant's retriever and reader (`SYSTEMS`) for fine-tuning."""
    retriever_run, reader_run = SYSTEMS[variant]
    prefix = self._path("finetune", f"init-{retriever_run}-{reader_run}", "ckpt")
    if not tf.io.gfile.exists(prefix + ".index"):
      retriever = load_model(self._path("ict", "retriever") if retriever_run == "ict" else
                             self._path("pretrain", retriever_run, "retriever"))
      reader = load_model(self._path("pretrain", reader_run, "reader"))
      tf.train.Checkpoint(retriever=retriever, reader=reader).write(prefix)
    return prefix

  def finetune_experiment(self, variant: str, model_dir: str, init_checkpoint: str,
                          settings: Optional[Dict[str, object]] = None):
    """The `open_qa` experiment fine-tuning `variant` into `model_dir` from `init_checkpoint`
    (`_init_checkpoint`), `settings` (dotted keys) over the benchmark's."""
    config = self.config
    corpus = self._path(NULL_CORPUS) if variant == "no_retrieval" else self.files.directory
    steps = config.finetune_steps
    variant_settings = FINETUNE_SETTINGS.get(variant, {})
    if variant_settings.get("task.train_doc_tower"):
      variant_settings = dict(variant_settings,
                              **{"task.index_refresh_steps": config.refresh_every * 5})
    return self._experiment(
        "open_qa", model_dir, Stage.of(config, "finetune", checkpoint_every=steps), {
            "trainer.warmup_steps": max(1, steps // 10), "trainer.eval_every": config.eval_every,
            "trainer.retriever_learning_rate": config.finetune_retriever_learning_rate,
            "trainer.keep_checkpoints": 1, "trainer.log_every": max(1, steps // 4),
            "task.corpus": corpus, "task.train_data": self.files.train,
            "task.dev_data": self.files.dev, "task.model": self.model,
            "task.init": InitConfig(checkpoint=init_checkpoint),
            "task.reader_top_k": config.reader_top_k,
            "task.retriever_top_k": max(config.reader_top_k, config.retriever_top_k),
            "task.index_kind": "brute_force", "task.embedding_dtype": "float32",
            "task.allow_unanswerable": variant == "no_retrieval", **variant_settings,
            **(settings or {})})

  def finetune(self, variant: str) -> Dict[str, float]:
    """Fine-tunes `variant` and evaluates its best dev checkpoint on test."""
    config = self.config
    model_dir = self._path("finetune", variant)
    if tf.io.gfile.exists(model_dir):
      tf.io.gfile.rmtree(model_dir)
    run_experiment(self.finetune_experiment(variant, model_dir, self._init_checkpoint(variant)),
                   verbose=False)
    model = QAModel.load(find_model_dir(model_dir))
    result = evaluate(model.system(k=config.reader_top_k), self.test,
                      EvalConfig(recall_ks=(config.recall_k,)),
                      predictions_path=os.path.join(model_dir, "test_predictions.jsonl"))
    metrics = {"exact_match": result.metrics["exact_match"],
               "finetuned_recall": result.metrics.get(f"recall@{config.recall_k}", nan)}
    self.log(f"[seed {config.seed}] fine-tuned {variant}: " +
             " ".join(f"{k}={v:.3f}" for k, v in metrics.items()))
    return metrics

  # Everything ---------------------------------------------------------------------------------

  def run(self) -> AblationResult:
    config = self.config
    if tf.io.gfile.exists(config.output_dir):
      shutil.rmtree(config.output_dir)
    os.makedirs(config.output_dir)
    self._timed("world", self.write_world)
    self._timed("ict", self.train_ict)
    pretraining = {run: self._timed(f"pretrain/{run}", lambda r=run: self.pretrain(r))
                   for run in config.pretraining_runs()}
    rows = []
    for variant in config.variants:
      finetuned = self._timed(f"finetune/{variant}", lambda v=variant: self.finetune(v))
      retriever_run, reader_run = SYSTEMS[variant]
      retrieves = variant != "no_retrieval"
      retriever_pretraining = pretraining.get(retriever_run, {})
      stages = {"ict", f"finetune/{variant}"} | {
          f"pretrain/{run}" for run in lineage(retriever_run) + lineage(reader_run)}
      rows.append({
          "variant": variant, "system": DESCRIPTIONS[variant],
          "exact_match": finetuned["exact_match"],
          "zero_shot_recall": ((self.ict_recall if retriever_run == "ict" else
                                retriever_pretraining["recall"]) if retrieves else nan),
          "finetuned_recall": finetuned["finetuned_recall"] if retrieves else nan,
          "pretrain_retrieval_utility": retriever_pretraining.get("retrieval_utility", nan),
          "null_prior": retriever_pretraining.get("null_prior", nan),
          "null_posterior": retriever_pretraining.get("null_posterior", nan),
          "source_retrieved": retriever_pretraining.get("source_retrieved", nan),
          "minutes": sum(self.timings.get(stage, 0.0) for stage in stages) / 60.0,
      })
    metrics_files = {run: self._path("pretrain", run, "metrics.jsonl")
                     for run in pretraining if PRETRAINING_RUNS[run][1]}
    result = AblationResult(config.seed, rows, dict(self.timings), metrics_files,
                            self.ict_recall, self.files)
    save_result(result, config)
    return result


def run_ablations(config: AblationConfig,
                  log: Callable[[str], None] = print) -> AblationResult:
  """Runs every stage of one seed (`config.seed`, in `config.output_dir`)."""
  return AblationRunner(config, log).run()


def _run_seed_in_process(config: AblationConfig, threads: int) -> AblationResult:
  """A worker process: TensorFlow's thread pools sized before its first op, then one seed."""
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  return run_ablations(config, log=lambda message: print(message, flush=True))


def run_seeds(config: AblationConfig, processes: int = 1,
              log: Callable[[str], None] = print) -> List[AblationResult]:
  """Every seed of `config` (`config.for_seed`), in seed order. With `processes` > 1 the
  seeds run in that many fresh processes at once, each with one intra-op thread (tiny towers
  use a core each better than two threads share one forward); with 1, in this process.
  A seed whose directory holds a finished result with the same settings (`load_result`) is
  reused, not re-run: an interrupted run resumes seed by seed, and seeds can be added later."""
  runs = [config.for_seed(seed) for seed in config.seeds]
  done = {run.seed: load_result(run) for run in runs}
  for seed, result in done.items():
    if result is not None:
      log(f"[seed {seed}] reusing the finished result in {config.for_seed(seed).output_dir}")
  todo = [run for run in runs if done[run.seed] is None]
  if processes <= 1:
    done.update({run.seed: run_ablations(run, log) for run in todo})
  elif todo:
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(min(processes, len(todo)),
                                                mp_context=context) as pool:
      futures = {run.seed: pool.submit(_run_seed_in_process, run, 1) for run in todo}
      done.update({seed: future.result() for seed, future in futures.items()})
  return [done[seed] for seed in config.seeds]
