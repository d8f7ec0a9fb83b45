"""The retrieval-utility plot helper."""
import json

import pytest

from realm_tf import errors
from realm_tf.training import plots
from realm_tf.training.train_loop import read_step_records


def test_plot_and_resume_deduplication(tmp_path):
  path = tmp_path / "metrics.jsonl"
  rows = [{"step": 1, "retrieval_utility": 0.0}, {"step": 2, "retrieval_utility": 0.1},
          {"step": 2, "retrieval_utility": 0.2}, {"step": 3, "retrieval_utility": 0.4}]
  path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
  records = read_step_records(str(path))
  assert [r["retrieval_utility"] for r in records] == [0.0, 0.2, 0.4]
  png = plots.plot_retrieval_utility({"salient": str(path)}, str(tmp_path / "ru.png"),
                                     smoothing=2)
  with open(png, "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"


def test_bad_metrics_file_names_the_line(tmp_path):
  path = tmp_path / "metrics.jsonl"
  path.write_text('{"step": 1, "loss": 1.0}\n{oops\n')
  with pytest.raises(errors.MalformedRecordError, match="metrics.jsonl:2: not a JSON record "
                     "with a step"):
    read_step_records(str(path))
  path.write_text('{"step": 1, "loss": 1.0}\n')
  with pytest.raises(errors.InputError, match="metrics.jsonl: no 'retrieval_utility' records"):
    plots.plot_retrieval_utility({"x": str(path)}, str(tmp_path / "x.png"))
  with pytest.raises(errors.InputError, match="is a directory, not a metrics.jsonl"):
    read_step_records(str(tmp_path))


def test_eval_curve_with_reference_lines(tmp_path, monkeypatch):
  path = tmp_path / "eval.jsonl"
  path.write_text("\n".join(json.dumps({"step": s, "recall@5": r})
                            for s, r in [(150, 0.30), (300, 0.34)]) + "\n")
  figures = []
  monkeypatch.setattr(plots.plt, "close", figures.append)
  plots.plot_retrieval_utility({"seed 0": str(path)}, str(tmp_path / "r.png"), metric="recall@5",
                               xlabel="fine-tuning step", reference_lines={"BM25": 0.2})
  (axis,) = figures[0].axes
  assert axis.get_xlabel() == "fine-tuning step" and axis.get_ylabel() == "recall@5"
  lines = {line.get_label(): line.get_ydata() for line in axis.get_lines()}
  assert list(lines["seed 0"]) == [0.30, 0.34] and list(lines["BM25"]) == [0.2, 0.2]
  assert 0.0 not in [y for ys in lines.values() for y in ys]  # no zero line off utility
