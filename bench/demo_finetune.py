"""Fine-tuning settings compared on a demo run's pre-trained model, over seeds.

  python bench/demo_finetune.py --demo_dir=results/demo --seeds=0,1,2 \\
      --variant=top_k: --variant=answer_block:read_answer_block=true

A `realm-demo` run past `pretrain` supplies the corpus, the questions and the REALM checkpoint
(linked, not copied). Each `--variant` ("name:field=value,..." over `demo.config.DemoConfig`)
runs the demo's `finetune` and `evaluate_after` stages once per seed (the span head's and the
question order's) in `<output_dir>/<variant>-seed<S>/`; a re-run reuses completed runs.
`cloze_steps=N` (`cloze_batch_size`, `cloze_learning_rate`) first warms the reader up on cloze
questions of the demo's examples (`qa.cloze_questions`, one answer-bearing block read, the
query tower's rate 0) in `<run>/cloze/`, and fine-tuning starts from there. Figures are the
demo's own (its first `eval_questions` dev questions; each model is its last step). Writes
`<output_dir>/<name>.{md,json}`: mean ± std over seeds per variant, and every run.
"""
import dataclasses
import json
import os
import sys
from typing import Dict, List, Tuple

from absl import app
from absl import flags
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from realm_tf.demo.config import DemoConfig  # pylint: disable=wrong-import-position
from realm_tf.demo.step_logs import read_json  # pylint: disable=wrong-import-position

_DEMO_DIR = flags.DEFINE_string("demo_dir", "results/demo", "A realm-demo run that completed "
                                "its `pretrain` stage.")
_OUTPUT_DIR = flags.DEFINE_string("output_dir", "bench/results/demo_finetune",
                                  "Runs (<variant>-seed<S>/) and results go here.")
_NAME = flags.DEFINE_string("name", "demo_finetune", "Result file name.")
_VARIANTS = flags.DEFINE_multi_string("variant", ["top_k:"], "name:field=value,... over the "
                                      "demo run's settings.")
_SEEDS = flags.DEFINE_list("seeds", ["0", "1", "2"], "Fine-tuning seeds.")
# The demo's inputs a fine-tuning run reads: linked into every run directory.
_SHARED = ("data", "corpus", "questions", "realm")
METRICS = ("exact_match", "recall@5", "recall@20")
# The cloze warm-up's settings a variant may give (beside DemoConfig's), and their defaults.
CLOZE_SETTINGS = {"cloze_steps": 0, "cloze_batch_size": 16, "cloze_learning_rate": 3e-4}


def parse_variant(text: str, base: DemoConfig) -> Tuple[str, Dict]:
  """("name", {field: value}) of "name:field=value,..."; values parsed as the field's type."""
  name, _, settings = text.partition(":")
  fields = {f.name: f for f in dataclasses.fields(DemoConfig)}
  changes = {}
  for item in filter(None, settings.split(",")):
    key, _, value = item.partition("=")
    if key in CLOZE_SETTINGS:
      changes[key] = type(CLOZE_SETTINGS[key])(value)
      continue
    if key not in fields or key in ("output_dir", "seed"):
      raise app.UsageError(f"--variant={text}: {key!r} is not a DemoConfig setting it can set")
    current = getattr(base, key)
    kind = float if current is None else type(current)  # None: an unset optional rate
    changes[key] = (value.lower() in ("1", "true", "yes")) if kind is bool else kind(value)
  if not name:
    raise app.UsageError(f"--variant={text}: give it a name before ':'")
  return name, changes


def _link_inputs(run_dir: str) -> None:
  os.makedirs(run_dir, exist_ok=True)
  for name in _SHARED:
    link = os.path.join(run_dir, name)
    if not os.path.lexists(link):
      os.symlink(os.path.abspath(os.path.join(_DEMO_DIR.value, name)), link)


def _cloze_data() -> str:
  """The cloze questions of the demo run's examples, written once into --output_dir."""
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing)
  from realm_tf import pretrained
  from realm_tf.qa import datasets
  from realm_tf.qa.cloze_questions import cloze_questions
  path = os.path.join(_OUTPUT_DIR.value, "cloze.jsonl")
  if not os.path.exists(path):
    questions = cloze_questions(os.path.join(_DEMO_DIR.value, "examples"),
                                pretrained.minilm_tokenizer())
    datasets.write_jsonl(questions, path + ".tmp")
    os.replace(path + ".tmp", path)
  return path


