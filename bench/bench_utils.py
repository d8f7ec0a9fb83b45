"""Shared helpers of the benchmark scripts: timing, the machine (CPU kind, bfloat16 units, matmul
peaks), result files."""
import json
import os
import platform
import time
from typing import Callable, Dict, List

import numpy as np
import tensorflow as tf

from realm_tf.models import precision


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


# (M, K, N) of the dense matmuls the peak is taken over: square ones and BERT's own
# ([B·L, hidden] x [hidden, 4·hidden] at hidden 768 and 384).
PEAK_SHAPES = ((2048, 2048, 2048), (2304, 768, 3072), (2304, 768, 768), (2304, 384, 1536))


def matmul_peak_flops(shapes=PEAK_SHAPES, repeats: int = 5, dtype: str = "float32") -> float:
  """Dense matmul FLOP/s of this machine in `dtype`, measured now: the best over `shapes`
  (the roofline for ratios). One square size alone under-states it (a 2048² matmul reached
  79-136 GFLOP/s on this machine while BERT-shaped ones reached ~150)."""
  best = 0.0
  for m, k, n in shapes:
    a = tf.cast(tf.random.normal([m, k]), dtype)
    b = tf.cast(tf.random.normal([k, n]), dtype)
    matmul = tf.function(lambda a=a, b=b: tf.reduce_sum(tf.cast(tf.matmul(a, b), tf.float32)))
    seconds = best_time(lambda: matmul().numpy(), repeats=repeats, warmup=2)
    best = max(best, 2.0 * m * k * n / seconds)
  return best


def cpu_kind() -> Dict[str, object]:
  """The CPU model and its bfloat16 matmul units (from /proc/cpuinfo where there is one):
  float results and speeds differ between CPU kinds, so every result names its kind."""
  model = precision.cpu_model()
  bf16 = [flag for flag in precision.CPU_BF16_FLAGS if flag in precision.cpu_flags()]
  return {"cpu_model": model, "bf16_units": bf16 or ["none"],
          "auto_compute_dtype": precision.best_compute_dtype()}


_PEAKS: Dict[str, float] = {}


def machine_peaks(remeasure: bool = False) -> Dict[str, float]:
  """{"float32", "bfloat16"}: this machine's matmul peaks (FLOP/s), measured on first use, so
  that every benchmark sets its figures against both. `remeasure` measures again and keeps the
  higher figure (load from other processes only lowers a measured peak): benchmarks whose
  ratios matter call it again after their own measurements."""
  if remeasure or not _PEAKS:
    for dtype in ("float32", "bfloat16"):
      _PEAKS[dtype] = max(_PEAKS.get(dtype, 0.0), matmul_peak_flops(dtype=dtype))
  return dict(_PEAKS)


def machine_line() -> str:
  """One line naming the machine, its bfloat16 units and both matmul peaks measured in this
  run, for the top of every benchmark's output."""
  kind, peaks = cpu_kind(), machine_peaks()
  return (f"machine: {kind['cpu_model']}, {os.cpu_count()} cores, bf16 units: "
          f"{'/'.join(kind['bf16_units'])} (auto precision: {kind['auto_compute_dtype']}), "
          f"matmul peaks float32 {peaks['float32'] / 1e9:.0f} / bfloat16 "
          f"{peaks['bfloat16'] / 1e9:.0f} GFLOP/s, TensorFlow {tf.__version__}")


def machine() -> Dict[str, object]:
  return {"cpus": os.cpu_count(), "processor": platform.processor() or platform.machine(),
          **cpu_kind(), "matmul_peaks": machine_peaks(), "tensorflow": tf.__version__,
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
