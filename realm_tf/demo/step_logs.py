"""The files a demo run writes and reads: trainers' JSONL step logs, JSON records, text logs."""
import json
import os
from typing import Any, Callable, Dict, List, Sequence, Tuple

import numpy as np

from realm_tf.training.train_loop import read_step_records


def read_step_log(path: str) -> List[Dict[str, float]]:
  """A trainer's JSONL step log (`train_loop.read_step_records`); [] before it exists."""
  return read_step_records(path) if os.path.exists(path) else []


def trend(records: Sequence[Dict[str, float]], key: str) -> Tuple[float, float]:
  """Means of `key` over the first and the last tenth (at least one step) of a log."""
  values = [r[key] for r in records if key in r]
  if not values:
    return float("nan"), float("nan")
  tail = max(1, len(values) // 10)
  return float(np.mean(values[:tail])), float(np.mean(values[-tail:]))


def trends(records, keys: Sequence[str]) -> Dict[str, Any]:
  """{"steps": the last step, "<key>_first"/"<key>_last": `trend` of each key}."""
  figures = {"steps": int(records[-1]["step"]) if records else 0}
  for key in keys:
    figures[f"{key}_first"], figures[f"{key}_last"] = trend(records, key)
  return figures


def write_json(path: str, value) -> None:
  """Writes `value` to `path` atomically (its directory created)."""
  os.makedirs(os.path.dirname(path), exist_ok=True)
  tmp = f"{path}.tmp"
  with open(tmp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, ensure_ascii=False)
  os.replace(tmp, path)


def read_json(path: str):
  """The JSON value in `path`."""
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def appender(path: str) -> Callable[[str], None]:
  """A log function appending lines to `path`."""

  def append(message: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
      f.write(message + "\n")

  return append
