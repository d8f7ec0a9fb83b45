"""The Bazel BUILD files match the sources, and `bazel query //...` loads them.

The BUILD files are written by tools/gen_bazel_build.py; when a module, test or package is
added, `python tools/gen_bazel_build.py` rewrites them and these tests say when that was
forgotten. The `bazel query` test needs Bazel on PATH (CI installs Debian's bazel-bootstrap)
and is skipped otherwise.
"""
# The checks read the source tree, not runfiles, so `bazel test //...` leaves this one out.
# bazel-data: //tools:gen_bazel_build
# bazel-tags: manual
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import xml.etree.ElementTree as ET

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GENERATOR = os.path.join(ROOT, "tools", "gen_bazel_build.py")
FIRST_PARTY = ("realm_tf", "pipelines")


def _generate(root, *args):
  return subprocess.run([sys.executable, GENERATOR, "--root", str(root), *args],
                        capture_output=True, text=True, timeout=900, check=False)


def _python_files(top):
  for dirpath, dirnames, filenames in os.walk(os.path.join(ROOT, top)):
    dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and not d.startswith("."))
    for f in sorted(filenames):
      if f.endswith(".py"):
        yield os.path.relpath(os.path.join(dirpath, f), ROOT).replace(os.sep, "/")


def test_build_files_are_up_to_date():
  result = _generate(ROOT, "--check")
  assert result.returncode == 0, (
      "BUILD files are out of date; run `python tools/gen_bazel_build.py`.\n"
      + result.stdout + result.stderr)


def test_workspace_files():
  assert os.path.isfile(os.path.join(ROOT, "WORKSPACE"))
  with open(os.path.join(ROOT, ".bazelignore"), encoding="utf-8") as f:
    assert ".venv" in f.read().split()
  with open(os.path.join(ROOT, "BUILD"), encoding="utf-8") as f:
    assert "Third-party dependencies" in f.read()


def _write(root, files):
  for rel, text in files.items():
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(textwrap.dedent(text))


def _read(root, rel):
  with open(os.path.join(root, rel), encoding="utf-8") as f:
    return f.read()


def test_generator_follows_imports_and_new_modules(tmp_path):
  _write(tmp_path, {
      "pkg/__init__.py": "from pkg.a import f\n",
      "pkg/a.py": """\
          import numpy as np
          from pkg import sub

          def f():
            from pkg import b  # b imports a: Bazel cannot have this edge
            return b
          """,
      "pkg/b.py": "from pkg.a import f\n",
      "pkg/sub/__init__.py": "",
      "pkg/sub/c.py": "from ..b import f\nfrom . import d\n",
      "pkg/sub/d.py": "",
      "pkg/ns/g.py": "from pkg.sub import *\n",  # a namespace package (no __init__.py)
      "tests/conftest.py": "",
      "tests/helper.py": "",
      "tests/c_test.py": "import pytest\nimport helper\nfrom pkg.sub import c\nimport pkg.ns.g\n",
      "tests/slow_test.py": "import pytest\n\n@pytest.mark.slow\ndef test_x():\n  pass\n",
      "tools/script.py": "import pkg.sub.d\n\nif __name__ == '__main__':\n  pass\n",
      ".venv/lib/site.py": "",
      "notes.txt": "",
  })
  result = _generate(tmp_path)
  assert result.returncode == 0, result.stdout + result.stderr
  first = {rel: _read(tmp_path, rel) for rel in
           ("BUILD", "pkg/BUILD", "pkg/sub/BUILD", "tests/BUILD", "tools/BUILD")}
  assert not os.path.exists(tmp_path / ".venv" / "lib" / "BUILD")

  pkg = first["pkg/BUILD"]
  assert 'name = "pkg",\n    srcs = ["__init__.py"],\n    deps = [":a"],' in pkg
  assert "# Not in deps, it would close a dependency cycle: :b" in pkg
  assert 'name = "a",\n    srcs = ["a.py"],\n    deps = ["//pkg/sub"],' in pkg
  assert 'name = "b",\n    srcs = ["b.py"],\n    deps = [":a"],' in pkg
  sub = first["pkg/sub/BUILD"]
  assert ('name = "c",\n    srcs = ["c.py"],\n    deps = [\n        ":d",\n        "//pkg:b",\n'
          in sub)
  tests = first["tests/BUILD"]
  assert ('py_test(\n    name = "c_test",\n    size = "medium",\n    srcs = ["c_test.py"],\n'
          '    main = "c_test.py",\n    deps = [\n        ":conftest",\n        ":helper",\n'
          '        "//pkg",\n        "//pkg/ns:g",\n        "//pkg/sub",\n        "//pkg/sub:c",\n'
          '    ],\n)') in tests
  assert 'name = "g",\n    srcs = ["g.py"],\n    deps = ["//pkg/sub"],' in _read(
      tmp_path, "pkg/ns/BUILD")
  assert 'name = "slow_test",\n    size = "large",' in tests
  assert 'name = "helper",\n    testonly = True,' in tests
  assert 'py_binary(\n    name = "script",' in first["tools/BUILD"]
  assert 'deps = [\n        "//pkg",\n        "//pkg/sub",\n        "//pkg/sub:d",' in (
      first["tools/BUILD"])

  # Deterministic, and --check agrees with what was written.
  assert _generate(tmp_path).returncode == 0
  assert {rel: _read(tmp_path, rel) for rel in first} == first
  assert _generate(tmp_path, "--check").returncode == 0

  # A new module, a new subpackage and a new test all make --check fail until regenerated.
  _write(tmp_path, {"pkg/new.py": "from pkg.newsub import e\n",
                    "pkg/newsub/__init__.py": "", "pkg/newsub/e.py": "",
                    "tests/new_test.py": "from pkg import new\n"})
  result = _generate(tmp_path, "--check")
  assert result.returncode == 1
  for rel in ("pkg/BUILD", "pkg/newsub/BUILD", "tests/BUILD"):
    assert rel in result.stdout
  assert '+    name = "new_test",' in result.stdout
  assert _generate(tmp_path).returncode == 0
  assert 'name = "e",' in _read(tmp_path, "pkg/newsub/BUILD")
  assert '"//pkg/newsub:e"' in _read(tmp_path, "pkg/BUILD")
  assert _generate(tmp_path, "--check").returncode == 0

  # A removed package leaves a stale generated BUILD file, which is reported and removed.
  shutil.rmtree(tmp_path / "pkg" / "newsub" / "__pycache__", ignore_errors=True)
  for f in ("__init__.py", "e.py"):
    os.remove(tmp_path / "pkg" / "newsub" / f)
  _write(tmp_path, {"pkg/new.py": ""})
  result = _generate(tmp_path, "--check")
  assert result.returncode == 1 and "pkg/newsub/BUILD" in result.stdout
  assert _generate(tmp_path).returncode == 0
  assert not os.path.exists(tmp_path / "pkg" / "newsub" / "BUILD")

  # Unparsable sources are an error, not a silently wrong graph.
  _write(tmp_path, {"pkg/broken.py": "def (:\n"})
  result = _generate(tmp_path, "--check")
  assert result.returncode == 2 and "pkg/broken.py" in result.stderr


