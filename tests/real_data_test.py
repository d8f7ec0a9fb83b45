"""The real-data benchmark's library on a slice: 200 Wikipedia articles, 40 NQ-open dev questions.

Checks contracts only (no model's recall value): the corpus is prepared once and reused, the
questions kept are answerable, recall@k follows the has-answer matrix, exact top-k breaks ties
by row, BM25 finds a block by its title, the embedding cache, and the torch MiniLM's padding.
"""
import os
import re
import shutil

import numpy as np
import pytest

from pipelines import wikipedia_to_blocks_lib
from realm_tf.evaluation import has_answer
from realm_tf.evaluation.bm25 import Bm25Index
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.real_data import corpus
from realm_tf.real_data import questions
from realm_tf.evaluation import retrieval_recall as recall
from realm_tf.real_data.embedding_cache import cached_embeddings
from realm_tf.retrieval.corpus import Corpus

NUM_DOCS = 200
NUM_QUESTIONS = 40


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
  cache_dir = str(tmp_path_factory.mktemp("real_data") / "corpus")
  store, info = corpus.prepare_corpus(cache_dir, num_docs=NUM_DOCS, block_length=128)
  return cache_dir, store, info


@pytest.fixture(scope="module")
def dev(prepared):
  _, store, _ = prepared
  return questions.answerable_split(store.texts, dev_percent=50).dev[:NUM_QUESTIONS]


def _fail_pipeline(*args, **kwargs):
  raise AssertionError("the Beam pipeline ran again")


def test_corpus_is_prepared_once_and_reused(prepared, monkeypatch, tmp_path):
  cache_dir, store, info = prepared
  assert not info.reused and info.articles == info.articles_packed == NUM_DOCS
  assert info.blocks == len(store) >= NUM_DOCS
  lengths = store.title_ids.row_lengths() + store.body_ids.row_lengths() + 3
  assert lengths.max() <= 128
  monkeypatch.setattr(wikipedia_to_blocks_lib, "run_pipeline", _fail_pipeline)
  again, again_info = corpus.prepare_corpus(cache_dir, num_docs=NUM_DOCS, block_length=128)
  assert again_info.reused and again.fingerprint == store.fingerprint
  assert again.texts == store.texts and again_info.seconds == info.seconds
  # Other settings prepare the corpus again (on a copy, so the fixture's stays intact).
  copy = str(tmp_path / "copy")
  shutil.copytree(cache_dir, copy)
  with pytest.raises(AssertionError, match="ran again"):
    corpus.prepare_corpus(copy, num_docs=NUM_DOCS, block_length=64)
  assert not os.path.exists(os.path.join(copy, corpus.MARKER))


def test_questions_kept_are_answerable_and_split_by_hash(prepared, dev):
  _, store, _ = prepared
  split = questions.answerable_split(store.texts, dev_percent=50)
  assert split.total > split.answerable == len(split.train) + len(split.dev)
  assert len(dev) == NUM_QUESTIONS
  assert not {e.question for e in split.train} & {e.question for e in split.dev}
  for example in dev[:10]:
    assert any(has_answer(text, example.answers) for text in store.texts)
  with pytest.raises(ValueError, match="dev questions only"):
    questions.answerable_split(store.texts, source="pyserini:nq-test")


def test_extra_training_questions_are_all_the_answerable_ones(prepared):
  _, store, _ = prepared
  extra = questions.answerable_questions(store.texts, "pyserini:trivia-dev")
  assert 0 < len(extra) < 8837
  assert all(e.source.split("!")[1].startswith("topics-and-qrels/topics.dpr.trivia.dev.txt:")
             for e in extra)
  for example in extra[:10]:
    assert any(has_answer(text, example.answers) for text in store.texts)
  with pytest.raises(ValueError, match="dev questions only"):
    questions.answerable_questions(store.texts, "pyserini:wq-test")


def test_recall_follows_a_hand_built_has_answer_matrix():
  found = np.array([[0, 1, 0], [0, 0, 0], [1, 0, 0], [0, 0, 1]], bool)
  metrics = recall.recall_at_ks(found, (1, 2, 3))
  assert metrics == {"recall@1": 0.25, "recall@2": 0.5, "recall@3": 0.75, "num_questions": 4}
  store = Corpus.from_blocks([7, 3, 5], ["T", "U", "V"],
                                 ["Paris is in France.", "Rome is in Italy.", "Nothing here."],
                                 [[1], [2], [3]], [[4], [5], [6]])
  examples = [QAExample("capital of italy?", ("Rome",)), QAExample("of france?", ("Paris",))]
  # store rows: 0 = id 3 (Rome), 1 = id 5 (Nothing), 2 = id 7 (Paris); -1 = nothing retrieved.
  rows = np.array([[1, 0, 2], [-1, 1, 2]])
  result = recall.evaluate_rankings(rows, examples, store, ks=(1, 2, 3, 100))
  assert result.has_answer.tolist() == [[False, True, False], [False, False, True]]
  assert result.metrics == {"recall@1": 0.0, "recall@2": 0.5, "recall@3": 1.0,
                            "num_questions": 2}


