"""Retrieve-and-read over a tiny corpus with tiny towers."""
import numpy as np
import pytest
import tensorflow as tf

from realm_tf import configs
from realm_tf import retrieve_and_read
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_texts
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer
from tiny_models import BODIES
from tiny_models import TEXT_VOCAB
from tiny_models import TITLES


@pytest.fixture(scope="module")
def system():
  tf.keras.utils.set_random_seed(0)
  tokenizer = WordpieceTokenizer(TEXT_VOCAB)
  encoder = configs.EncoderConfig.tiny(vocab_size=len(TEXT_VOCAB))
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=encoder, projection_size=8))
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder, span_hidden_size=8))
  embeddings = _embed(retriever, tokenizer, TITLES, BODIES)
  return tokenizer, retriever, reader, embeddings


@pytest.fixture(scope="module")
def read3(system):
  """The system reading the top 3 blocks, jointly normalised, its readings 40 wordpieces."""
  tokenizer, retriever, reader, embeddings = system
  return RetrieveAndRead(retriever, reader, tokenizer, BruteForceIndex(embeddings), TITLES,
                         BODIES, k=3, query_length=16, block_length=24, reader_length=40)


def _embed(retriever, tokenizer, titles, bodies):
  tower = DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id, tokenizer.pad_id, bucket=1)
  return embed_texts(tower, tokenizer, titles, bodies, batch_size=4)


def test_answers_come_from_retrieved_blocks(system, read3):
  retriever = system[1]
  system_, index = read3, read3.index
  answers = system_.answer(["where is paris ?", "who sat on the mat ?"])
  assert len(answers) == 2
  for answer in answers:
    assert len(answer.evidence) == 3
    np.testing.assert_allclose(sum(e.probability for e in answer.evidence), 1.0, atol=1e-5)
    assert 0 < answer.probability <= 1
    assert answer.answer and any(answer.answer in e.text for e in answer.evidence)
    assert all(e.text == BODIES[e.block_id] and e.title == TITLES[e.block_id]
               for e in answer.evidence)
  # The blocks of the 3 best scores of the padded question (the answer's question is trimmed to
  # its length bucket): equal scores up to float rounding, so near-ties may swap their ids.
  query = retriever.embed_query(system_.featurizer.queries(np.array(["where is paris ?"])))
  scores, ids = (x.numpy()[0] for x in index.search(query, len(BODIES)))
  score_of = dict(zip(ids.tolist(), scores.tolist()))
  evidence_scores = [score_of[e.block_id] for e in answers[0].evidence]
  np.testing.assert_allclose(evidence_scores, scores[:3], rtol=0, atol=1e-5)


def test_index_and_corpus_must_agree(system):
  tokenizer, retriever, reader, embeddings = system
  with pytest.raises(ValueError, match="index has 5 blocks but the corpus has 6"):
    RetrieveAndRead(retriever, reader, tokenizer, BruteForceIndex(embeddings[:5]), TITLES,
                    BODIES)


def test_answers_when_retrieved_blocks_are_empty(system):
  tokenizer, retriever, reader, _ = system
  titles, bodies = TITLES + ["", "mat"], BODIES + ["", ""]
  embeddings = _embed(retriever, tokenizer, titles, bodies)
  system_ = RetrieveAndRead(retriever, reader, tokenizer, BruteForceIndex(embeddings), titles,
                            bodies, k=len(bodies), query_length=16, block_length=24,
                            reader_length=40)
  (answer,) = system_.answer(["where is paris ?"])
  assert {e.block_id for e in answer.evidence} == set(range(len(bodies)))
  assert 0 < answer.probability <= 1 and np.isfinite(answer.probability)


def test_a_short_last_batch_reuses_the_traced_functions(system):
  tokenizer, retriever, reader, embeddings = system
  system_ = RetrieveAndRead(retriever, reader, tokenizer, BruteForceIndex(embeddings), TITLES,
                            BODIES, k=2, query_length=16, block_length=24, reader_length=40,
                            batch_size=4)
  questions = ["where is paris ?", "who sat on the mat ?", "where does a river flow ?",
               "the cat ?", "is paris in france ?", "who sat ?"]  # batches of 4 and 2
  answers = system_.answer(questions)
  assert system_._embed_fn.experimental_get_tracing_count() == 1
  assert system_._read_fn.experimental_get_tracing_count() == 1
  (alone,) = system_.answer(questions[-1:])
  assert alone.answer == answers[-1].answer
  np.testing.assert_allclose(alone.probability, answers[-1].probability, rtol=1e-5)


def test_per_document_span_normalization_answers_with_p_z_times_p_span(system, read3):
  """A reader trained with the patent's per-document span softmax answers with the best
  p(z|x) p(s|z,x), computed here from its raw span logits."""
  tokenizer, retriever, reader, embeddings = system
  make = lambda normalization: RetrieveAndRead(
      retriever, reader, tokenizer, BruteForceIndex(embeddings), TITLES, BODIES, k=3,
      query_length=16, block_length=24, reader_length=40, span_normalization=normalization)
  system_ = make("per_document")
  question = "where is paris ?"
  features, query_ids, query_emb = system_.embed_questions(np.array([question]))
  scores, rows = system_.index.search(query_emb, 3)
  rows = rows.numpy()[0]
  titles = np.array([[TITLES[r] for r in rows]])
  bodies = np.array([[BODIES[r] for r in rows]])
  inputs = system_.featurizer.reader_inputs(query_ids, titles, bodies)
  logits, _, _ = reader.span_logits(
      {n: inputs[n] for n in ("input_word_ids", "input_mask", "input_type_ids")},
      inputs["block_mask"])
  logits = logits.numpy()
  valid = logits > retrieve_and_read.masked_logit_value(tf.float32) / 2  # [k, S]
  log_blocks = scores.numpy()[0] - np.logaddexp.reduce(scores.numpy()[0])
  best = max(log_blocks[z] + logits[z, s] - np.logaddexp.reduce(logits[z, valid[z]])
             for z in range(3) for s in np.flatnonzero(valid[z]))
  answer = system_.answer([question])[0]
  np.testing.assert_allclose(answer.probability, np.exp(best), rtol=1e-4)
  joint = read3.answer([question])[0]  # the same system with span_normalization="joint"
  assert abs(joint.probability - answer.probability) > 1e-4  # another form, another score
