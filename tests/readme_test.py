"""The README's opening lines, its links and the API example (docs/api.md) stay true."""
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
