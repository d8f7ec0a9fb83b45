"""The demo chain on real data (`realm-demo`), one resumable stage after another.

    data, corpus, examples, questions  Wikipedia blocks, pre-training examples and the NQ-open
                                       dev questions they answer (`data_stages`)
    baselines                          BM25's dev recall over the same blocks
    ict, pretrain, finetune            the registered experiments, one chain
                                       (`experiments.chain`) -> ict/, realm/, qa/
    evaluate_before, evaluate_after    dev exact match and recall@k around fine-tuning -> eval/
    export, ask                        TF Hub SavedModels -> hub/; answers -> answers.txt

Each stage writes `stages/<stage>.json` when it completes: a re-run reuses completed stages, an
interrupted training stage resumes from its last checkpoint, and `config.json` refuses a re-run
with other settings but the questions asked. `evaluate_before` measures the step-0 state of the
`FineTuner` that `finetune` trains, so both evaluations share one frozen document index.
"""
import dataclasses
import json
import os
import shutil
import time
from typing import Any, Callable, Dict, List

import numpy as np
import tensorflow as tf

from realm_tf import pretrained
from realm_tf.demo.config import DemoConfig
from realm_tf.demo.config import DemoError
from realm_tf.demo.config import InvalidConfigError  # noqa: F401  (re-exported: the stages API)
from realm_tf.demo.data_stages import DataStages
from realm_tf.demo.data_stages import check_data_packages
from realm_tf.demo.progress import LogProgress
from realm_tf.demo.progress import bar
from realm_tf.demo.report import DemoReport
from realm_tf.demo.report import StageResult
from realm_tf.demo.report import stage_line
from realm_tf.demo.step_logs import appender
from realm_tf.demo.step_logs import read_json
from realm_tf.demo.step_logs import read_step_log
from realm_tf.demo.step_logs import trends
from realm_tf.demo.step_logs import write_json
from realm_tf.evaluation.bm25 import Bm25Index
from realm_tf.experiments.chain import Stage
from realm_tf.experiments.chain import stage_experiment
from realm_tf.experiments.open_qa_task import OpenQATask
from realm_tf.experiments.pretrain_task import WARMUP_DIR
from realm_tf.experiments.train_lib import run_experiment
from realm_tf.export import export_hub_lib
from realm_tf.mips import index_publisher
from realm_tf.qa import ask_lib
from realm_tf.qa import datasets
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.qa.model import QAModel
from realm_tf.qa.model import find_model_dir
from realm_tf.training.mlm_warmup import METRIC as MLM_WARMUP_METRIC
from realm_tf.training.recall_monitor import RecallMonitor
from realm_tf.training.train_loop import EVAL_LOG

STAGES = ("data", "corpus", "examples", "questions", "baselines", "ict", "pretrain",
          "evaluate_before", "finetune", "evaluate_after", "export", "ask")
