"""The knowledge-world ablation benchmark: REALM Table 2 (and Figure 4) in miniature.

One run writes a knowledge world (`writer.write_world`), trains one ICT warm-start, the
pre-training variants, fine-tunes each on the world's Open-QA questions and reports

  exact match (test) | zero-shot retrieval recall@5 (test) | recall@5 after fine-tuning |
  pre-training MLM accuracy and retrieval utility | time

for these systems (the paper's ablations, every stage the library's own code):

  no_retrieval        the "BERT" reader (below), fine-tuned and evaluated reading only the
                      null document: an extractive reader with nothing to read (the floor).
  orqa                the ICT retriever + the "BERT" reader, fine-tuned: ORQA-like (retrieval
                      is learnt by ICT and fine-tuning only).
  realm               ICT retriever + "BERT" reader -> REALM pre-training (salient spans,
                      synchronous index refresh every `refresh_every` steps) -> fine-tuning.
  realm_random_token  REALM with BERT-style random-token masks.
  realm_random_span   REALM with random-span masks.
  realm_stale_index   REALM with the index refreshed `stale_factor` (30) times less often.

"BERT" is the reader every system starts from, as every system of the paper starts from BERT:
a plain masked-LM pre-training of the reader on X (`RealmPretrainer` with BERT-style
random-token masks, `bert_steps` steps) over sentence pairs, as BERT reads them: each X
sentence is paired with the one block the ICT retriever ranks first for it (K = 1, no null
document, so the retriever gets no gradient) -- a related block when ICT is right, an unrelated
one otherwise, like BERT's next-sentence pairs. It uses random tokens, not salient spans, so
that it learns X's language without memorising the facts themselves (in trial runs, a reader
that had memorised facts predicted better from the null document than from the gold block, and
REALM then moved the retrieval mass to the null document). It reads a second segment because a
reader trained on single sentences (the first version of this benchmark) gave the answer a
lower likelihood with the gold block than with the null document when REALM started, so
REALM's gradient first eroded the ICT retriever (zero-shot recall@5 0.40 -> 0.29 on the small
preset); with sentence pairs the same run raises it (0.40 -> 0.48).
All variants start from the same ICT retriever and the same "BERT"
reader and train for the same steps with the same settings; only the named switch differs.

Choices for tiny towers trained from scratch (README "Tiny random towers"): every BERT uses
`initializer_range=0.2` (at 0.02 a random tiny BERT gives nearly the same [CLS] vector for every
input and ICT cannot start; the reader also learns to copy from a block far faster at 0.2), no
dropout (the world is small and the runs short), learning rates well above BERT-base's (ICT
3e-3, pre-training 1e-3, fine-tuning 3e-3 with 10% warm-up; pre-training at 3e-3 lets the
retriever drift away from ICT's) and a 32-d retrieval projection. X is a corpus of its own
(X != Z), so pre-training does not exclude the "source" block: the block an X example names is
the Z block stating its fact, exactly the block worth retrieving, and the `source_retrieved`
metric then says how often it was among the candidates.
"""
import dataclasses
import json
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
from realm_tf.qa import datasets
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.finetune_lib import FineTuneConfig
from realm_tf.qa.finetune_lib import run_finetuning
from realm_tf.qa.model import InitConfig
from realm_tf.qa.model import ModelConfig
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.training.ict_lib import IctConfig
from realm_tf.training.ict_lib import train_ict
from realm_tf.training.index_refresh import SynchronousRefresher
from realm_tf.training.plots import plot_retrieval_utility
from realm_tf.training.pretraining_lib import PretrainingConfig
from realm_tf.training.pretraining_lib import RealmPretrainer

VARIANTS = ("no_retrieval", "orqa", "realm", "realm_random_token", "realm_random_span",
            "realm_stale_index")
# variant -> (pre-training run it fine-tunes, retriever source)
_PRETRAINING = {"no_retrieval": "bert", "orqa": "bert", "realm": "realm",
                "realm_random_token": "realm_random_token",
                "realm_random_span": "realm_random_span",
                "realm_stale_index": "realm_stale_index"}
DESCRIPTIONS = {
    "no_retrieval": "No retrieval (null document only)",
    "orqa": "ICT retriever + MLM reader, fine-tuned (ORQA-like)",
    "realm": "REALM (salient spans)",
    "realm_random_token": "REALM, random-token masks",
    "realm_random_span": "REALM, random-span masks",
    "realm_stale_index": "REALM, 30x staler index",
}
NULL_CORPUS = "null_corpus.jsonl"
# The QA system's stand-in for the null document: one block without content. (A block with an
# empty text cannot go through `RetrieveAndRead`: its span-to-text step gathers from the empty
# tokenization; a lone "." has no answer span either.)
NULL_TEXT = "."


