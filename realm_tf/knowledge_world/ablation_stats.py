"""Statistics of the knowledge-world ablations over seeds.

A seed fixes the world, every initialisation and the data order; tiny towers trained from
scratch for a few hundred steps are chaotic, so a claim is a mean over seeds: `summarize` gives
each metric's mean and standard deviation and `orderings` each of the paper's orderings as the
mean of its per-seed (paired) differences with its standard error: it holds when the margin
exceeds two standard errors.
"""
import dataclasses
from typing import Dict, List, Sequence

import numpy as np

from realm_tf.knowledge_world.ablation_result import AblationResult

nan = float("nan")

METRICS = ("exact_match", "zero_shot_recall", "finetuned_recall", "pretrain_retrieval_utility",
           "null_prior", "null_posterior", "source_retrieved", "minutes")


def seed_values(results: Sequence[AblationResult], variant: str, metric: str) -> np.ndarray:
  """float [S]: `metric` of `variant` in each seed ("ict" + "zero_shot_recall": the ICT
  warm-start's recall)."""
  if variant == "ict":
    return np.array([r.ict_recall for r in results], float)
  return np.array([next(row[metric] for row in r.rows if row["variant"] == variant)
                   for r in results], float)


def summarize(results: Sequence[AblationResult]) -> List[Dict[str, object]]:
  """One row per variant: each metric's mean over seeds and its standard deviation
  (`<metric>_std`, ddof 1)."""
  rows = []
  for row in results[0].rows:
    summary = {"variant": row["variant"], "system": row["system"]}
    for metric in METRICS:
      values = seed_values(results, row["variant"], metric)
      summary[metric] = float(np.mean(values))
      summary[f"{metric}_std"] = float(np.std(values, ddof=1)) if len(values) > 1 else nan
    rows.append(summary)
  return rows


# (statement, metric, better variant, worse variant): REALM Table 2's expected orderings, then
# the released forms against the paper's and the patent's.
ORDERINGS = (
    ("EM: REALM > ORQA", "exact_match", "realm", "orqa"),
    ("EM: ORQA > no retrieval", "exact_match", "orqa", "no_retrieval"),
    ("EM: REALM > no retrieval", "exact_match", "realm", "no_retrieval"),
    ("EM: REALM > REALM retriever + BERT reader", "exact_match", "realm",
     "realm_retriever_bert_reader"),
    ("EM: REALM retriever + BERT reader > ORQA", "exact_match", "realm_retriever_bert_reader",
     "orqa"),
    ("EM: REALM > ICT retriever + REALM reader", "exact_match", "realm",
     "ict_retriever_realm_reader"),
    ("EM: ICT retriever + REALM reader > ORQA", "exact_match", "ict_retriever_realm_reader",
     "orqa"),
    ("zero-shot R@5: REALM > ICT warm-start", "zero_shot_recall", "realm", "ict"),
    ("zero-shot R@5: salient spans > random spans", "zero_shot_recall", "realm",
     "realm_random_span"),
    ("zero-shot R@5: random spans > random tokens", "zero_shot_recall", "realm_random_span",
     "realm_random_token"),
    ("EM: salient spans > random spans", "exact_match", "realm", "realm_random_span"),
    ("EM: random spans > random tokens", "exact_match", "realm_random_span",
     "realm_random_token"),
    ("zero-shot R@5: salient spans > SpanBERT spans", "zero_shot_recall", "realm",
     "realm_spanbert"),
    ("EM: salient spans > SpanBERT spans", "exact_match", "realm", "realm_spanbert"),
    ("zero-shot R@5: REALM > 30x staler index", "zero_shot_recall", "realm",
     "realm_stale_index"),
    ("EM: REALM > 30x staler index", "exact_match", "realm", "realm_stale_index"),
    # The loss forms and fine-tuning variants against REALM's released forms (no expected
    # direction in the paper: "holds" tests the released choice).
    ("EM: per-token MLM > per-example MLM", "exact_match", "realm", "realm_sequence_mlm"),
    ("zero-shot R@5: per-token MLM > per-example MLM", "zero_shot_recall", "realm",
     "realm_sequence_mlm"),
    ("EM: joint span softmax > per-document", "exact_match", "realm",
     "realm_per_document_spans"),
    ("EM: frozen doc tower > trained", "exact_match", "realm", "realm_train_doc_tower"),
    ("R@5 after fine-tuning: frozen doc tower > trained", "finetuned_recall", "realm",
     "realm_train_doc_tower"),
    ("EM: without null document > with", "exact_match", "realm", "realm_null_document"),
    ("EM: endpoint-MLP span reader > marker span reader", "exact_match", "realm",
     "realm_marker_reader"),
)


@dataclasses.dataclass(frozen=True)
class Ordering:
  """`better` > `worse` on `metric`: margin = mean over seeds of the paired difference,
  se = its standard error; verdict "holds" (margin > 2 se), "not significant" (0 < margin <=
  2 se), "no difference" (margin 0) or "reversed" (margin < 0)."""
  statement: str
  metric: str
  better: str
  worse: str
  margin: float
  se: float
  seeds: int

  @property
  def verdict(self) -> str:
    if self.margin > 2 * self.se and self.margin > 0:
      return "holds"
    if self.margin > 0:
      return "not significant"
    return "no difference" if self.margin == 0 else "reversed"


def orderings(results: Sequence[AblationResult]) -> List[Ordering]:
  """Those of `ORDERINGS` whose variants were run."""
  run = {row["variant"] for row in results[0].rows} | {"ict"}
  found = []
  for statement, metric, better, worse in ORDERINGS:
    if better in run and worse in run:
      differences = (seed_values(results, better, metric) -
                     seed_values(results, worse, metric))
      se = (float(np.std(differences, ddof=1) / np.sqrt(len(differences)))
            if len(differences) > 1 else nan)
      found.append(Ordering(statement, metric, better, worse, float(np.mean(differences)),
                            se, len(differences)))
  return found