RECALL_KS = (1, 5, 20, 100)
class Demo(DataStages):
  """Runs the stages of a `DemoConfig` (see the module docstring).

  Args:
    config: the settings.
    overwrite: remove `config.output_dir` first.
    log: called with one line when a stage starts and when it ends.
  """

  def __init__(self, config: DemoConfig, overwrite: bool = False,
               log: Callable[[str], None] = print):
    self.config = config
    self.log = log
    self._tuner = None
    if overwrite and os.path.exists(config.output_dir):
      shutil.rmtree(config.output_dir)
    self._check_settings()

  def _check_settings(self) -> None:
    path = self.path("config.json")
    settings = self.config.settings()
    if os.path.exists(path):
      # A setting newer than the run's config.json: that run had the default's behaviour.
      previous = dict(DemoConfig().settings(), **read_json(path))
      changed = sorted(k for k in set(previous) | set(settings)
                       if previous.get(k) != json.loads(json.dumps(settings.get(k))))
      if changed:
        raise DemoError(f"{self.config.output_dir} holds a demo run with other settings "
                        f"({', '.join(changed)}); re-run with --overwrite or another "
                        "--output_dir")
    write_json(path, settings)

  # Shared inputs ------------------------------------------------------------------------------

  @property
  def vocab_file(self) -> str:
    return os.path.join(pretrained.minilm_dir(), "vocab.txt")

  @property
  def init_weights(self) -> str:
    return "minilm" if self.config.encoder == "minilm_l6" else ""

  def _dev_examples(self) -> List[datasets.QAExample]:
    dev = datasets.load_examples(self.path("questions", "dev.jsonl"))
    return dev[:self.config.eval_questions or None]

  def _monitor(self, every_n_steps: int) -> RecallMonitor:
    """Dev recall@5/@20 over the whole demo corpus, the figure every training stage keeps.
    ICT's evaluation embeds every block with the current doc tower (43-55 s for the default
    1,311 blocks on 2 Zen 3 cores), so ICT evaluates at its start and end only; pre-training's
    searches its MIPS index (seconds), at every index refresh."""
    return RecallMonitor(self.store, self._dev_examples(), pretrained.minilm_tokenizer(),
                         every_n_steps, ks=RECALL_KS[1:3], query_length=self.config.query_length,
                         block_length=self.config.block_length)

  def _dev_recall(self, stage: str) -> Dict[str, Any]:
    """Start, end and best dev recall@5 of a stage's `eval.jsonl`."""
    evaluations = read_step_log(self.path(stage, EVAL_LOG))
    best = max(evaluations, key=lambda e: (e["recall@5"], -e["step"]))
    return {"dev_recall@5_start": evaluations[0]["recall@5"],
            "dev_recall@5_end": evaluations[-1]["recall@5"],
            "dev_recall@5_best": best["recall@5"], "best_step": int(best["step"])}

  # Stages -------------------------------------------------------------------------------------

  def baselines(self) -> Dict[str, Any]:
    """Dev recall of what a user gets without training: BM25 (`bm25s`) over the same blocks
    (the raw initialisation's figure is the ICT stage's step-0 evaluation)."""
    monitor = self._monitor(1)
    bm25 = Bm25Index.from_store(self.store)
    rows, _ = bm25.search([e.question for e in monitor.examples], k=min(20, len(self.store)))
    return {f"bm25_{name}": value for name, value in monitor.recall_of_rows(rows).items()}

  def _experiment(self, name: str, directory: str, stage: Stage, settings: Dict[str, Any]):
    """The registered experiment `name` of `stage` training into `directory`, on the demo's
    corpus, encoder, lengths and seed, with `settings` (dotted keys) over it."""
    config = self.config
    shared = {"task.corpus": self.path("corpus"), "task.vocab_file": self.vocab_file,
              "task.model.encoder": config.encoder,
              "task.init.bert_weights": self.init_weights,
              "task.model.query_length": config.query_length,
              "task.model.block_length": config.block_length, "runtime.seed": config.seed,
              "runtime.compute_dtype": "float32"}
    return stage_experiment(name, self.path(directory), stage, shared, settings)

  def ict(self) -> Dict[str, Any]:
    config = self.config
    experiment = self._experiment("ict", "ict", Stage.of(config, "ict"), {})
    model_dir = experiment.trainer.model_dir
    with LogProgress(os.path.join(model_dir, "metrics.jsonl"), config.ict_steps, "ICT",
                     keys=("loss", "accuracy")):
      run_experiment(experiment, verbose=False,
                     monitor=self._monitor(config.ict_steps))
    figures = trends(read_step_log(os.path.join(model_dir, "metrics.jsonl")),
                      ("loss", "accuracy"))
    figures.update(self._dev_recall("ict"), batch_size=config.ict_batch_size, path="ict")
    return figures

  def pretrain(self) -> Dict[str, Any]:
    """From the ICT run's retriever and the encoder's BERT weights in the reader."""
    config = self.config
    experiment = self._experiment("pretrain", "realm", Stage.of(config, "pretrain"), {
        "task.examples_dir": self.path("examples"), "task.init.checkpoint": self.path("ict"),
        "task.num_candidates": config.num_candidates, "task.refresh_every": config.refresh_every,
        "task.mlm_warmup_steps": config.mlm_warmup_steps, "task.embedding_dtype": "float32"})
    model_dir = experiment.trainer.model_dir
    index_root = os.path.join(model_dir, "index")
    with LogProgress(os.path.join(model_dir, "metrics.jsonl"), config.pretrain_steps,
                     "REALM pre-training", keys=("loss", "retrieval_utility",
                                                 "index_staleness")):
      run_experiment(experiment, verbose=False, monitor=self._monitor(config.refresh_every))
    records = read_step_log(os.path.join(model_dir, "metrics.jsonl"))
    figures = trends(records, ("loss", "mlm_accuracy", "retrieval_utility"))
    figures["mlm_accuracy_mean"] = float(np.mean([r["mlm_accuracy"] for r in records]))
    warmup = read_step_log(os.path.join(model_dir, WARMUP_DIR, EVAL_LOG))
    if warmup:  # the reader's MLM head warmed up before REALM
      figures.update(mlm_warmup_steps=warmup[-1]["step"],
                     mlm_warmup_accuracy_first=warmup[0][MLM_WARMUP_METRIC],
                     mlm_warmup_accuracy_last=warmup[-1][MLM_WARMUP_METRIC])
    versions = index_publisher.list_versions(index_root)
    figures.update(batch_size=config.pretrain_batch_size, num_candidates=config.num_candidates,
                   indexes_published=len(versions), index_versions=versions,
                   max_staleness=max((int(r["index_staleness"]) for r in records), default=0),
                   path="realm", **self._dev_recall("realm"))
    return figures

  def _finetuner(self) -> FineTuner:
    """The fine-tuning run, built once: from the pre-training run's model directory, or
    resumed."""
    if self._tuner is None:
      config = self.config
      experiment = self._experiment("open_qa", "qa", Stage.of(config, "finetune"), {
          "task.train_data": self.path("questions", "train.jsonl"),
          "task.model.reader_length": config.query_length + config.block_length,
          "task.init.checkpoint": self.path("realm"), "task.init.bert_weights": "",
          "trainer.retriever_learning_rate": config.finetune_retriever_learning_rate,
          "trainer.warmup_steps": max(1, config.finetune_steps // 10),
          "task.reader_top_k": config.finetune_reader_top_k or config.k,
          "task.retriever_top_k": config.retriever_top_k,
          "task.read_answer_block": config.read_answer_block,
          "trainer.keep_checkpoints": 1, "trainer.log_every": 1,
          "task.embedding_dtype": "float32"})
      task = OpenQATask(experiment, tf.distribute.get_strategy())
      self._tuner = task.fine_tuner(log=appender(self.path("qa", "finetune.log")))
    return self._tuner

  def _evaluate(self, name: str, system, step: int) -> Dict[str, Any]:
    dev = self._dev_examples()
    predictions = self.path("eval", f"{name}_predictions.jsonl")
    os.makedirs(self.path("eval"), exist_ok=True)
    with bar(len(dev), f"evaluate ({name})", unit="question") as progress:
      result = evaluate(system, dev, EvalConfig(recall_ks=RECALL_KS),
                        predictions_path=predictions, progress=progress.update)
    return dict(result.metrics, step=step,
                predictions=os.path.relpath(predictions, self.config.output_dir))

  def evaluate_before(self) -> Dict[str, Any]:
    """The fine-tuning run before its first step: the pre-trained towers and the frozen index
    of the pre-trained doc tower, which `finetune` then trains (a re-run that resumes at
    `finetune` builds the same step-0 state again from the same checkpoint and index)."""
    tuner = self._finetuner()
    return self._evaluate("before", tuner.system(k=self.config.k), int(tuner.step.numpy()))

  def finetune(self) -> Dict[str, Any]:
    """Dev takes no part: the fine-tuned model is the last step's."""
    config = self.config
    log_path = self.path("qa", "metrics.jsonl")
    with LogProgress(log_path, config.finetune_steps, "Open-QA fine-tuning",
                     keys=("loss", "retriever_loss", "reader_loss")):
      self._finetuner().run()
    self._tuner = None  # the later stages load the model directory
    figures = trends(read_step_log(log_path), ("loss",))
    figures.update(batch_size=config.finetune_batch_size, path="qa")
    return figures

  def evaluate_after(self) -> Dict[str, Any]:
    model = QAModel.load(find_model_dir(self.path("qa")))
    return self._evaluate("after", model.system(k=self.config.k), model.info.step)

  def export(self) -> Dict[str, Any]:
    model = QAModel.load(find_model_dir(self.path("qa")))
    paths = export_hub_lib.export_hub(model, self.path("hub"), self.config.k)
    size = sum(os.path.getsize(os.path.join(directory, name))
               for directory, _, names in os.walk(self.path("hub")) for name in names)
    return {"modules": sorted(paths), "megabytes": size / 2**20, "path": "hub"}

  def _asked(self) -> List[str]:
    if self.config.questions:
      return list(self.config.questions)
    return [e.question for e in self._dev_examples()[:self.config.num_asked]]

  def ask(self) -> Dict[str, Any]:
    asked = self._asked()
    gold = {e.question: list(e.answers) for e in datasets.load_examples(
        self.path("questions", "dev.jsonl"))}
    asker = ask_lib.Asker(self.path("qa"), k=self.config.k)
    answers = []
    for answer in asker.ask_many(asked):
      text = ask_lib.format_answer(answer)
      if answer.question in gold:
        text += f"\n   gold: {gold[answer.question]}"
      answers.append({"question": answer.question, "answer": answer.answer,
                      "probability": answer.probability, "text": text})
    with open(self.path("answers.txt"), "w", encoding="utf-8") as f:
      f.write("\n\n".join(a["text"] for a in answers) + "\n")
    return {"questions": asked, "answers": answers, "path": "answers.txt"}

  # The chain ----------------------------------------------------------------------------------

  def _completed(self, name: str):
    path = self.path("stages", f"{name}.json")
    if not os.path.exists(path):
      return None
    result = StageResult(**read_json(path))
    if name == "ask" and result.figures["questions"] != self._asked():
      return None
    return dataclasses.replace(result, reused=True)

  def run_stage(self, name: str) -> StageResult:
    """Runs stage `name` (or reuses its completed result)."""
    number = f"[{STAGES.index(name) + 1}/{len(STAGES)}]"
    result = self._completed(name)
    if result is None:
      self.log(f"{number} {name} ...")
      # A Beam stage that did not complete starts over on a clean output directory.
      if name in ("corpus", "examples") and os.path.exists(self.path(name)):
        shutil.rmtree(self.path(name))
      started = time.perf_counter()
      figures = getattr(self, name)()
      result = StageResult(name, time.perf_counter() - started, figures)
      write_json(self.path("stages", f"{name}.json"), dataclasses.asdict(result))
    self.log(f"{number} {stage_line(result)}")
    return result

  def run(self) -> DemoReport:
    """Runs (or reuses) every stage; returns the report."""
    started = time.perf_counter()
    self.log(f"REALM demo -> {self.config.output_dir}")
    stages = [self.run_stage(name) for name in STAGES]
    report = DemoReport(self.config, stages, time.perf_counter() - started)
    write_json(self.path("summary.json"), dataclasses.asdict(report))
    return report


def run_demo(config: DemoConfig, overwrite: bool = False,
             log: Callable[[str], None] = print) -> DemoReport:
  """Checks the data packages, then runs (or resumes) the demo of `config`."""
  check_data_packages()
  return Demo(config, overwrite, log).run()
