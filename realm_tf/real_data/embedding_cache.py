"""Block embeddings kept between benchmark runs, as .npy files keyed by name and corpus.

`cached_embeddings(cache_dir, name, key, compute)` returns the embeddings of `<name>.npy` when
its `<name>.json` records the same `key` (a dict naming the model, the packing and the corpus
fingerprint), and otherwise calls `compute()` and stores its result with the key and the
seconds it took (reported again by runs that reuse it).
Legend: N blocks, D embedding dim.
"""
import json
import os
import re
import time
from typing import Any, Callable, Dict, Tuple

import numpy as np

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def cached_embeddings(cache_dir: str, name: str, key: Dict[str, Any],
                      compute: Callable[[], np.ndarray]) -> Tuple[np.ndarray, float, bool]:
  """float32 [N, D] embeddings, computed or reused.

  Args:
    cache_dir: where `<name>.npy` and `<name>.json` live.
    name: the model's name (made file-safe).
    key: JSON-serialisable; a cached file is reused only when its key is equal.
    compute: () -> float [N, D].

  Returns:
    (embeddings, seconds `compute` took when they were computed, reused).
  """
  stem = os.path.join(cache_dir, _UNSAFE.sub("_", name))
  key = json.loads(json.dumps(key))
  if os.path.exists(stem + ".json") and os.path.exists(stem + ".npy"):
    with open(stem + ".json", encoding="utf-8") as f:
      record = json.load(f)
    if record.get("key") == key:
      return np.load(stem + ".npy"), float(record["seconds"]), True
  started = time.perf_counter()
  embeddings = np.asarray(compute(), np.float32)
  seconds = time.perf_counter() - started
  os.makedirs(cache_dir, exist_ok=True)
  np.save(stem + ".tmp.npy", embeddings)
  os.replace(stem + ".tmp.npy", stem + ".npy")
  with open(stem + ".json", "w", encoding="utf-8") as f:
    json.dump({"key": key, "seconds": seconds, "shape": list(embeddings.shape)}, f, indent=1)
  return embeddings, seconds, False
