"""BENCHMARKS.md opens with its summary, every section of it names a result file, and every result
file it or the README names exists."""
import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RESULT_PATH = re.compile(r"bench/results/[A-Za-z0-9_.,{}*/+-]*[A-Za-z0-9_}*]")


def _read(name: str) -> str:
  with open(os.path.join(ROOT, name), encoding="utf-8") as f:
    return f.read()


def _expand(path: str):
  """`a.{json,md}` -> a.json, a.md (nested once is enough for these files)."""
  match = re.search(r"\{([^{}]*)\}", path)
  if not match:
    return [path]
  return [p for option in match.group(1).split(",")
          for p in _expand(path[:match.start()] + option + path[match.end():])]


def _named_result_files(text: str):
  return sorted({p for raw in RESULT_PATH.findall(text) for p in _expand(raw.rstrip("."))})


def test_expand():
  assert _expand("bench/results/a{,_seed1}.{json,md}") == [
      "bench/results/a.json", "bench/results/a.md", "bench/results/a_seed1.json",
      "bench/results/a_seed1.md"]


def test_every_result_file_named_exists():
  for name in ("BENCHMARKS.md", "README.md"):
    paths = _named_result_files(_read(name))
    assert paths or name == "README.md", name
    for path in paths:
      if path.rstrip("/") == "bench/results":
        continue
      matches = glob.glob(os.path.join(ROOT, path))
      assert matches, f"{name} names {path}, which does not exist"


def test_the_summary_comes_first_and_each_row_has_its_result_file():
  text = _read("BENCHMARKS.md")
  headings = re.findall(r"(?m)^(#{2,3}) (.*)$", text)
  assert headings[0] == ("##", "Summary"), headings[:3]
  summary = text[text.index("## Summary"):]
  summary = summary[:summary.index("\n## ", 1)]
  rows = [line for line in summary.splitlines() if line.startswith("| ")][1:]
  assert 8 <= len(rows) <= 15, len(rows)
  for row in rows:
    if "to be filled" in row:  # the marked spot for a measurement in progress
      continue
    files = _named_result_files(row.split(" | ")[-1])
    assert files, row
    for path in files:
      assert os.path.exists(os.path.join(ROOT, path)), path


def test_sections_are_grouped_by_topic_and_each_names_its_result_files():
  text = _read("BENCHMARKS.md")
  assert "**No result file.**" not in text  # what has no file is re-measured or dropped
  topics = re.findall(r"(?m)^## (.*)$", text)
  assert topics[0] == "Summary" and len(topics) >= 6, topics
  sections = re.split(r"(?m)^(?=### §)", text)[1:]
  assert len(sections) >= 20
  for section in sections:
    section = re.split(r"(?m)^## ", section)[0]
    heading = section.splitlines()[0]
    assert not re.search(r"\(#\d+\)", heading), heading
    files = [p for p in _named_result_files(section) if p.rstrip("/") != "bench/results"]
    assert files, f"{heading} names no result file"
    assert all(glob.glob(os.path.join(ROOT, p)) for p in files), heading
