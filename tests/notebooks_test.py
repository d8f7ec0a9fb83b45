"""The Colab notebooks run headless, top to bottom, with a tiny configuration (nbclient).

Each notebook has one cell tagged "parameters" (papermill's convention); the test appends
overrides to it, as papermill would, and executes the notebook in a fresh kernel.
"""
# bazel-size: large
import os

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
  assert "export: ['doc_embedder', 'export.json', 'query_embedder', 'reader', 'realm_qa']" in text
  assert text.count("Q: ") == 4 and "p(z|x)=" in text
  assert "RU=" in text


@pytest.mark.slow
def test_pretraining_walkthrough_notebook(tmp_path):
  text = _run("pretraining_walkthrough.ipynb", tmp_path)
  assert "zero-shot recall@5: ICT" in text
  assert "retrieval_utility" in text and "test exact match" in text
