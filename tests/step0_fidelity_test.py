"""A retriever built from all-MiniLM-L6-v2 starts with the checkpoint's retrieval quality.

The oracle is the checkpoint run the way it was trained: HF `transformers.BertModel`, mean
pooling under the attention mask, L2 normalisation (sentence-transformers' pipeline).
"""
import importlib.util

import numpy as np
import pytest
import tensorflow as tf

from realm_tf import presets
from realm_tf import pretrained
from realm_tf.demo import questions as questions_lib
from realm_tf.demo import wikipedia
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.models.retriever import pool
from realm_tf.qa import datasets
from realm_tf.tokenization.featurizers import BlockFeaturizer
from realm_tf.tokenization.featurizers import QueryFeaturizer

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.skipif(
    any(importlib.util.find_spec(p) is None for p in
        (pretrained.MINILM_PACKAGE, wikipedia.WIKI_PACKAGE, "pyserini")),
    reason="real weights and data come with `make test`")

NUM_ARTICLES, NUM_QUESTIONS, BLOCK_LENGTH, QUERY_LENGTH = 150, 60, 128, 32


def _hf_mean_pooled(model, features, batch=32):
  """[N, L] int features -> [N, 384] HF mean-pooled (not normalised) embeddings."""
  rows = []
  with torch.no_grad():
    for start in range(0, len(features["input_word_ids"]), batch):
      part = {k: torch.tensor(np.asarray(v[start:start + batch]), dtype=torch.long)
              for k, v in features.items()}
      hidden = model(input_ids=part["input_word_ids"], attention_mask=part["input_mask"],
                     token_type_ids=part["input_type_ids"]).last_hidden_state
      mask = part["input_mask"].unsqueeze(-1).float()
      rows.append(((hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)).numpy())
  return np.concatenate(rows)


def _ours(fn, features, batch=32):
  return np.concatenate([fn({k: v[start:start + batch] for k, v in features.items()}).numpy()
                         for start in range(0, len(features["input_word_ids"]), batch)])


def _unit(x):
  return x / np.linalg.norm(x, axis=1, keepdims=True)


def _recall_at(k, query_embeddings, doc_embeddings, hits):
  top = np.argsort(-(query_embeddings @ doc_embeddings.T), axis=1)[:, :k]
  return float(np.mean([hits[i, top[i]].any() for i in range(len(top))]))


@pytest.fixture(scope="module")
def sample():
  """A fixed NQ-open dev sample: the articles the questions mention most, the questions some
  article answers, and the checkpoint's (HF) mean-pooled embeddings of both."""
  titles, bodies = wikipedia.load_wiki_summaries()
  nq = datasets.load_pyserini_topics("nq-dev")[:2000]
  rows = wikipedia.select_articles(titles, [e.question for e in nq], NUM_ARTICLES)
  titles, bodies = [titles[r] for r in rows], [bodies[r] for r in rows]
  texts = [f"{t} {b}" for t, b in zip(titles, bodies)]
  examples = questions_lib.answerable(nq, texts)[:NUM_QUESTIONS]
  hits = np.array([[AnswerMatcher(e.answers, e.match).has_answer(t) for t in texts]
                   for e in examples])
  tokenizer = pretrained.minilm_tokenizer()
  blocks = {k: v.numpy() for k, v in
            BlockFeaturizer(tokenizer, BLOCK_LENGTH)((tf.constant(titles),
                                                       tf.constant(bodies))).items()}
  queries = {k: v.numpy() for k, v in QueryFeaturizer(tokenizer, QUERY_LENGTH)(
      tf.constant([e.question for e in examples])).items()}
  reference = transformers.BertModel.from_pretrained(pretrained.minilm_dir(),
                                                     local_files_only=True).eval()
  return dict(blocks=blocks, queries=queries, hits=hits,
              docs_raw=_hf_mean_pooled(reference, blocks),
              queries_raw=_hf_mean_pooled(reference, queries))


@pytest.fixture(scope="module")
def retriever():
  """What `realm-ict --init_weights=minilm` builds (the default head for MiniLM)."""
  return presets.build_retriever(
      presets.encoder_config("minilm_l6", pretrained.minilm_tokenizer().vocab_size),
      bert_weights="minilm")


def test_minilm_gets_its_own_head_by_default(retriever):
  assert (retriever.pooling, retriever.projection) == ("mean", "l2_normalize")
  assert retriever.projection_size == 384


def test_mean_pooled_tower_matches_transformers(sample, retriever):
  blocks = {k: v[:16] for k, v in sample["blocks"].items()}
  expected = sample["docs_raw"][:16]
  ours = pool(retriever.doc_encoder(blocks, training=False), blocks["input_mask"], "mean")
  np.testing.assert_allclose(ours.numpy(), expected, atol=1e-4)
  unit = expected / np.linalg.norm(expected, axis=1, keepdims=True)
  np.testing.assert_allclose(retriever.embed_documents(blocks).numpy(), unit, atol=1e-4)


def test_step0_recall_equals_the_raw_checkpoint(sample, retriever):
  docs_raw, queries_raw = sample["docs_raw"], sample["queries_raw"]
  docs = _ours(lambda f: retriever.embed_documents(f, training=False), sample["blocks"])
  queries = _ours(lambda f: retriever.embed_query(f, training=False), sample["queries"])
  raw_scores = _unit(queries_raw) @ _unit(docs_raw).T  # cosines [Q, N]
  our_scores = queries @ docs.T / retriever.score_scale
  np.testing.assert_allclose(our_scores, raw_scores, atol=1e-4)
  hits = sample["hits"]
  num_questions = len(hits)
  for k in (1, 5, 20):
    raw, ours = _recall_at(k, queries_raw, docs_raw, hits), _recall_at(k, queries, docs, hits)
    # A rank boundary between two blocks whose cosines tie within float noise may fall either
    # way (e.g. near-duplicate articles): each such question may move recall by 1/Q.
    ranked = -np.sort(-raw_scores, axis=1)
    ties = int((ranked[:, k - 1] - ranked[:, k] < 1e-4).sum())
    assert abs(ours - raw) <= 0.01 + ties / num_questions, (k, ours, raw, ties)
  assert _recall_at(5, queries_raw, docs_raw, hits) > 0.3  # a meaningful sample


def test_realm_head_on_minilm_loses_the_geometry(sample):
  """The reason for the default: REALM's head (pooler -> fresh Dense -> LayerNorm) on the same
  weights ranks worse than the checkpoint before any training."""
  tf.keras.utils.set_random_seed(0)
  realm_head = presets.build_retriever(
      presets.encoder_config("minilm_l6", pretrained.minilm_tokenizer().vocab_size),
      bert_weights="minilm", head="realm")
  docs_raw, queries_raw = sample["docs_raw"], sample["queries_raw"]
  docs = _ours(lambda f: realm_head.embed_documents(f, training=False), sample["blocks"])
  queries = _ours(lambda f: realm_head.embed_query(f, training=False), sample["queries"])
  assert (_recall_at(5, queries, docs, sample["hits"]) <
          _recall_at(5, queries_raw, docs_raw, sample["hits"]))