@dataclasses.dataclass(frozen=True)
class AblationConfig:
  """A benchmark run.

  Attributes:
    output_dir: the world, every model and the results go here (replaced when `fresh`).
    world: the knowledge world.
    hidden_size, num_layers, num_attention_heads, intermediate_size, initializer_range,
      dropout_rate: the BERT of every tower (`EncoderConfig`).
    projection_size, span_hidden_size: retrieval embedding size and span head width.
    ict_steps, ict_batch_size, ict_learning_rate: the ICT warm-start.
    bert_steps: the reader's masked-LM pre-training without retrieval ("BERT").
    pretrain_steps, pretrain_batch_size, pretrain_learning_rate, num_candidates,
      refresh_every, stale_factor: REALM pre-training (K includes the null document; the
      stale variant refreshes every `refresh_every * stale_factor` steps).
    finetune_steps, finetune_batch_size, finetune_learning_rate, reader_top_k,
      eval_every: Open-QA fine-tuning (warm-up over the first 10% of the steps; the
      retriever loss covers every block; the best dev checkpoint is evaluated on test).
    recall_k: k of zero-shot recall@k.
    variants: which rows to run (their pre-training runs are trained as needed).
    seed: world, initialisation and data order.
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
  refresh_every: int = 20
  stale_factor: int = 30
  finetune_steps: int = 300
  finetune_batch_size: int = 8
  finetune_learning_rate: float = 3e-3
  reader_top_k: int = 5
  eval_every: int = 100
  recall_k: int = 5
  variants: Tuple[str, ...] = VARIANTS
  seed: int = 0

  def __post_init__(self):
    unknown = [v for v in self.variants if v not in VARIANTS]
    if unknown or not self.variants:
      raise ValueError(f"variants must be a non-empty subset of {VARIANTS}, got {unknown}")

  def encoder(self, vocab_size: int, max_length: int = 128) -> configs.EncoderConfig:
    return configs.EncoderConfig(
        vocab_size=vocab_size, hidden_size=self.hidden_size, num_layers=self.num_layers,
        num_attention_heads=self.num_attention_heads,
        intermediate_size=self.intermediate_size, hidden_act="gelu",
        dropout_rate=self.dropout_rate, attention_dropout_rate=self.dropout_rate,
        max_position_embeddings=max(128, max_length), initializer_range=self.initializer_range)

  def pretraining_runs(self) -> List[str]:
    runs = ["bert"]
    for variant in self.variants:
      if _PRETRAINING[variant] not in runs:
        runs.append(_PRETRAINING[variant])
    return runs


@dataclasses.dataclass
class AblationResult:
  """rows: one dict per variant (see `TABLE_COLUMNS`); timings: seconds per stage;
  metrics_files: {pre-training run: metrics.jsonl}; paths of the written results."""
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
  """Runs the stages of an `AblationConfig`; `run()` does them all.

  Args:
    config: the run.
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
    self.log(f"[{name}] {self.timings[name]:.1f} s")
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
    self.log(f"ICT zero-shot recall@{config.recall_k}: {self.ict_recall:.3f}")
    return self.ict_recall

  def _fresh_reader(self):
    keras.utils.set_random_seed(self.config.seed + 1)  # the same reader init in every run
    reader = configs.build_reader(configs.ReaderConfig(
        encoder=self.encoder, span_hidden_size=self.config.span_hidden_size))
    reader.build()
    return reader

  def pretrain(self, run: str) -> Dict[str, float]:
    """One pre-training run ("bert" or a REALM variant, which starts from "bert")."""
    config = self.config
    null = run == "bert"
    masking = {"bert": "random_token", "realm_random_token": "random_token",
               "realm_random_span": "random_span"}.get(run, "salient_span")
    every = config.refresh_every * (config.stale_factor if run == "realm_stale_index" else 1)
    model_dir = self._path("pretrain", run)
    retriever = load_model(self._path("ict", "retriever"))
    reader = self._fresh_reader() if null else load_model(self._path("pretrain", "bert",
                                                                     "reader"))
    refresher = SynchronousRefresher(
        os.path.join(model_dir, "index"), config.bert_steps + 1 if null else every,
        self.store, (self.tokenizer.cls_id, self.tokenizer.sep_id, self.tokenizer.pad_id),
        kind="brute_force", block_length=self.lengths["block"])
    history = RealmPretrainer(
        PretrainingConfig(
            model_dir=model_dir, examples_dir=self.files.directory,
            num_steps=config.bert_steps if null else config.pretrain_steps,
            batch_size=config.pretrain_batch_size,
            learning_rate=config.pretrain_learning_rate,
            num_candidates=1 if null else config.num_candidates, null_document=not null,
            exclude_source=False, masking=masking,
            query_length=self.lengths["pretrain_query"], block_length=self.lengths["block"],
            checkpoint_every=max(config.bert_steps, config.pretrain_steps), seed=config.seed),
        retriever, reader, self.store, self.tokenizer, refresher).train(verbose=False)
    tail = history[-max(1, len(history) // 10):]
    summary = {"mlm_accuracy": float(np.mean([h["mlm_accuracy"] for h in tail])),
               "retrieval_utility": float(np.mean([h.get("retrieval_utility", 0.0)
                                                   for h in tail])),
               "loss": float(np.mean([h["loss"] for h in tail]))}
    if not null:
      summary["recall"] = self._recall(retriever)
      summary["source_retrieved"] = float(np.mean([h["source_retrieved"] for h in tail]))
    self.log(f"pre-training {run}: " + " ".join(f"{k}={v:.3f}" for k, v in summary.items()))
    return summary

  def _init_checkpoint(self, variant: str) -> str:
    if variant == "orqa":
      prefix = self._path("finetune", "orqa_init", "ckpt")
      if not tf.io.gfile.exists(prefix + ".index"):
        retriever = load_model(self._path("ict", "retriever"))
        reader = load_model(self._path("pretrain", "bert", "reader"))
        tf.train.Checkpoint(retriever=retriever, reader=reader).write(prefix)
      return prefix
    return self._path("pretrain", _PRETRAINING[variant], "checkpoints")

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
        retriever_top_k=max(config.reader_top_k, len(self.store)),
        index_kind="brute_force", eval_every_steps=config.eval_every,
        checkpoint_every_steps=config.finetune_steps, keep_checkpoints=1,
        log_every_steps=max(1, config.finetune_steps // 4), seed=config.seed),
        log=lambda message: None)
    model = QAModel.load(find_model_dir(model_dir))
    result = evaluate(model.system(k=config.reader_top_k), self.test,
                      EvalConfig(recall_ks=(config.recall_k,)),
                      predictions_path=os.path.join(model_dir, "test_predictions.jsonl"))
    metrics = {"exact_match": result.metrics["exact_match"],
               "finetuned_recall": result.metrics.get(f"recall@{config.recall_k}",
                                                      float("nan"))}
    self.log(f"fine-tuned {variant}: " + " ".join(f"{k}={v:.3f}" for k, v in metrics.items()))
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
      run = _PRETRAINING[variant]
      pre = pretraining[run]
      retrieves = variant != "no_retrieval"
      recall = (self.ict_recall if variant == "orqa" else pre.get("recall", float("nan"))
                if retrieves else float("nan"))
      rows.append({
          "variant": variant, "system": DESCRIPTIONS[variant],
          "exact_match": finetuned["exact_match"],
          "zero_shot_recall": recall,
          "finetuned_recall": finetuned["finetuned_recall"] if retrieves else float("nan"),
          "pretrain_mlm_accuracy": pre["mlm_accuracy"],
          "pretrain_retrieval_utility": pre["retrieval_utility"] if run != "bert"
                                        else float("nan"),
          "minutes": (self.timings["pretrain/bert"] + self.timings[f"finetune/{variant}"] +
                      (self.timings[f"pretrain/{run}"] if run != "bert" else 0.0) +
                      (self.timings["ict"] if variant != "no_retrieval" else 0.0)) / 60.0,
      })
    metrics_files = {run: self._path("pretrain", run, "metrics.jsonl")
                     for run in pretraining if run != "bert"}
    return AblationResult(rows, dict(self.timings), metrics_files, self.ict_recall, self.files)


def full_config(output_dir: str) -> AblationConfig:
  """The benchmark preset: the README table (<= 30 min on 2 CPU cores)."""
  return AblationConfig(output_dir=output_dir, world=WorldConfig(num_entities=120),
                        ict_steps=600, ict_batch_size=32, bert_steps=200, pretrain_steps=600,
                        finetune_steps=150, eval_every=50)


def small_config(output_dir: str) -> AblationConfig:
  """The `make test` preset (<= 3 min on 2 CPU cores): REALM and no retrieval on a smaller
  world, every stage shortened."""
  return AblationConfig(output_dir=output_dir, world=WorldConfig(num_entities=60),
                        ict_steps=300, ict_batch_size=32, bert_steps=100, pretrain_steps=250,
                        finetune_steps=150, eval_every=50, variants=("no_retrieval", "realm"))


def run_ablations(config: AblationConfig,
                  log: Callable[[str], None] = print) -> AblationResult:
  """Runs every stage of `config`; see the module docstring."""
  return AblationRunner(config, log).run()


# Reporting ------------------------------------------------------------------------------------

TABLE_COLUMNS = ("system", "exact_match", "zero_shot_recall", "finetuned_recall",
                 "pretrain_mlm_accuracy", "pretrain_retrieval_utility", "minutes")
_HEADERS = {"system": "system", "exact_match": "Open-QA EM (test)",
            "zero_shot_recall": "zero-shot R@5", "finetuned_recall": "fine-tuned R@5",
            "pretrain_mlm_accuracy": "pre-train MLM acc.",
            "pretrain_retrieval_utility": "pre-train RU (nats)", "minutes": "minutes"}


def _cell(value) -> str:
  if isinstance(value, float):
    return "—" if np.isnan(value) else f"{value:.3f}"
  return str(value)


def markdown_table(rows: Sequence[Dict[str, object]], recall_k: int = 5) -> str:
  headers = [_HEADERS[c].replace("R@5", f"R@{recall_k}") for c in TABLE_COLUMNS]
  lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
  lines += ["| " + " | ".join(_cell(row[c]) for c in TABLE_COLUMNS) + " |" for row in rows]
  return "\n".join(lines) + "\n"


def orderings(rows: Sequence[Dict[str, object]], ict_recall: float) -> List[Tuple[str, bool]]:
  """The paper's expected orderings that these rows can test: (statement, holds)."""
  by = {row["variant"]: row for row in rows}
  checks = []

  def em(variant):
    return by[variant]["exact_match"]

  if {"realm", "orqa", "no_retrieval"} <= set(by):
    checks.append(("EM: REALM > ORQA-like > no retrieval",
                   em("realm") > em("orqa") > em("no_retrieval")))
  elif {"realm", "no_retrieval"} <= set(by):
    checks.append(("EM: REALM > no retrieval", em("realm") > em("no_retrieval")))
  if "realm" in by:
    checks.append(("zero-shot recall: REALM > ICT warm-start",
                   by["realm"]["zero_shot_recall"] > ict_recall))
  if {"realm", "realm_random_span", "realm_random_token"} <= set(by):
    checks.append(("EM: salient spans >= random spans >= random tokens",
                   em("realm") >= em("realm_random_span") >= em("realm_random_token")))
    checks.append(("zero-shot recall: salient spans >= random spans >= random tokens",
                   by["realm"]["zero_shot_recall"] >= by["realm_random_span"]["zero_shot_recall"]
                   >= by["realm_random_token"]["zero_shot_recall"]))
  if {"realm", "realm_stale_index"} <= set(by):
    checks.append(("EM: REALM >= REALM with a 30x staler index",
                   em("realm") >= em("realm_stale_index")))
  return checks


def write_report(result: AblationResult, config: AblationConfig, results_dir: str,
                 command: str, name: str = "ablations") -> Dict[str, str]:
  """Writes `<name>.md` (table, orderings, settings, timings), `<name>.json` and
  `<name>_ru.png` (retrieval utility vs pre-training step, REALM Figure 4)."""
  os.makedirs(results_dir, exist_ok=True)
  png = os.path.join(results_dir, f"{name}_ru.png")
  if result.metrics_files:
    plot_retrieval_utility({run: path for run, path in result.metrics_files.items()}, png,
                           smoothing=max(1, config.pretrain_steps // 30))
  checks = orderings(result.rows, result.ict_recall)
  world = config.world
  lines = [
      f"# Knowledge-world ablations ({name})", "",
      f"Command: `{command}`", "",
      markdown_table(result.rows, config.recall_k),
      f"ICT warm-start zero-shot recall@{config.recall_k}: {result.ict_recall:.3f}. "
      f"Test questions: {int(sum(1 for _ in open(result.world.test, encoding='utf-8')))}; "
      f"world: {world.num_entities} people, {result.world.num_blocks} blocks, "
      f"{result.world.num_examples} X sentences (seed {world.seed}).", "",
      "Expected orderings (REALM paper) on this run:", ""]
  lines += [f"- {statement}: {'holds' if holds else 'does NOT hold'}"
            for statement, holds in checks]
  lines += ["", f"Retrieval utility vs pre-training step: `{os.path.basename(png)}`.", "",
            "Stage timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in
                                                result.timings.items()) +
            f"; total {sum(result.timings.values()) / 60:.1f} min.", "",
            "Settings: `" + json.dumps(dataclasses.asdict(config), default=str) + "`", ""]
  markdown = "\n".join(lines)
  md_path = os.path.join(results_dir, f"{name}.md")
  with open(md_path, "w", encoding="utf-8") as f:
    f.write(markdown)
  json_path = os.path.join(results_dir, f"{name}.json")
  with open(json_path, "w", encoding="utf-8") as f:
    json.dump({"command": command, "config": dataclasses.asdict(config),
               "rows": result.rows, "ict_recall": result.ict_recall,
               "orderings": [{"statement": s, "holds": h} for s, h in checks],
               "timings_s": result.timings}, f, indent=1, default=str)
  return {"markdown": md_path, "json": json_path, "png": png}
