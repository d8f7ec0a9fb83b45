"""A generated file's last step, shared by the tools that write one: write it, or with
`--check` only compare it and say how to bring it up to date (exit status 1 when it is stale)."""
from typing import List


def write_or_check(path: str, text: str, argv: List[str], stale: str) -> int:
  """Writes `text` to `path`; with `--check` in `argv`, prints `stale` and returns 1 when
  `path` holds something else. Returns the exit status."""
  if "--check" in argv:
    with open(path, encoding="utf-8") as f:
      if f.read() != text:
        print(stale)
        return 1
    return 0
  with open(path, "w", encoding="utf-8") as f:
    f.write(text)
  return 0
