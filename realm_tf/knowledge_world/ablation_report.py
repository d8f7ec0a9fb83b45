"""The knowledge-world ablations' report: tables (mean ± std, orderings, per seed) and plot."""
import dataclasses
import json
import os
from typing import Dict, Sequence

import numpy as np

from realm_tf.knowledge_world.ablation_config import AblationConfig
from realm_tf.knowledge_world.ablation_result import AblationResult
from realm_tf.knowledge_world.ablation_stats import Ordering
from realm_tf.knowledge_world.ablation_stats import orderings
from realm_tf.knowledge_world.ablation_stats import seed_values
from realm_tf.knowledge_world.ablation_stats import summarize
from realm_tf.training.plots import plot_retrieval_utility

nan = float("nan")

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
