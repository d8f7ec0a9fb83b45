"""The knowledge-world ablation benchmark: REALM Table 2 (and Figure 4) in miniature, over seeds.

One seed writes a knowledge world (`writer.write_world`), trains one ICT warm-start, the
readers' masked-LM pre-training ("BERT"), the REALM pre-training variants, fine-tunes each
system on the world's Open-QA questions and reports

  exact match (test) | zero-shot retrieval recall@5 (test) | recall@5 after fine-tuning |
  pre-training MLM accuracy, retrieval utility and null-document share | time

for these systems (the rows of the paper's Table 2, every stage the library's own code; a
system is a retriever and a reader, fine-tuned together):

  no_retrieval            BERT reader, fine-tuned and evaluated reading only the null
                          document: an extractive reader with nothing to read (the floor).
  orqa                    ICT retriever + BERT reader (ORQA: retrieval learnt by ICT and
                          fine-tuning only).
  realm_retriever_bert_reader   the REALM-pre-trained retriever + the BERT reader (Table 2's
                          "REALM retriever + Baseline encoder").
  ict_retriever_realm_reader    the ICT retriever + the REALM-pre-trained reader ("Baseline
                          retriever + REALM encoder").
  realm                   ICT retriever + BERT-pairs reader -> REALM pre-training (salient
                          spans, synchronous index refresh every `refresh_every` steps).
  realm_random_token      REALM with BERT-style random-token masks.
  realm_random_span       REALM with random-span masks.
  realm_stale_index       REALM with the index refreshed `stale_factor` (30) times less often.

The readers. "BERT" (`bert`) is a plain masked-LM pre-training of the reader on the X
sentences alone (random-token masks, the null document as its only candidate, so it learns X's
language and nothing about reading a second segment). REALM starts from "BERT-pairs"
(`bert_pairs`): the same masked-LM pre-training over sentence pairs, as BERT reads them, each X
sentence paired with the one block the ICT retriever ranks first for it (K = 1, no null
document, so the retriever gets no gradient) -- a related block when ICT is right, an unrelated
one otherwise, like BERT's next-sentence pairs. A reader trained on single sentences reads a
block worse than nothing when REALM starts, and REALM's gradient then erodes the ICT retriever
before the reader learns to copy (docs/ablations.md). Both use random tokens,
not salient spans, so that they learn the language without memorising the facts.

Seeds. A seed fixes the world, every initialisation and the data order; tiny towers trained
from scratch for a few hundred steps are chaotic, so a claim is a mean over seeds:
`run_seeds` runs seeds as parallel processes (one intra-op thread each), `summarize` gives each
metric's mean and standard deviation and `orderings` each of the paper's orderings as the mean
of its per-seed (paired) differences with its standard error: it holds when the margin exceeds
two standard errors.

Choices for tiny towers trained from scratch (docs/ablations.md, "Tiny towers from scratch"):
every BERT uses `initializer_range=0.2` (at 0.02 a random tiny BERT gives nearly the same [CLS]
vector for every input and ICT cannot start; the reader also learns to copy from a block far
faster at 0.2), no dropout (the world is small and the runs short), learning rates well above
BERT-base's (ICT 3e-3, pre-training 1e-3, fine-tuning 3e-3 with 10% warm-up; pre-training at
3e-3 lets the retriever drift away from ICT's) and a 32-d retrieval projection. X is a corpus of
its own (X != Z), so pre-training does not exclude the "source" block: the block an X example
names is the Z block stating its fact, exactly the block worth retrieving, and the
`source_retrieved` metric then says how often it was among the candidates. Fine-tuning keeps the
paper's shape: the index is frozen, the reader reads the top `reader_top_k` blocks and the
retriever loss covers the top `retriever_top_k` (40, a sixth of the full world's 240 blocks:
with every block in it, fine-tuning made every retriever near perfect and erased the differences
Table 2 is about; with 10, too few questions had an answer among them to fine-tune on).
"""
import concurrent.futures
import dataclasses
import json
import multiprocessing
import os
import shutil
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import configs
from realm_tf.keras import keras
from realm_tf.knowledge_world.world import WorldConfig
from realm_tf.knowledge_world.writer import WorldFiles
from realm_tf.knowledge_world.writer import write_world
from realm_tf.knowledge_world.zero_shot import zero_shot_recall
from realm_tf.models.saving import load_model
from realm_tf.presets import InitConfig
from realm_tf.presets import ModelConfig
from realm_tf.qa import datasets
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.finetune_lib import FineTuneConfig
from realm_tf.qa.finetune_lib import run_finetuning
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.training.ict_lib import IctConfig
from realm_tf.training.ict_lib import train_ict
from realm_tf.training.index_refresh import SynchronousRefresher
from realm_tf.training.plots import plot_retrieval_utility
from realm_tf.training.pretraining_lib import PretrainingConfig
from realm_tf.training.pretraining_lib import RealmPretrainer

