"""Classification metrics and the evidence of each prediction.

Accuracy and macro-F1 (the unweighted mean over labels of each label's F1; a label never
predicted nor gold is left out, one never predicted scores 0). Each prediction keeps the
blocks that decided it: those read, ranked by their share p(z|x) p(ŷ|z,x) of the predicted
label's p(ŷ|x), with p(z|x) and p(ŷ|z,x) (`EVIDENCE_BLOCKS` of them, the null document
among them as row -2, title "" and text "").
"""
import json
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

EVIDENCE_BLOCKS = 3
_SNIPPET = 300  # characters of a block's text in an evidence record


def metrics(gold: Sequence[int], predicted: Sequence[int], num_labels: int) -> Dict[str, float]:
  """{"accuracy", "macro_f1", "examples"} of label ids."""
  gold, predicted = np.asarray(gold), np.asarray(predicted)
  scores = []
  for label in range(num_labels):
    true_pos = np.sum((gold == label) & (predicted == label))
    support, chosen = np.sum(gold == label), np.sum(predicted == label)
    if support or chosen:
      scores.append(2.0 * true_pos / (support + chosen))
  return {"accuracy": float(np.mean(gold == predicted)) if len(gold) else 0.0,
          "macro_f1": float(np.mean(scores)) if scores else 0.0,
          "examples": float(len(gold))}


def evidence_order(rows: np.ndarray, p_z: np.ndarray, p_label_given_z: np.ndarray
                   ) -> List[int]:
  """The blocks read of one text (rows [K], -1: none) by their share p(z|x) p(ŷ|z,x) of the
  predicted label's p(ŷ|x), largest first (ties in reading order)."""
  return [int(j) for j in np.argsort(-(p_z * p_label_given_z), kind="stable")
          if rows[j] != -1]


def ranked_evidence(rows: np.ndarray, p_z: np.ndarray, p_label_given_z: np.ndarray,
                    titles: Sequence[str], bodies: Sequence[str]
                    ) -> List[Tuple[int, str, str, float, float]]:
  """The blocks read of one text in `evidence_order`: (row, title, text, p(z|x), p(ŷ|z,x))
  each, title and text "" for the null document."""
  return [(int(rows[j]), titles[rows[j]] if rows[j] >= 0 else "",
           bodies[rows[j]] if rows[j] >= 0 else "", float(p_z[j]), float(p_label_given_z[j]))
          for j in evidence_order(rows, p_z, p_label_given_z)]


def prediction_records(texts: Sequence[str], gold: Sequence[int], labels: Sequence[str],
                       rows: np.ndarray, log_p_z: np.ndarray, log_p_y_given_z: np.ndarray,
                       log_p_y: np.ndarray, titles: Sequence[str], bodies: Sequence[str]
                       ) -> List[dict]:
  """One JSON-ready record a text: its text, gold and predicted label, p(y|x) of every label
  and its evidence (module docstring).

  Args:
    texts, gold: B texts and their gold label ids.
    labels: the C label names.
    rows: int [B, K] corpus rows read (negative: the null document or none).
    log_p_z, log_p_y_given_z, log_p_y: [B, K], [B, K, C], [B, C] (`classification_loss`).
    titles, bodies: the corpus columns.
  """
  records = []
  for b, text in enumerate(texts):
    predicted = int(np.argmax(log_p_y[b]))
    ranked = ranked_evidence(rows[b], np.exp(log_p_z[b]),
                             np.exp(log_p_y_given_z[b, :, predicted]), titles, bodies)
    evidence = [{"row": row, "title": title, "text": text[:_SNIPPET], "p_z": p_z,
                 "p_label_given_z": p_label}
                for row, title, text, p_z, p_label in ranked[:EVIDENCE_BLOCKS]]
    records.append({"text": text, "label": labels[gold[b]], "predicted": labels[predicted],
                    "p_labels": {name: float(np.exp(log_p_y[b, c]))
                                 for c, name in enumerate(labels)},
                    "evidence": evidence})
  return records


def write_predictions(path: str, records: Sequence[dict]) -> None:
  """`records` as JSONL at `path`."""
  with tf.io.gfile.GFile(path, "w") as f:
    f.write("".join(json.dumps(r) + "\n" for r in records))
