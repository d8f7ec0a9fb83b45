"""Open-QA metrics on a hand-computed example, and evaluation with a predictions file."""
import numpy as np
import pytest

from realm_tf import configs
from realm_tf.evaluation import has_answer
from realm_tf.evaluation.qa_example import QAExample
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf import tiny_world
from realm_tf.qa.evaluate_lib import EvalConfig
from realm_tf.qa.evaluate_lib import compute_metrics
from realm_tf.qa.evaluate_lib import evaluate
from realm_tf.qa.evaluate_lib import read_predictions
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.retrieval.embedding import DocTower
from realm_tf.retrieval.embedding import embed_texts
from realm_tf.tokenization import answer_text
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def test_metrics_match_a_hand_computed_example():
  examples = [QAExample("who wrote hamlet?", ("William Shakespeare",)),
              QAExample("capital of france?", ("Paris",)),
              QAExample("who walked on the moon?", ("Neil Armstrong",)),
              QAExample("when?", ("1969",))]
  predictions = ["william shakespeare!", "the Paris", "Armstrong", "in 1969"]
  retrieved = np.array([[0, 1, 0, 0, 0],   # first answer-bearing block at rank 2
                        [1, 0, 0, 0, 0],   # rank 1
                        [0, 0, 0, 0, 0],   # none
                        [0, 0, 0, 0, 1]],  # rank 5
                       bool)
  metrics = compute_metrics(predictions, examples, retrieved, recall_ks=(1, 2, 5))
  # EM: 1 (case and punctuation), 1 (article), 0 (partial), 0 (extra word) -> 2/4.
  assert metrics == {"exact_match": 0.5, "recall@1": 0.25, "recall@2": 0.5, "recall@5": 0.75,
                     "num_questions": 4.0}


def test_curatedtrec_regex_metrics():
  examples = [QAExample("when?", (r"19[0-9]{2}",), match="regex"),
              QAExample("when again?", (r"19[0-9]{2}",), match="regex"),
              QAExample("who?", (r"(neil )?armstrong",), match="regex")]
  metrics = compute_metrics(["1969 was the year", "in 1969", "Neil Armstrong"], examples,
                            np.ones([3, 1], bool), recall_ks=(1,))
  assert metrics["exact_match"] == pytest.approx(2 / 3)  # a regex must match at the start
  with pytest.raises(ValueError, match="2 predictions for 3 questions"):
    compute_metrics(["a", "b"], examples, np.ones([3, 1], bool), (1,))


@pytest.fixture(scope="module")
def system():
  tokenizer = WordpieceTokenizer(list(tiny_world.VOCAB))
  encoder = configs.EncoderConfig.tiny(vocab_size=tokenizer.vocab_size)
  retriever = configs.build_retriever(configs.RetrieverConfig(encoder=encoder,
                                                              projection_size=8))
  reader = configs.build_reader(configs.ReaderConfig(encoder=encoder, span_hidden_size=8))
  records = tiny_world.corpus_records()
  titles, texts = [r["title"] for r in records], [r["text"] for r in records]
  embeddings = embed_texts(DocTower(retriever, tokenizer.cls_id, tokenizer.sep_id,
                                    tokenizer.pad_id, block_length=32, bucket=1),
                           tokenizer, titles, texts, batch_size=32)
  ids = [r["id"] for r in records]
  return RetrieveAndRead(retriever, reader, tokenizer, BruteForceIndex(embeddings), titles,
                         texts, k=3, query_length=16, block_length=32, reader_length=48,
                         block_ids=ids, batch_size=5)


def test_evaluate_writes_predictions_with_provenance(system, tmp_path):
  examples = [QAExample(q, a) for q, a in tiny_world.QUESTIONS]
  path = str(tmp_path / "predictions.jsonl")
  result = evaluate(system, examples, EvalConfig(recall_ks=(1, 3, 16, 100)), path)
  records = read_predictions(path)
  assert records == result.records and len(records) == len(examples)
  # recall@100 > 16 blocks is dropped; recall@16 (every block) is kept.
  assert set(result.metrics) == {"exact_match", "recall@1", "recall@3", "recall@16",
                                 "num_questions"}
  _, rows = system.retrieve([e.question for e in examples], 16)
  for k in (1, 3, 16):
    assert result.metrics[f"recall@{k}"] == pytest.approx(np.mean(
        [any(has_answer(system.bodies[r], e.answers) for r in row[:k])
         for e, row in zip(examples, rows)]))
  assert result.metrics["exact_match"] == np.mean([r["exact_match"] for r in records])
  for record, example in zip(records, examples):
    assert record["question"] == example.question
    assert record["gold_answers"] == list(example.answers)
    assert 0 <= record["score"] <= 1
    assert len(record["top_blocks"]) == 3
    assert sum(b["probability"] for b in record["top_blocks"]) == pytest.approx(1, abs=1e-5)
    for block in record["top_blocks"]:
      row = system.block_ids.tolist().index(block["block_id"])
      assert (block["title"], block["text"]) == (system.titles[row], system.bodies[row])
      assert block["has_answer"] == has_answer(block["text"], example.answers)
    assert any(record["answer"] in answer_text.original_text([b["text"]]).numpy()[0].decode()
               for b in record["top_blocks"])  # as ORQA: the text's tokens joined by spaces


def test_evaluate_limits_and_errors(system):
  examples = [QAExample(q, a) for q, a in tiny_world.QUESTIONS]
  result = evaluate(system, examples, EvalConfig(recall_ks=(1,), max_examples=2))
  assert result.metrics["num_questions"] == 2
  with pytest.raises(ValueError, match="no questions"):
    evaluate(system, [])
