"""The README's opening lines and its API example stay true."""
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


def test_readme_api_example_runs():
  example = re.search(r"## Public API\n\n```python\n(.*?)```", _readme(), re.S).group(1)
  namespace = {}
  exec(compile(example, "README.md", "exec"), namespace)  # pylint: disable=exec-used
  assert namespace["block_ids"].numpy().tolist() == [[0]]
  assert namespace["doc_emb"].shape == (1, 128)
