"""The documentation site builds with `mkdocs build --strict` (no broken link, no page missing
from the navigation, no docstring that fails to render), and its API reference covers the
public modules."""
import configparser
import os
import pkgutil
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _reference_targets():
  targets = set()
  for name in os.listdir(os.path.join(ROOT, "docs", "reference")):
    with open(os.path.join(ROOT, "docs", "reference", name), encoding="utf-8") as f:
      targets.update(re.findall(r"(?m)^::: ([\w.]+)", f.read()))
  return targets


def test_the_api_reference_covers_every_public_package_and_module():
  config = configparser.ConfigParser()
  config.read(os.path.join(ROOT, "setup.cfg"))
  binaries = {line.split("=")[1].strip().split(":")[0]
              for line in config["options.entry_points"]["console_scripts"].strip().splitlines()}
  targets = _reference_targets()
  assert "pipelines" in targets
  for module in pkgutil.iter_modules([os.path.join(ROOT, "realm_tf")]):
    name = f"realm_tf.{module.name}"
    if name in binaries or module.name.startswith("_"):
      continue  # a binary: its --help and the README's command table describe it
    assert name in targets, f"{name} is missing from docs/reference/"


def test_mkdocs_build_strict(tmp_path):
  result = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
      cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
      timeout=600)
  assert result.returncode == 0, result.stderr[-5000:]
  assert (tmp_path / "site" / "reference" / "models" / "index.html").exists()