VARIANTS = ("no_retrieval", "orqa", "realm_retriever_bert_reader",
            "ict_retriever_realm_reader", "realm", "realm_random_token", "realm_random_span",
            "realm_stale_index")
# variant -> (retriever: "ict" or a pre-training run, reader: a pre-training run)
SYSTEMS = {"no_retrieval": ("ict", "bert"), "orqa": ("ict", "bert"),
           "realm_retriever_bert_reader": ("realm", "bert"),
           "ict_retriever_realm_reader": ("ict", "realm"),
           "realm": ("realm", "realm"),
           "realm_random_token": ("realm_random_token", "realm_random_token"),
           "realm_random_span": ("realm_random_span", "realm_random_span"),
           "realm_stale_index": ("realm_stale_index", "realm_stale_index")}
DESCRIPTIONS = {
    "no_retrieval": "No retrieval (BERT reader, null document only)",
    "orqa": "ORQA (ICT retriever + BERT reader)",
    "realm_retriever_bert_reader": "REALM retriever + BERT reader",
    "ict_retriever_realm_reader": "ICT retriever + REALM reader",
    "realm": "REALM (salient spans)",
    "realm_random_token": "REALM, random-token masks",
    "realm_random_span": "REALM, random-span masks",
    "realm_stale_index": "REALM, 30x staler index",
}
# pre-training run -> (masking, reader it starts from: None = fresh)
_PRETRAINING_RUNS = {"bert": ("random_token", None), "bert_pairs": ("random_token", None),
                     "realm": ("salient_span", "bert_pairs"),
                     "realm_random_token": ("random_token", "bert_pairs"),
                     "realm_random_span": ("random_span", "bert_pairs"),
                     "realm_stale_index": ("salient_span", "bert_pairs")}


def _lineage(run: str) -> List[str]:
  """`run` ("ict" or a pre-training run) after the runs its reader starts from, first to last;
  [] for "ict", which is not a pre-training run."""
  chain = []
  while run is not None and run != "ict":
    chain.append(run)
    run = _PRETRAINING_RUNS[run][1]
  return chain[::-1]


NULL_CORPUS = "null_corpus.jsonl"
# The QA system's stand-in for the null document: one block without content. (A block with an
# empty text cannot go through `RetrieveAndRead`: its span-to-text step gathers from the empty
# tokenization; a lone "." has no answer span either.)
NULL_TEXT = "."
nan = float("nan")


