"""Metric-vs-step curves from runs' `metrics.jsonl` / `eval.jsonl`: the retrieval-utility curve
(REALM Figure 4), and held-out recall or exact match over fine-tuning steps."""
from typing import Dict, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

from realm_tf import errors  # pylint: disable=wrong-import-position
from realm_tf.training.train_loop import read_step_records  # pylint: disable=wrong-import-position


def plot_retrieval_utility(runs: Dict[str, str], output_png: str, smoothing: int = 1,
                           metric: str = "retrieval_utility",
                           groups: Optional[Dict[str, str]] = None,
                           xlabel: str = "pre-training step",
                           reference_lines: Optional[Dict[str, float]] = None) -> str:
  """Plots `metric` vs step for each {label: metrics.jsonl or eval.jsonl} run into
  `output_png`. Runs with the same `groups[label]` (e.g. one system over seeds) share a colour
  and differ in line style; `reference_lines` {label: value} are dotted horizontal lines (e.g.
  the untrained baselines)."""
  groups = groups or {label: label for label in runs}
  colours = {g: f"C{i % 10}" for i, g in enumerate(dict.fromkeys(groups.values()))}
  styles = ("-", "--", ":", "-.")
  seen: Dict[str, int] = {}
  figure, axis = plt.subplots(figsize=(7, 4.5))
  for label, path in runs.items():
    records = [r for r in read_step_records(path) if metric in r]
    if not records:
      raise errors.InputError(errors.describe(
          path, f"no {metric!r} records", "Pass the metrics.jsonl of a run that logs it "
          "(retrieval_utility: a realm-pretrain run's)"))
    steps = np.array([r["step"] for r in records])
    values = _smooth(np.array([r[metric] for r in records]), smoothing)
    group = groups.get(label, label)
    style = styles[seen.get(group, 0) % len(styles)]
    seen[group] = seen.get(group, 0) + 1
    axis.plot(steps, values, label=label, color=colours[group], linestyle=style, linewidth=1)
  if metric == "retrieval_utility":
    axis.axhline(0.0, color="grey", linewidth=0.5)
  for i, (label, value) in enumerate((reference_lines or {}).items()):
    axis.axhline(value, color=f"C{(len(colours) + i) % 10}", linestyle=":", linewidth=1.2,
                 label=label)
  axis.set_xlabel(xlabel)
  axis.set_ylabel("retrieval utility (nats)" if metric == "retrieval_utility" else metric)
  axis.legend(fontsize="small", ncol=2 if len(runs) > 6 else 1)
  figure.tight_layout()
  figure.savefig(output_png, dpi=120)
  plt.close(figure)
  return output_png


def _smooth(values: Sequence[float], window: int) -> np.ndarray:
  if window <= 1:
    return np.asarray(values)
  kernel = np.ones(window) / window
  padded = np.concatenate([np.full(window - 1, values[0]), values])
  return np.convolve(padded, kernel, mode="valid")