def test_top_k_is_exact_and_breaks_ties_by_row():
  docs = np.array([[1, 0], [0, 1], [1, 0], [0.5, 0.5]], np.float32)
  rows, scores = recall.top_k(np.array([[1, 0], [0, 0]], np.float32), docs, 3)
  assert rows.tolist() == [[0, 2, 3], [0, 1, 2]]
  np.testing.assert_allclose(scores, [[1, 1, 0.5], [0, 0, 0]])
  with pytest.raises(ValueError, match="k=5"):
    recall.top_k(docs[:1], docs, 5)


def test_evaluate_retriever_with_oracle_and_constant_embeddings(prepared, dev):
  _, store, _ = prepared
  texts = store.texts
  answer_row = {e.question: next(r for r, t in enumerate(texts) if has_answer(t, e.answers))
                for e in dev}
  docs = np.eye(len(store), dtype=np.float32)
  oracle = lambda qs: docs[[answer_row[q] for q in qs]]
  result = recall.evaluate_retriever(oracle, docs, dev, store, ks=(1, 5), batch_size=16)
  assert result.metrics == {"recall@1": 1.0, "recall@5": 1.0, "num_questions": NUM_QUESTIONS}
  assert result.rows[:, 0].tolist() == [answer_row[e.question] for e in dev]
  # Every block ties: the first rows, which is what ranking by row gives.
  constant = lambda qs: np.ones([len(qs), len(store)], np.float32)
  tied = recall.evaluate_retriever(constant, docs, dev, store, ks=(5, 20))
  expected = recall.evaluate_rankings(np.tile(np.arange(20), [len(dev), 1]), dev, store, (5, 20))
  assert tied.metrics == expected.metrics and (tied.rows == expected.rows).all()
  with pytest.raises(ValueError, match="block embeddings"):
    recall.evaluate_retriever(oracle, docs[1:], dev, store)


def test_bm25_finds_a_block_by_its_exact_title(prepared, dev):
  _, store, _ = prepared
  index = Bm25Index.from_store(store)
  # Titles with a word BM25 indexes (its tokens have two or more characters; "0" has none).
  titles = [t for t in sorted(set(store.titles)) if re.search(r"[A-Za-z]{3}", t)][::15]
  rows, scores = index.search(titles, 5)
  assert rows.shape == scores.shape == (len(titles), 5)
  for title, top in zip(titles, rows):
    assert title in [store.titles[r] for r in top if r >= 0], title
  assert (np.diff(scores, axis=1) <= 0).all()
  nothing, _ = index.search(["qqqzzzxx"], 5)
  assert nothing.tolist() == [[-1] * 5]
  rows, _ = index.search([e.question for e in dev], 20)
  result = recall.evaluate_rankings(rows, dev, store, ks=(5, 20))
  assert 0.0 <= result.metrics["recall@5"] <= result.metrics["recall@20"] <= 1.0


def test_embedding_cache_reuses_only_the_same_key(tmp_path):
  calls = []

  def compute():
    calls.append(1)
    return np.arange(6, dtype=np.float32).reshape(3, 2)

  first, seconds, reused = cached_embeddings(str(tmp_path), "model/a", {"corpus": "x"}, compute)
  again, again_seconds, again_reused = cached_embeddings(str(tmp_path), "model/a",
                                                         {"corpus": "x"}, compute)
  assert not reused and again_reused and len(calls) == 1 and again_seconds == seconds
  np.testing.assert_array_equal(first, again)
  cached_embeddings(str(tmp_path), "model/a", {"corpus": "y"}, compute)
  assert len(calls) == 2


def test_sentence_minilm_is_unit_length_and_padding_free(prepared):
  pytest.importorskip("torch")
  pytest.importorskip("transformers")
  # pylint: disable-next=g-import-not-at-top
  from realm_tf.real_data.sentence_minilm import SentenceMiniLM
  _, store, _ = prepared
  rows = [0, 1, 2, int(np.argmax(store.body_ids.row_lengths()))]
  small = Corpus.from_blocks(store.block_ids[rows], [store.titles[r] for r in rows],
                                 [store.texts[r] for r in rows],
                                 [store.title_ids.row(r) for r in rows],
                                 [store.body_ids.row(r) for r in rows])
  model = SentenceMiniLM(num_threads=1, batch_size=4)
  together = model.embed_store(small)
  assert together.shape == (4, 384)
  np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
  model.batch_size = 1  # each block alone, unpadded
  np.testing.assert_allclose(model.embed_store(small), together, atol=1e-4)
  queries = model.embed_queries(["who wrote hamlet?", "what is the capital of france?"])
  assert queries.shape == (2, 384)
