"""Open-QA evaluation: exact match, retriever recall@k, and a predictions file with provenance.

Legend: Q questions, K retrieved blocks per question (best first), k read blocks.

* exact match: the predicted span against the gold answers after `normalize_answer`
  (ORQA's normalisation); CuratedTrec (`match="regex"`): a gold regex matches at the start of the
  prediction (`realm_tf.evaluation.regex_match`).
* recall@k: the fraction of questions with an answer-bearing block among their top k
  retrieved, `has_answer` on the block text (the function fine-tuning's retriever loss uses).
* predictions JSONL, one line per question:
    {"question", "gold_answers", "match", "answer", "score", "exact_match",
     "top_blocks": [{"block_id", "title", "text", "probability", "has_answer"}, ...]}
  `score` is the probability of the predicted (block, span); `top_blocks` are the k blocks the
  reader read, with p(z | x).
"""
import dataclasses
import json
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf.evaluation import RecallAtK
from realm_tf.evaluation import exact_match
from realm_tf.evaluation import regex_match
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.retrieve_and_read import Answer
from realm_tf.retrieve_and_read import RetrieveAndRead

DEFAULT_RECALL_KS = (1, 5, 20, 100)


@dataclasses.dataclass(frozen=True)
class EvalConfig:
  """Attributes:
    recall_ks: the recall@k cut-offs (those above the corpus size are dropped).
    max_examples: evaluate the first `max_examples` questions (0: all).
    batch_size: questions per batch.
  """
  recall_ks: Sequence[int] = DEFAULT_RECALL_KS
  max_examples: int = 0
  batch_size: int = 16


def is_correct(prediction: str, example: QAExample) -> bool:
  """Exact match (strings) or regex match (CuratedTrec) of one prediction."""
  if example.match == "regex":
    return regex_match(prediction, example.answers)
  return exact_match(prediction, example.answers)


def compute_metrics(predictions: Sequence[str], examples: Sequence[QAExample],
                    retrieved_has_answer: np.ndarray,
                    recall_ks: Sequence[int] = DEFAULT_RECALL_KS) -> Dict[str, float]:
  """Exact match and recall@k.

  Args:
    predictions: [Q] predicted answers.
    examples: [Q] the questions with their gold answers.
    retrieved_has_answer: bool [Q, K], whether the i-th retrieved block holds an answer.
    recall_ks: cut-offs; each must be <= K.

  Returns:
    {"exact_match": ..., "recall@1": ..., ..., "num_questions": Q}.
  """
  if len(predictions) != len(examples):
    raise ValueError(f"{len(predictions)} predictions for {len(examples)} questions")
  if not examples:
    raise ValueError("no questions to evaluate")
  recall = RecallAtK(recall_ks)
  recall.update(retrieved_has_answer)
  metrics = {"exact_match": float(np.mean([is_correct(p, e)
                                          for p, e in zip(predictions, examples)]))}
  metrics.update({f"recall@{k}": value for k, value in recall.result().items()})
  metrics["num_questions"] = float(len(examples))
  return metrics


def prediction_record(example: QAExample, answer: Answer,
                      evidence_has_answer: Sequence[bool]) -> Dict:
  """The predictions-file record of one question (see the module docstring)."""
  return {
      "question": example.question,
      "gold_answers": list(example.answers),
      "match": example.match,
      "answer": answer.answer,
      "score": answer.probability,
      "exact_match": is_correct(answer.answer, example),
      "top_blocks": [{"block_id": e.block_id, "title": e.title, "text": e.text,
                      "probability": e.probability, "has_answer": bool(h)}
                     for e, h in zip(answer.evidence, evidence_has_answer)],
  }


@dataclasses.dataclass
class EvalResult:
  metrics: Dict[str, float]
  records: List[Dict]


def evaluate(system: RetrieveAndRead, examples: Sequence[QAExample],
             config: EvalConfig = EvalConfig(), predictions_path: str = "",
             progress: Optional[Callable[[int], None]] = None) -> EvalResult:
  """Answers every question, scores the answers and the retrieval, writes predictions.

  Args:
    system: the retrieve-and-read system (it reads `system.k` blocks).
    examples: the questions.
    config: cut-offs and batching.
    predictions_path: where to write the predictions JSONL ("" to skip).
    progress: called with the number of questions done after each batch.
  """
  if config.max_examples < 0:
    raise ValueError(f"max_examples must be >= 0 (0: all), got {config.max_examples}")
  examples = list(examples)[:config.max_examples or None]
  if not examples:
    raise ValueError("no questions to evaluate")
  recall_ks = sorted(k for k in set(config.recall_ks) if k <= system.index.num_docs) or [
      min(system.k, system.index.num_docs)]
  retrieve_k = max(max(recall_ks), system.k)
  predictions, has_answer_rows, records = [], [], []
  for begin in range(0, len(examples), config.batch_size):
    batch = examples[begin:begin + config.batch_size]
    questions = [e.question for e in batch]
    answers = system.answer(questions)
    _, rows = system.retrieve(questions, retrieve_k)
    for example, answer, retrieved in zip(batch, answers, rows):
      matcher = AnswerMatcher(example.answers, example.match)
      has_answer_rows.append([r >= 0 and matcher.has_answer(system.bodies[r])
                              for r in retrieved])
      predictions.append(answer.answer)
      records.append(prediction_record(
          example, answer, [matcher.has_answer(e.text) for e in answer.evidence]))
    if progress:
      progress(len(batch))
  metrics = compute_metrics(predictions, examples, np.array(has_answer_rows, bool), recall_ks)
  if predictions_path:
    write_predictions(records, predictions_path)
  return EvalResult(metrics, records)


def write_predictions(records: Sequence[Dict], path: str) -> None:
  """Writes prediction records as JSONL."""
  with tf.io.gfile.GFile(path, "w") as f:
    for record in records:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_predictions(path: str) -> List[Dict]:
  """Reads a predictions JSONL file."""
  with tf.io.gfile.GFile(path, "r") as f:
    return [json.loads(line) for line in f if line.strip()]
