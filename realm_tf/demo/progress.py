"""Progress bars (tqdm) for the demo's stages.

The trainers write one JSON object per step to a log (`metrics.jsonl` of ICT, REALM
pre-training and fine-tuning: `training.train_loop`); `LogProgress` follows such a log from a
background thread and shows the step reached and the latest loss, so the trainers run
unchanged (their own console output switched off).
"""
import json
import os
import threading
from typing import Optional, Sequence

from tqdm import tqdm


def bar(total: int, desc: str, unit: str = "it") -> tqdm:
  """A tqdm bar in the demo's style."""
  return tqdm(total=total, desc=desc, unit=unit, dynamic_ncols=True, leave=True)


class LogProgress:
  """A bar over `total` steps driven by a JSONL step log (context manager).

  Args:
    path: the log; complete lines with a "step" are read as they appear.
    total: the last step of the run.
    desc: the bar's label.
    keys: metrics shown next to the bar (the latest value of each).
    poll_s: seconds between reads.
  """

  def __init__(self, path: str, total: int, desc: str, keys: Sequence[str] = ("loss",),
               poll_s: float = 0.5):
    self.path, self.keys, self.poll_s = path, tuple(keys), poll_s
    self.bar = bar(total, desc, unit="step")
    self._offset = 0
    self._stop = threading.Event()
    self._thread: Optional[threading.Thread] = None

  def _read(self) -> None:
    if not os.path.exists(self.path):
      return
    with open(self.path, "rb") as f:
      f.seek(self._offset)
      chunk = f.read()
    complete = chunk[:chunk.rfind(b"\n") + 1]
    self._offset += len(complete)
    step, shown = None, {}
    for line in complete.decode("utf-8", "replace").splitlines():
      try:
        record = json.loads(line)
      except ValueError:
        continue
      if "step" in record:
        step = int(record["step"])
        shown.update({k: record[k] for k in self.keys if k in record})
    if step is not None and step > self.bar.n:
      self.bar.update(min(step, self.bar.total) - self.bar.n)
      if shown:
        self.bar.set_postfix({k: f"{v:.4g}" for k, v in shown.items()}, refresh=False)

  def _follow(self) -> None:
    while not self._stop.wait(self.poll_s):
      self._read()

  def __enter__(self) -> "LogProgress":
    self._thread = threading.Thread(target=self._follow, daemon=True)
    self._thread.start()
    return self

  def __exit__(self, *exc_info) -> None:
    self._stop.set()
    self._thread.join()
    self._read()
    self.bar.close()
