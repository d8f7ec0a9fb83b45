"""Open-QA on top of REALM: question sets, fine-tuning, evaluation and the `ask` front door.

    from realm_tf.qa import ask
    ask("who wrote Hamlet?", model_dir="...")      # -> Answer(answer, probability, evidence)

Modules: `datasets` (NQ-Open / WebQuestions / CuratedTrec, ORQA JSONL, DPR TSV, pyserini),
`doc_index` (frozen block embeddings + MIPS index),
`supervision` (has-answer and gold spans), `model` (model directories; their configs and initial
weights: `realm_tf.presets`),
`finetune_lib` (takes an Open-QA `realm_tf.experiment_config.ExperimentConfig`; AdamW from
`realm_tf.training.optimizer`), `evaluate_lib`, `ask_lib`.

The names below are imported on first use, so light entry points do not pay for TensorFlow.
"""
import importlib

_EXPORTS = {
    "Asker": "ask_lib",
    "ask": "ask_lib",
    "QAExample": "datasets",
    "load_examples": "datasets",
    "load_pyserini_topics": "datasets",
    "DocIndex": "doc_index",
    "EmbeddingMismatchError": "doc_index",
    "EvalConfig": "evaluate_lib",
    "compute_metrics": "evaluate_lib",
    "evaluate": "evaluate_lib",
    "QAModel": "model",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
  if name not in _EXPORTS:
    raise AttributeError(f"module 'realm_tf.qa' has no attribute {name!r}")
  return getattr(importlib.import_module(f"realm_tf.qa.{_EXPORTS[name]}"), name)
