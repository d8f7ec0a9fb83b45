"""Shared helpers of the benchmark scripts: timing, machine peak, result files."""
import json
import os
import platform
import time
from typing import Callable, Dict, List

import numpy as np
import tensorflow as tf


def best_time(fn: Callable[[], object], repeats: int = 3, warmup: int = 1) -> float:
  """Best wall time of `fn()` over `repeats` runs after `warmup` runs (seconds)."""
  for _ in range(warmup):
    fn()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    fn()
    times.append(time.perf_counter() - start)
  return min(times)


def matmul_peak_flops(size: int = 2048, repeats: int = 5, dtype: str = "float32") -> float:
  """Dense matmul FLOP/s of this machine in `dtype`, measured now (the roofline for ratios)."""
  a = tf.cast(tf.random.normal([size, size]), dtype)
  b = tf.cast(tf.random.normal([size, size]), dtype)
  matmul = tf.function(lambda: tf.matmul(a, b))
  seconds = best_time(lambda: matmul().numpy(), repeats=repeats, warmup=2)
  return 2.0 * size ** 3 / seconds


def machine() -> Dict[str, object]:
  return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
          "tensorflow": tf.__version__,
          "gpus": [d.name for d in tf.config.list_physical_devices("GPU")]}


def write_results(name: str, rows: List[Dict[str, object]], markdown: str,
                  directory: str = "bench/results") -> str:
  """Writes `<name>.json` (machine + rows) and `<name>.md`; returns the markdown path."""
  os.makedirs(directory, exist_ok=True)
  with open(os.path.join(directory, f"{name}.json"), "w") as f:
    json.dump({"machine": machine(), "rows": rows}, f, indent=1, default=float)
  path = os.path.join(directory, f"{name}.md")
  with open(path, "w") as f:
    f.write(markdown)
  return path


def markdown_table(rows: List[Dict[str, object]], columns: List[str]) -> str:
  def cell(value):
    if isinstance(value, (float, np.floating)):
      return f"{value:.4g}"
    return str(value)
  lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
  lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
  return "\n".join(lines) + "\n"
