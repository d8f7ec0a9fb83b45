"""Open-QA evaluation: questions (`qa_example`), answer normalisation and matching
(`answer_matcher`), retrieval recall@k and the BM25 baseline (`bm25`)."""
from realm_tf.evaluation.answer_normalization import InvalidAnswerPattern
from realm_tf.evaluation.answer_normalization import exact_match
from realm_tf.evaluation.answer_normalization import has_answer
from realm_tf.evaluation.answer_normalization import normalize_answer
from realm_tf.evaluation.answer_normalization import regex_match
from realm_tf.evaluation.retrieval_metrics import RecallAtK
from realm_tf.evaluation.retrieval_metrics import exact_match_rate
from realm_tf.evaluation.retrieval_metrics import recall_at_k

__all__ = [
    "InvalidAnswerPattern",
    "RecallAtK",
    "exact_match",
    "exact_match_rate",
    "has_answer",
    "normalize_answer",
    "recall_at_k",
    "regex_match",
]
