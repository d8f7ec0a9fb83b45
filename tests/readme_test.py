"""The README stays short and true: its set-up commands, its results table (each row linked to
its measurement), its links, the docs pages it leads to, and the API example (docs/api.md)."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _readme():
  with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
    return f.read()


def test_readme_opens_with_the_two_set_up_commands():
  first_block = re.search(r"```sh\n(.*?)```", _readme(), re.S).group(1)
  commands = [line.split("#")[0].strip() for line in first_block.strip().splitlines()]
  assert commands == ["make demo", "make test"]


def test_api_example_runs():
  with open(os.path.join(ROOT, "docs", "api.md"), encoding="utf-8") as f:
    example = re.search(r"# Public API\n\n```python\n(.*?)```", f.read(), re.S).group(1)
  namespace = {}
  exec(compile(example, "README.md", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["block_ids"].numpy().tolist() == [[0]]
  assert namespace["doc_emb"].shape == (1, 128)


def test_readme_links_to_files_that_exist_and_to_nothing_outside_the_repository():
  links = re.findall(r"\]\(([^)#]+)\)", _readme())
  assert "docs/api.md" in links
  for link in links:
    if "://" in link:
      continue
    assert os.path.exists(os.path.join(ROOT, link)), link
    assert not os.path.isabs(link) and not os.path.normpath(link).startswith(".."), link


def _github_anchor(heading: str) -> str:
  """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_readme_is_short_and_opens_with_its_results():
  lines = _readme().splitlines()
  assert len(lines) <= 250, len(lines)
  start = lines.index("## Results")
  assert start < 60, start
  rows = []
  for line in lines[start + 1:]:
    if line.startswith("## "):
      break
    if line.startswith("| ") and not line.startswith("| what "):
      rows.append(line)
  assert 5 <= len(rows) <= 10, len(rows)
  assert lines.index(rows[-1]) < 60, "the results table should end within the first 60 lines"
  for row in rows:  # each figure with its machine and where it is measured
    assert "](BENCHMARKS.md#" in row or "](docs/" in row, row


def test_readme_links_into_benchmarks_land_on_headings():
  with open(os.path.join(ROOT, "BENCHMARKS.md"), encoding="utf-8") as f:
    anchors = {_github_anchor(h) for h in re.findall(r"(?m)^#{1,4} (.*)$", f.read())}
  links = re.findall(r"\]\(BENCHMARKS\.md#([^)]+)\)", _readme())
  assert links
  for anchor in links:
    assert anchor in anchors, anchor


def test_every_docs_page_is_linked_from_the_readme_and_in_the_site():
  with open(os.path.join(ROOT, "mkdocs.yml"), encoding="utf-8") as f:
    nav = f.read()
  links = set(re.findall(r"\]\(([^)#]+)\)", _readme()))
  for name in sorted(os.listdir(os.path.join(ROOT, "docs"))):
    if not name.endswith(".md") or name == "index.md":
      continue
    assert f"docs/{name}" in links, name
    assert f": {name}\n" in nav, name
