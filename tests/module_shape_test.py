"""Every module of realm_tf/ and pipelines/ keeps Model Garden's shape: a module docstring of at
most 15 lines (what the module is, its shapes, the one non-obvious reason; measurements live in
BENCHMARKS.md, rationale in docs/decisions.md, history in git) and at most 400 lines in all.

Lines are source lines: the docstring's from its opening to its closing quotes, the file's all
of them. Parsed with `ast`, nothing imported.
"""
import ast
import pathlib
from typing import List, Optional

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGES = ("realm_tf", "pipelines")
MAX_DOCSTRING_LINES = 15
MAX_MODULE_LINES = 400


def _modules() -> List[pathlib.Path]:
  return sorted(path for package in PACKAGES for path in (ROOT / package).rglob("*.py"))


def _name(path: pathlib.Path) -> str:
  return path.relative_to(ROOT).as_posix()


def docstring_lines(source: str) -> Optional[int]:
  """Source lines of the module docstring, from its opening to its closing quotes; None
  without one."""
  body = ast.parse(source).body
  if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
      and isinstance(body[0].value.value, str)):
    return body[0].end_lineno - body[0].lineno + 1
  return None


def test_docstring_lines_counts_the_literal_from_quote_to_quote():
  assert docstring_lines('"""One line."""\nimport os\n') == 1
  assert docstring_lines('"""Title.\n\nBody.\n"""\nx = 1\n') == 4
  assert docstring_lines("import os\n") is None
  assert docstring_lines("") is None


def test_every_module_has_a_docstring_of_at_most_15_lines():
  problems = []
  for path in _modules():
    lines = docstring_lines(path.read_text(encoding="utf-8"))
    if lines is None:
      problems.append(f"{_name(path)}: no module docstring")
    elif lines > MAX_DOCSTRING_LINES:
      problems.append(f"{_name(path)}: module docstring of {lines} lines")
  assert not problems, (
      f"module docstrings must be 1-{MAX_DOCSTRING_LINES} lines (what the module is, its "
      "shapes, the one non-obvious reason; measurements go to BENCHMARKS.md, rationale to "
      "docs/decisions.md):\n" + "\n".join(problems))


def test_every_module_has_at_most_400_lines():
  problems = []
  for path in _modules():
    lines = len(path.read_text(encoding="utf-8").splitlines())
    if lines > MAX_MODULE_LINES:
      problems.append(f"{_name(path)}: {lines} lines")
  assert not problems, (f"modules must be at most {MAX_MODULE_LINES} lines; split them:\n" +
                        "\n".join(problems))