def run_variant(base: DemoConfig, changes: Dict, run_dir: str) -> Dict:
  """The demo's finetune and evaluate_after stages of `base` with `changes`, in `run_dir`
  (after the cloze warm-up when `changes` asks for one)."""
  # pylint: disable=g-import-not-at-top  (TensorFlow after flag parsing)
  from realm_tf.demo.stages import Demo

  class _Demo(Demo):
    """The demo with settings over its fine-tuning experiment."""

    def __init__(self, config, open_qa: Dict):
      super().__init__(config, log=lambda line: print(line, flush=True))
      self.open_qa = open_qa

    def _experiment(self, name, directory, stage, settings):
      if name == "open_qa":
        settings = dict(settings, **self.open_qa)
      return super()._experiment(name, directory, stage, settings)

  cloze = {k: changes.get(k, v) for k, v in CLOZE_SETTINGS.items()}
  changes = {k: v for k, v in changes.items() if k not in CLOZE_SETTINGS}
  config = dataclasses.replace(base, output_dir=run_dir, **changes)
  _link_inputs(run_dir)
  figures, open_qa = {}, {}
  if cloze["cloze_steps"]:
    warmup_dir = os.path.join(run_dir, "cloze")
    _link_inputs(warmup_dir)
    warmup = _Demo(dataclasses.replace(
        config, output_dir=warmup_dir, finetune_steps=cloze["cloze_steps"],
        finetune_batch_size=cloze["cloze_batch_size"],
        finetune_learning_rate=cloze["cloze_learning_rate"],
        finetune_retriever_learning_rate=0.0, finetune_reader_top_k=1, read_answer_block=True),
                   {"task.train_data": _cloze_data()})
    trained = warmup.run_stage("finetune")
    evaluated = warmup.run_stage("evaluate_after").figures
    figures.update(cloze_seconds=trained.seconds,
                   **{f"cloze_{m}": evaluated[m] for m in METRICS})
    open_qa = {"task.init.checkpoint": warmup.path("qa")}
  demo = _Demo(config, open_qa)
  finetune = demo.run_stage("finetune")
  after = demo.run_stage("evaluate_after")
  return dict(after.figures, finetune_seconds=finetune.seconds, **figures)


def main(argv):
  del argv
  # config.json holds the run's `DemoConfig.settings()`: every field but the resumable ones
  base = DemoConfig(**read_json(os.path.join(_DEMO_DIR.value, "config.json")))
  variants = [parse_variant(v, base) for v in _VARIANTS.value]
  rows: List[Dict] = []
  for name, changes in variants:
    runs = []
    for seed in map(int, _SEEDS.value):
      run_dir = os.path.join(_OUTPUT_DIR.value, f"{name}-seed{seed}")
      runs.append(dict(seed=seed, **run_variant(base, dict(changes, seed=seed), run_dir)))
    summary = {m: (float(np.mean([r[m] for r in runs])), float(np.std([r[m] for r in runs])))
               for m in METRICS}
    rows.append(dict(variant=name, settings=changes, summary=summary, runs=runs))
  header = "| variant | settings | " + " | ".join(METRICS) + " | per seed (exact match) |"
  lines = [header, "|" + "---|" * (len(METRICS) + 3)]
  for row in rows:
    cells = [f"{row['summary'][m][0]:.3f} ± {row['summary'][m][1]:.3f}" for m in METRICS]
    per_seed = " / ".join(f"{r['exact_match']:.3f}" for r in row["runs"])
    settings = ", ".join(f"{k}={v}" for k, v in row["settings"].items()) or "the demo's"
    lines.append(f"| {row['variant']} | {settings} | " + " | ".join(cells) + f" | {per_seed} |")
  table = "\n".join(lines)
  print(table)
  os.makedirs(_OUTPUT_DIR.value, exist_ok=True)
  with open(os.path.join(_OUTPUT_DIR.value, f"{_NAME.value}.md"), "w", encoding="utf-8") as f:
    f.write(f"Demo run: {_DEMO_DIR.value}; seeds {', '.join(_SEEDS.value)}\n\n{table}\n")
  with open(os.path.join(_OUTPUT_DIR.value, f"{_NAME.value}.json"), "w", encoding="utf-8") as f:
    json.dump({"demo_dir": _DEMO_DIR.value, "rows": rows}, f, indent=1)


if __name__ == "__main__":
  app.run(main)
