"""What a demo run built, where, and its measured figures: the stage records and the summary."""
import dataclasses
from typing import Any, Callable, Dict, List

TITLES = {
    "data": "data", "corpus": "corpus (Beam)", "examples": "examples (Beam)",
    "questions": "questions", "baselines": "baselines (no training)", "ict": "ICT warm-start",
    "pretrain": "REALM pre-training", "evaluate_before": "dev, before fine-tuning",
    "finetune": "Open-QA fine-tuning", "evaluate_after": "dev, after fine-tuning",
    "export": "TF Hub export", "ask": "ask",
}


@dataclasses.dataclass
class StageResult:
  """A completed stage: its figures, wall time and whether this run reused it."""
  name: str
  seconds: float
  figures: Dict[str, Any]
  reused: bool = False


@dataclasses.dataclass
class DemoReport:
  """The stages of a demo run in order, with the `stages.DemoConfig` that ran them and the wall
  time of this run (reused stages cost it nothing)."""
  config: Any
  stages: List[StageResult]
  seconds: float

  def stage(self, name: str) -> StageResult:
    return next(s for s in self.stages if s.name == name)


def _arrow(figures: Dict[str, Any], key: str, digits: int = 3) -> str:
  return f"{figures[f'{key}_first']:.{digits}f} -> {figures[f'{key}_last']:.{digits}f}"


def _mlm_warmup(f: Dict[str, Any]) -> str:
  """The reader's MLM-head warm-up before REALM, when it ran."""
  if "mlm_warmup_steps" not in f:
    return ""
  return (f"MLM-head warm-up {f['mlm_warmup_steps']} steps, held-out MLM accuracy "
          f"{_arrow(f, 'mlm_warmup_accuracy')}; then ")


def _run_mean(f: Dict[str, Any], key: str) -> str:
  """The mean of `key` over every step, where the stage recorded it (a step's figure, from a
  few masked tokens, is noisy at the first and last steps alone)."""
  return f" (mean of every step {f[f'{key}_mean']:.3f})" if f"{key}_mean" in f else ""


def _dev_recall(f: Dict[str, Any]) -> str:
  return (f"dev recall@5 {f['dev_recall@5_start']:.3f} -> {f['dev_recall@5_end']:.3f} "
          f"(best {f['dev_recall@5_best']:.3f} at step {f['best_step']}, kept)")


def _evaluation(f: Dict[str, Any]) -> str:
  recalls = ", ".join(f"R@{k.split('@')[1]} {v:.3f}" for k, v in f.items()
                      if k.startswith("recall@"))
  return (f"EM {f['exact_match']:.3f}, {recalls} on {int(f['num_questions'])} dev questions "
          f"(model step {f['step']}) -> {f['predictions']}")


_DESCRIBE: Dict[str, Callable[[Dict[str, Any]], str]] = {
    "data": lambda f: (f"{f['articles']:,} of {f['articles_available']:,} Wikipedia lead "
                       f"extracts -> {f['path']}"),
    "corpus": lambda f: (f"{f['articles']:,} articles -> {f['blocks']:,} blocks of "
                         f"{f['mean_wordpieces']:.0f} wordpieces on average, "
                         f"{f['dead_letters']} dead letters -> {f['path']}"),
    "examples": lambda f: (f"{f['examples']:,} salient-span examples from "
                           f"{f['sentences']:,} sentences ("
                           + ", ".join(f"{k} {v:,}" for k, v in list(f["labels"].items())[:4])
                           + f", ...) -> {f['path']}"),
    "questions": lambda f: (f"{f['answerable']:,} of {f['nq_dev']:,} NQ-open dev questions "
                            f"answerable from the corpus: {f['train']:,} train, {f['dev']:,} "
                            f"dev ({f['evaluated']:,} evaluated) -> {f['path']}"),
    "baselines": lambda f: (f"BM25 (bm25s) dev recall@5 {f['bm25_recall@5']:.3f}, "
                            f"recall@20 {f['bm25_recall@20']:.3f}"),
    "ict": lambda f: (f"{f['steps']} steps x {f['batch_size']}, loss {_arrow(f, 'loss')}, "
                      f"in-batch accuracy {_arrow(f, 'accuracy')}, {_dev_recall(f)} "
                      f"-> {f['path']}"),
    "pretrain": lambda f: (_mlm_warmup(f) +
                           f"{f['steps']} steps x {f['batch_size']} (K={f['num_candidates']}),"
                           f" loss {_arrow(f, 'loss')}, salient-span MLM accuracy "
                           f"{_arrow(f, 'mlm_accuracy')}{_run_mean(f, 'mlm_accuracy')}, "
                           "retrieval utility "
                           f"{_arrow(f, 'retrieval_utility')} nats, "
                           f"the initial index + {f['indexes_published'] - 1} published by "
                           "the asynchronous builder, staleness <= "
                           f"{f['max_staleness']} steps, {_dev_recall(f)} -> {f['path']}"),
    "evaluate_before": _evaluation,
    "finetune": lambda f: (f"{f['steps']} steps x {f['batch_size']}, loss {_arrow(f, 'loss')}"
                           f" -> {f['path']}"),
    "evaluate_after": _evaluation,
    "export": lambda f: (", ".join(f["modules"]) + f" ({f['megabytes']:.0f} MB) -> {f['path']}"),
    "ask": lambda f: f"{len(f['questions'])} questions -> {f['path']}",
}


def _seconds(result: StageResult) -> str:
  return f"{result.seconds:.1f} s" + (", reused" if result.reused else "")


def stage_line(result: StageResult) -> str:
  """One line: the stage, its figures and its wall time."""
  return f"{TITLES[result.name]}: {_DESCRIBE[result.name](result.figures)} ({_seconds(result)})"


def format_summary(report: DemoReport) -> str:
  """The answers with their evidence, then what was built, where, and the measured figures."""
  lines = [a["text"] + "\n" for a in report.stage("ask").figures["answers"]]
  total = sum(s.seconds for s in report.stages)
  lines.append(f"Summary: REALM on real data in {report.config.output_dir} "
               f"({total / 60:.1f} min of stage time; this run {report.seconds / 60:.1f} min)")
  width = max(len(t) for t in TITLES.values())
  for result in report.stages:
    lines.append(f"  {TITLES[result.name]:<{width}}  {_seconds(result):>14}  "
                 f"{_DESCRIBE[result.name](result.figures)}")
  before, after = (report.stage(n).figures for n in ("evaluate_before", "evaluate_after"))
  lines.append(f"Dev exact match {before['exact_match']:.3f} -> {after['exact_match']:.3f}, "
               f"recall@5 {before['recall@5']:.3f} -> {after['recall@5']:.3f} "
               "(before -> after fine-tuning)")
  ict, realm = (report.stage(n).figures for n in ("ict", "pretrain"))
  lines.append(f"Dev recall@5 beside the free baselines: BM25 "
               f"{report.stage('baselines').figures['bm25_recall@5']:.3f}, raw initialisation "
               f"{ict['dev_recall@5_start']:.3f}, after ICT {ict['dev_recall@5_best']:.3f} (best kept), after "
               f"REALM {realm['dev_recall@5_end']:.3f}, fine-tuned {after['recall@5']:.3f}")
  return "\n".join(lines)
