"""The tiny world's untrained QA model directory, shared by the test files of what loads and
answers (`ask_test.py`, the `realm-serve` tests): written once per test session under the
session's base temporary directory, which every xdist worker shares; the first file to need it
writes it behind a lock, a later one reads it (writing it costs each file a doc-embedder export
and a corpus embedding)."""
import dataclasses
import json
import os
import shutil
from typing import Tuple

import session_shared
from realm_tf import tiny_world


def shared(tmp_path_factory) -> Tuple[tiny_world.OpenQAFiles, str]:
  """(the world's Open-QA files, the model directory: 0 fine-tuning steps)."""
  directory = session_shared.shared_directory(tmp_path_factory, "untrained_model")
  written = os.path.join(directory, "world_files.json")
  with session_shared.locked(os.path.join(directory, "write.lock")):
    if not os.path.exists(written):
      for name in ("world", "model"):  # what a failed write left
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)
      world = tiny_world.write_open_qa(os.path.join(directory, "world"))
      tiny_world.write_untrained_model(world, os.path.join(directory, "model"))
      with open(written + ".tmp", "w", encoding="utf-8") as f:
        json.dump(dataclasses.asdict(world), f)
      os.replace(written + ".tmp", written)
  with open(written, encoding="utf-8") as f:
    return tiny_world.OpenQAFiles(**json.load(f)), os.path.join(directory, "model")