@pytest.mark.skipif(shutil.which("bazel") is None,
                    reason="bazel is not installed (CI installs Debian's bazel-bootstrap)")
def test_bazel_query_lists_every_module_and_test():
  user_root = tempfile.mkdtemp(prefix="bazel_query_")
  try:
    result = subprocess.run(
        ["bazel", "--batch", "--nohome_rc", f"--output_user_root={user_root}",
         "query", "//...", "--output=xml"],
        cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
  finally:
    shutil.rmtree(user_root, ignore_errors=True)
  assert result.returncode == 0, result.stderr[-5000:]
  rules, deps = {}, {}
  for rule in ET.fromstring(result.stdout).iter("rule"):
    rules[rule.get("name")] = rule.get("class")
    deps[rule.get("name")] = [label.get("value") for lst in rule.iter("list")
                              if lst.get("name") == "deps" for label in lst.iter("label")]

  tests = [f for f in _python_files("tests") if f.endswith("_test.py")]
  assert "tests/bazel_build_test.py" in tests
  missing = [f for f in tests
             if rules.get("//tests:" + f.rsplit("/", 1)[-1][:-3]) != "py_test"]
  assert not missing, f"no py_test for {missing}"

  missing = []
  for top in FIRST_PARTY:
    for f in _python_files(top):
      directory, name = f.rsplit("/", 1)
      if name == "__init__.py":
        labels = [f"//{directory}:{directory.rsplit('/', 1)[-1]}", f"//{directory}:__init__"]
      else:
        labels = [f"//{directory}:{name[:-3]}"]
      if not any(rules.get(label) == "py_library" for label in labels):
        missing.append(f)
  assert not missing, f"no py_library for {missing}"

  # `bazel query //...` does not check these, `bazel build` would.
  dangling = sorted({(r, d) for r, ds in deps.items() for d in ds if d not in rules})
  assert not dangling, f"deps on missing targets: {dangling}"
  state = {}

  def visit(node, path):
    state[node] = "active"
    for dep in deps.get(node, ()):
      assert state.get(dep) != "active", f"dependency cycle: {path + [dep]}"
      if dep not in state:
        visit(dep, path + [dep])
    state[node] = "done"

  for node in sorted(rules):
    if node not in state:
      visit(node, [node])