@dataclasses.dataclass(frozen=True)
class AblationConfig:
  """A benchmark run (every seed of it).

  Attributes:
    output_dir: the world, every model and the results go here, one `seed-N` directory per
      seed (replaced).
    world: the knowledge world (its seed is replaced by each run's seed).
    hidden_size, num_layers, num_attention_heads, intermediate_size, initializer_range,
      dropout_rate: the BERT of every tower (`EncoderConfig`).
    projection_size, span_hidden_size: retrieval embedding size and span head width.
    ict_steps, ict_batch_size, ict_learning_rate: the ICT warm-start.
    bert_steps: each reader masked-LM pre-training without retrieval ("BERT", "BERT-pairs").
    pretrain_steps, pretrain_batch_size, pretrain_learning_rate, num_candidates,
      refresh_every, stale_factor, reader_warmup_steps: REALM pre-training (K includes the
      null document; the stale variant refreshes every `refresh_every * stale_factor` steps;
      the first `reader_warmup_steps` train the reader alone, `PretrainingConfig`).
    finetune_steps, finetune_batch_size, finetune_learning_rate, reader_top_k,
      retriever_top_k, eval_every: Open-QA fine-tuning (warm-up over the first 10% of the
      steps; the best dev checkpoint is evaluated on test).
    recall_k: k of zero-shot recall@k.
    variants: which rows to run (their pre-training runs are trained as needed).
    seeds: one run per seed; `seed` is the run at hand.
  """
  output_dir: str
  world: WorldConfig = WorldConfig()
  hidden_size: int = 64
  num_layers: int = 2
  num_attention_heads: int = 4
  intermediate_size: int = 128
  initializer_range: float = 0.2
  dropout_rate: float = 0.0
  projection_size: int = 32
  span_hidden_size: int = 64
  ict_steps: int = 300
  bert_steps: int = 200
  ict_batch_size: int = 32
  ict_learning_rate: float = 3e-3
  pretrain_steps: int = 600
  pretrain_batch_size: int = 16
  pretrain_learning_rate: float = 1e-3
  num_candidates: int = 8
  refresh_every: int = 5
  stale_factor: int = 30
  reader_warmup_steps: int = 0
  finetune_steps: int = 300
  finetune_batch_size: int = 8
  finetune_learning_rate: float = 3e-3
  reader_top_k: int = 5
  retriever_top_k: int = 40
  eval_every: int = 100
  recall_k: int = 5
  variants: Tuple[str, ...] = VARIANTS
  seeds: Tuple[int, ...] = (0, 1, 2)
  seed: int = 0

  def __post_init__(self):
    unknown = [v for v in self.variants if v not in VARIANTS]
    if unknown or not self.variants:
      raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {unknown}")
    if not self.seeds or len(set(self.seeds)) != len(self.seeds):
      raise ValueError(f"seeds must be distinct and non-empty, got {self.seeds}")

  def for_seed(self, seed: int) -> "AblationConfig":
    """The run of one seed: its own directory, world and initialisation."""
    return dataclasses.replace(self, seed=seed, output_dir=os.path.join(self.output_dir,
                                                                         f"seed-{seed}"),
                               world=dataclasses.replace(self.world, seed=seed))

  def encoder(self, vocab_size: int, max_length: int = 128) -> configs.EncoderConfig:
    return configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
        num_attention_heads=self.num_attention_heads,
        intermediate_size=self.intermediate_size, hidden_act="gelu",
        dropout_rate=self.dropout_rate, attention_dropout_rate=self.dropout_rate,
        max_position_embeddings=max(128, max_length), initializer_range=self.initializer_range)

  def pretraining_runs(self) -> List[str]:
    """The pre-training runs the variants need, each after the run its reader starts from."""
    runs = []
    for variant in self.variants:
      for system_run in SYSTEMS[variant]:
        runs += [run for run in _lineage(system_run) if run not in runs]
    return runs


