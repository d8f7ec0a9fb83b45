"""`Answer` -> the JSON of `POST /v1/ask`, `Classification`s -> that of `POST /v1/classify`.

    {"question", "answer", "score": p(best block and span), "answer_block": index into
     "evidence" (-1: no span), "top_k", "latency_ms",
     "evidence": [{"block_id", "title", "text", "score": p(z | x) among the top_k blocks,
                   "answer_start", "answer_end": the answer's character offsets in "text"
                   (null outside the answer block)}], best retrieval score first}
    {"top_k", "latency_ms", "classifications": [{"text", "label", "probability": p(ŷ | x),
     "label_probabilities": {label: p(y | x)}, "evidence": [{"block_id" (-2: the null
     document), "title", "text", "probability": p(z | x), "label_probability": p(ŷ | z, x)}],
     largest p(z | x) p(ŷ | z, x) first}], one a text, in the request's order}
"""
import dataclasses
import re
from typing import Any, Dict, Optional, Sequence, Tuple


def answer_span(answer: str, text: str) -> Optional[Tuple[int, int]]:
  """Character offsets [start, end) of `answer` in its block's `text`: its first occurrence,
  else its first case-insensitive one (a span detokenized from wordpieces), else the first
  where each space of the answer stands for any whitespace or none (ORQA's answers join the
  text's tokens by spaces: "O ' Connor" is "O'Connor" in the text); None when the text does
  not hold it."""
  if not answer:
    return None
  start = text.find(answer)
  if start < 0:
    start = text.lower().find(answer.lower())
    if start < 0 or len(text.lower()) != len(text):
      parts = [re.escape(part) for part in answer.split(" ") if part]
      match = re.search(r"\s*".join(parts), text, re.IGNORECASE) if parts else None
      return match.span() if match else None
  return start, start + len(answer)


def answer_json(answer, top_k: int, latency_ms: float) -> Dict[str, Any]:
  """The response to one question."""
  evidence = []
  for i, block in enumerate(answer.evidence):
    span = answer_span(answer.answer, block.text) if i == answer.block else None
    evidence.append({"block_id": block.block_id, "title": block.title, "text": block.text,
                     "score": block.probability,
                     "answer_start": span[0] if span else None,
                     "answer_end": span[1] if span else None})
  return {"question": answer.question, "answer": answer.answer, "score": answer.probability,
          "answer_block": answer.block, "top_k": top_k, "latency_ms": round(latency_ms, 3),
          "evidence": evidence}


def classifications_json(classifications: Sequence[Any], top_k: int,
                         latency_ms: float) -> Dict[str, Any]:
  """The response to one `/v1/classify` request (`classification.model.Classification`s)."""
  return {"top_k": top_k, "latency_ms": round(latency_ms, 3),
          "classifications": [dataclasses.asdict(c) for c in classifications]}