@dataclasses.dataclass
class AblationResult:
  """One seed. rows: one dict per variant (see `TABLE_COLUMNS`); timings: seconds per stage;
  metrics_files: {REALM pre-training run: metrics.jsonl}."""
  seed: int
  rows: List[Dict[str, object]]
  timings: Dict[str, float]
  metrics_files: Dict[str, str]
  ict_recall: float
  world: WorldFiles


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
    self.encoder = self.config.encoder(
        self.tokenizer.vocab_size, max(self.lengths["qa_reader"],
                                       self.lengths["pretrain_query"] + self.lengths["block"]))
    self.test = datasets.load_examples(self.files.test)
    with open(self._path(NULL_CORPUS), "w", encoding="utf-8") as f:
      f.write(json.dumps({"id": 0, "title": "", "text": NULL_TEXT}) + "\n")
    self.log(f"world: {len(self.store)} blocks, {self.files.num_examples} X sentences, "
             f"vocabulary {self.tokenizer.vocab_size}, lengths {self.lengths}")
    return self.files

  def _recall(self, retriever) -> float:
    return zero_shot_recall(retriever, self.store, self.tokenizer, self.test,
                            self.config.recall_k, self.lengths["qa_query"],
                            self.lengths["block"])

  def train_ict(self) -> float:
    """ICT warm-start; returns its zero-shot recall@k."""
    config = self.config
    keras.utils.set_random_seed(config.seed)
    retriever = configs.build_retriever(configs.RetrieverConfig(
        encoder=self.encoder, projection_size=config.projection_size))
    retriever.build()
    train_ict(IctConfig(model_dir=self._path("ict"), num_steps=config.ict_steps,
                        batch_size=config.ict_batch_size,
                        learning_rate=config.ict_learning_rate,
                        query_length=self.lengths["pretrain_query"],
                        block_length=self.lengths["block"],
                        checkpoint_every=config.ict_steps, seed=config.seed),
              retriever, self.store, self.tokenizer, verbose=False)
    self.ict_recall = self._recall(retriever)
    self.log(f"[seed {config.seed}] ICT zero-shot recall@{config.recall_k}: "
             f"{self.ict_recall:.3f}")
    return self.ict_recall

  def _fresh_reader(self):
    keras.utils.set_random_seed(self.config.seed + 1)  # the same reader init in every run
    reader = configs.build_reader(configs.ReaderConfig(
        encoder=self.encoder, span_hidden_size=self.config.span_hidden_size))
    reader.build()
    return reader

  def pretrain(self, run: str) -> Dict[str, float]:
    """One pre-training run of `_PRETRAINING_RUNS` (after the run its reader starts from)."""
    config = self.config
    masking, start = _PRETRAINING_RUNS[run]
    bert = start is None
    if bert:  # K = 1: the null document alone ("bert") or the ICT top block ("bert_pairs")
      num_candidates, null_document, every = 1, run == "bert", config.bert_steps + 1
    else:
      num_candidates, null_document = config.num_candidates, True
      every = config.refresh_every * (config.stale_factor if run == "realm_stale_index" else 1)
    model_dir = self._path("pretrain", run)
    retriever = load_model(self._path("ict", "retriever"))
    reader = (self._fresh_reader() if bert else
              load_model(self._path("pretrain", start, "reader")))
    refresher = SynchronousRefresher(
        os.path.join(model_dir, "index"), every, self.store,
        (self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id),
        kind="brute_force", block_length=self.lengths["block"])
    steps = config.bert_steps if bert else config.pretrain_steps
    history = RealmPretrainer(
        PretrainingConfig(
            model_dir=model_dir, examples_dir=self.files.directory, num_steps=steps,
            batch_size=config.pretrain_batch_size,
            learning_rate=config.pretrain_learning_rate,
            num_candidates=num_candidates, null_document=null_document,
            exclude_source=False, masking=masking,
            query_length=self.lengths["pretrain_query"], block_length=self.lengths["block"],
            checkpoint_every=steps, reader_warmup_steps=0 if bert else config.reader_warmup_steps,
            seed=config.seed),
        retriever, reader, self.store, self.tokenizer, refresher).train(verbose=False)
    tenth = max(1, len(history) // 10)
    mean = lambda records, key: float(np.mean([h[key] for h in records]))
    tail = history[-tenth:]
    summary = {key: mean(tail, key) for key in ("mlm_accuracy", "loss")}
    if not bert:
      summary.update({key: mean(tail, key) for key in (
          "retrieval_utility", "null_prior", "null_posterior", "source_retrieved")})
      summary["null_prior_first"] = mean(history[:tenth], "null_prior")
      summary["recall"] = self._recall(retriever)
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

  def finetune(self, variant: str) -> Dict[str, float]:
    """Fine-tunes `variant` and evaluates its best dev checkpoint on test."""
    config = self.config
    model_dir = self._path("finetune", variant)
    if tf.io.gfile.exists(model_dir):
      tf.io.gfile.rmtree(model_dir)
    corpus = self._path(NULL_CORPUS) if variant == "no_retrieval" else self.files.directory
    run_finetuning(FineTuneConfig(
        model_dir=model_dir, corpus=corpus, train_data=self.files.train,
        vocab_file=self.files.vocab_file, dev_data=self.files.dev,
        model=ModelConfig(encoder=self.encoder, projection_size=config.projection_size,
                          span_hidden_size=config.span_hidden_size,
                          query_length=self.lengths["qa_query"],
                          block_length=self.lengths["block"],
                          reader_length=self.lengths["qa_reader"]),
        init=InitConfig(checkpoint=self._init_checkpoint(variant)),
        batch_size=config.finetune_batch_size, num_train_steps=config.finetune_steps,
        learning_rate=config.finetune_learning_rate,
        warmup_steps=max(1, config.finetune_steps // 10), reader_top_k=config.reader_top_k,
        retriever_top_k=max(config.reader_top_k, config.retriever_top_k),
        index_kind="brute_force", eval_every_steps=config.eval_every,
        checkpoint_every_steps=config.finetune_steps, keep_checkpoints=1,
        log_every_steps=max(1, config.finetune_steps // 4), seed=config.seed),
        log=lambda message: None)
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
          f"pretrain/{run}" for run in _lineage(retriever_run) + _lineage(reader_run)}
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
                     for run in pretraining if _PRETRAINING_RUNS[run][1]}
    result = AblationResult(config.seed, rows, dict(self.timings), metrics_files,
                            self.ict_recall, self.files)
    save_result(result, config)
    return result


RESULT_FILE = "result.json"


def _settings(config: AblationConfig) -> Dict[str, object]:
  """What a seed's result depends on: every setting but the list of the other seeds."""
  settings = json.loads(json.dumps(dataclasses.asdict(config), default=str))
  del settings["seeds"]
  return settings


def save_result(result: AblationResult, config: AblationConfig) -> str:
  """Writes a finished seed's result into its directory (`RESULT_FILE`), with its settings."""
  path = os.path.join(config.output_dir, RESULT_FILE)
  with open(path + ".tmp", "w", encoding="utf-8") as f:
    json.dump({"config": _settings(config), "seed": result.seed, "rows": result.rows,
               "timings_s": result.timings, "metrics_files": result.metrics_files,
               "ict_recall": result.ict_recall, "world": dataclasses.asdict(result.world)},
              f, indent=1)
  os.replace(path + ".tmp", path)
  return path


def load_result(config: AblationConfig) -> Optional[AblationResult]:
  """The finished result in `config.output_dir` if it was run with exactly `config`'s
  settings, else None."""
  path = os.path.join(config.output_dir, RESULT_FILE)
  if not os.path.exists(path):
    return None
  with open(path, encoding="utf-8") as f:
    saved = json.load(f)
  if saved.get("config") != _settings(config):
    return None
  return AblationResult(saved["seed"], saved["rows"], saved["timings_s"],
                        saved["metrics_files"], saved["ict_recall"],
                        WorldFiles(**saved["world"]))


def full_config(output_dir: str) -> AblationConfig:
  """The benchmark preset: the table of docs/ablations.md (3 seeds)."""
  return AblationConfig(output_dir=output_dir, world=WorldConfig(num_entities=120),
                        ict_steps=600, ict_batch_size=32, bert_steps=200, pretrain_steps=600,
                        finetune_steps=150, eval_every=50)


def small_config(output_dir: str) -> AblationConfig:
  """The `make test` preset: REALM and no retrieval on a smaller world, every stage
  shortened, 3 seeds. It compares REALM with the null document only, not retrievers with each
  other, so its retriever loss covers every block (fine-tuning learns retrieval it lacks)."""
  return AblationConfig(output_dir=output_dir, world=WorldConfig(num_entities=60),
                        ict_steps=300, ict_batch_size=32, bert_steps=100, pretrain_steps=250,
                        finetune_steps=150, eval_every=50, variants=("no_retrieval", "realm"),
                        retriever_top_k=1 << 20)


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
  else:
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(min(processes, len(todo)),
                                                mp_context=context) as pool:
      futures = {run.seed: pool.submit(_run_seed_in_process, run, 1) for run in todo}
      done.update({seed: future.result() for seed, future in futures.items()})
  return [done[seed] for seed in config.seeds]


# Statistics -----------------------------------------------------------------------------------

METRICS = ("exact_match", "zero_shot_recall", "finetuned_recall", "pretrain_retrieval_utility",
           "null_prior", "null_posterior", "source_retrieved", "minutes")


def seed_values(results: Sequence[AblationResult], variant: str, metric: str) -> np.ndarray:
  """float [S]: `metric` of `variant` in each seed ("ict" + "zero_shot_recall": the ICT
  warm-start's recall)."""
  if variant == "ict":
    return np.array([r.ict_recall for r in results], float)
  return np.array([next(row[metric] for row in r.rows if row["variant"] == variant)
                   for r in results], float)


def summarize(results: Sequence[AblationResult]) -> List[Dict[str, object]]:
  """One row per variant: each metric's mean over seeds and its standard deviation
  (`<metric>_std`, ddof 1)."""
  rows = []
  for row in results[0].rows:
    summary = {"variant": row["variant"], "system": row["system"]}
    for metric in METRICS:
      values = seed_values(results, row["variant"], metric)
      summary[metric] = float(np.mean(values))
      summary[f"{metric}_std"] = float(np.std(values, ddof=1)) if len(values) > 1 else nan
    rows.append(summary)
  return rows


# (statement, metric, better variant, worse variant): REALM Table 2's expected orderings.
ORDERINGS = (
    ("EM: REALM > ORQA", "exact_match", "realm", "orqa"),
    ("EM: ORQA > no retrieval", "exact_match", "orqa", "no_retrieval"),
    ("EM: REALM > no retrieval", "exact_match", "realm", "no_retrieval"),
    ("EM: REALM > REALM retriever + BERT reader", "exact_match", "realm",
     "realm_retriever_bert_reader"),
    ("EM: REALM retriever + BERT reader > ORQA", "exact_match", "realm_retriever_bert_reader",
     "orqa"),
    ("EM: REALM > ICT retriever + REALM reader", "exact_match", "realm",
     "ict_retriever_realm_reader"),
    ("EM: ICT retriever + REALM reader > ORQA", "exact_match", "ict_retriever_realm_reader",
     "orqa"),
    ("zero-shot R@5: REALM > ICT warm-start", "zero_shot_recall", "realm", "ict"),
    ("zero-shot R@5: salient spans > random spans", "zero_shot_recall", "realm",
     "realm_random_span"),
    ("zero-shot R@5: random spans > random tokens", "zero_shot_recall", "realm_random_span",
     "realm_random_token"),
    ("EM: salient spans > random spans", "exact_match", "realm", "realm_random_span"),
    ("EM: random spans > random tokens", "exact_match", "realm_random_span",
     "realm_random_token"),
    ("zero-shot R@5: REALM > 30x staler index", "zero_shot_recall", "realm",
     "realm_stale_index"),
    ("EM: REALM > 30x staler index", "exact_match", "realm", "realm_stale_index"),
)


@dataclasses.dataclass(frozen=True)
class Ordering:
  """`better` > `worse` on `metric`: margin = mean over seeds of the paired difference,
  se = its standard error; verdict "holds" (margin > 2 se), "not significant" (0 < margin <=
  2 se), "no difference" (margin 0) or "reversed" (margin < 0)."""
  statement: str
  metric: str
  better: str
  worse: str
  margin: float
  se: float
  seeds: int

  @property
  def verdict(self) -> str:
    if self.margin > 2 * self.se and self.margin > 0:
      return "holds"
    if self.margin > 0:
      return "not significant"
    return "no difference" if self.margin == 0 else "reversed"


def orderings(results: Sequence[AblationResult]) -> List[Ordering]:
  """Those of `ORDERINGS` whose variants were run."""
  run = {row["variant"] for row in results[0].rows} | {"ict"}
  found = []
  for statement, metric, better, worse in ORDERINGS:
    if better in run and worse in run:
      differences = (seed_values(results, better, metric) -
                     seed_values(results, worse, metric))
      se = (float(np.std(differences, ddof=1) / np.sqrt(len(differences)))
            if len(differences) > 1 else nan)
      found.append(Ordering(statement, metric, better, worse, float(np.mean(differences)),
                            se, len(differences)))
  return found


# Reporting ------------------------------------------------------------------------------------

TABLE_COLUMNS = ("system", "exact_match", "zero_shot_recall", "finetuned_recall",
                 "pretrain_retrieval_utility", "null_prior", "null_posterior",
                 "source_retrieved", "minutes")
_HEADERS = {"system": "system", "exact_match": "Open-QA EM (test)",
            "zero_shot_recall": "zero-shot R@5", "finetuned_recall": "fine-tuned R@5",
            "pretrain_retrieval_utility": "pre-train RU (nats)",
            "null_prior": "p(∅|x)", "null_posterior": "p(∅|y,x)",
            "source_retrieved": "fact block retrieved", "minutes": "minutes"}


def _cell(row: Dict[str, object], column: str) -> str:
  value = row[column]
  if not isinstance(value, float):
    return str(value)
  if np.isnan(value):
    return "—"
  std = row.get(f"{column}_std", nan)
  return f"{value:.3f}" if np.isnan(std) else f"{value:.3f} ± {std:.3f}"


def markdown_table(rows: Sequence[Dict[str, object]], recall_k: int = 5) -> str:
  """Rows of `summarize` (mean ± std) or of one seed."""
  headers = [_HEADERS[c].replace("R@5", f"R@{recall_k}") for c in TABLE_COLUMNS]
  lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
  lines += ["| " + " | ".join(_cell(row, c) for c in TABLE_COLUMNS) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def orderings_table(found: Sequence[Ordering]) -> str:
  lines = ["| expected ordering | margin (mean paired difference) | 2 standard errors | "
           "verdict |", "|---|---|---|---|"]
  lines += [f"| {o.statement} | {o.margin:+.3f} | {2 * o.se:.3f} | {o.verdict} |"
            for o in found]
  return "\n".join(lines) + "\n"


def write_report(results: Sequence[AblationResult], config: AblationConfig, results_dir: str,
                 command: str, name: str = "ablations") -> Dict[str, str]:
  """Writes `<name>.md` (mean ± std table, orderings with margins, per-seed values, settings,
  timings), `<name>.json` and `<name>_ru.png` (retrieval utility vs pre-training step, REALM
  Figure 4, one line per run and seed)."""
  os.makedirs(results_dir, exist_ok=True)
  png = os.path.join(results_dir, f"{name}_ru.png")
  runs = {f"{run} (seed {r.seed})": r.metrics_files[run]
          for run in results[0].metrics_files for r in results}
  if runs:
    plot_retrieval_utility(runs, png, smoothing=max(1, config.pretrain_steps // 30),
                           groups={label: label.split(" (")[0] for label in runs})
  rows = summarize(results)
  found = orderings(results)
  seeds = [r.seed for r in results]
  ict = seed_values(results, "ict", "zero_shot_recall")
  per_seed = ["| seed | ICT R@5 | " + " | ".join(
      f"{row['variant']} EM / R@5" for row in results[0].rows) + " |",
      "|" + "---|" * (2 + len(results[0].rows))]
  for r in results:
    per_seed.append(f"| {r.seed} | {r.ict_recall:.3f} | " + " | ".join(
        f"{row['exact_match']:.3f} / {_cell(row, 'zero_shot_recall')}" for row in r.rows) +
        " |")
  world = config.world
  total_minutes = sum(sum(r.timings.values()) for r in results) / 60
  lines = [
      f"# Knowledge-world ablations ({name})", "",
      f"Command: `{command}`", "",
      f"Mean ± standard deviation over seeds {seeds}:", "",
      markdown_table(rows, config.recall_k),
      f"ICT warm-start zero-shot R@{config.recall_k}: {ict.mean():.3f} ± "
      f"{ict.std(ddof=1) if len(ict) > 1 else nan:.3f}. Per seed: {world.num_entities} people, "
      f"{results[0].world.num_blocks} blocks, {results[0].world.num_examples} X sentences, "
      f"{int(sum(1 for _ in open(results[0].world.test, encoding='utf-8')))} test questions.",
      "", "Expected orderings (REALM paper), over the seeds:", "", orderings_table(found),
      "Per seed:", "", "\n".join(per_seed), "",
      f"Retrieval utility vs pre-training step: `{os.path.basename(png)}`.", "",
      f"Stage timings, summed over seeds: {total_minutes:.1f} process-minutes.", "",
      "Settings: `" + json.dumps(dataclasses.asdict(config), default=str) + "`", ""]
  markdown = "\n".join(lines)
  md_path = os.path.join(results_dir, f"{name}.md")
  with open(md_path, "w", encoding="utf-8") as f:
    f.write(markdown)
  json_path = os.path.join(results_dir, f"{name}.json")
  with open(json_path, "w", encoding="utf-8") as f:
    json.dump({"command": command, "config": dataclasses.asdict(config), "summary": rows,
               "orderings": [dict(dataclasses.asdict(o), verdict=o.verdict) for o in found],
               "seeds": [{"seed": r.seed, "rows": r.rows, "ict_recall": r.ict_recall,
                          "timings_s": r.timings} for r in results]},
              f, indent=1, default=str)
  return {"markdown": md_path, "json": json_path, "png": png}
