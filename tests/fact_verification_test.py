"""The fact-verification recipe on a synthetic corpus: answer types, determinism for a seed,
article-disjoint splits, balanced labels, and false claims that state another answer of the
same type that the evidence block does not hold."""
import collections
import json

from realm_tf.classification import data
from realm_tf.real_data import fact_verification as fv
from realm_tf.evaluation.answer_matcher import AnswerMatcher
from realm_tf.evaluation.qa_example import QAExample

CITIES = ("Paris", "Rome", "Oslo", "Lima", "Kyiv", "Baku", "Doha", "Riga")


def world():
  """60 articles, each a person with a birth year and a city; a question about each fact."""
  titles, texts, examples = [], [], []
  for i in range(60):
    name, year, city = f"Person{i}", str(1900 + i), CITIES[i % len(CITIES)]
    titles.append(name)
    texts.append(f"{name} was born in {year} and lived in {city}.")
    examples.append(QAExample(f"when was {name.lower()} born", (year,)))
    examples.append(QAExample(f"where did {name.lower()} live", (city,)))
  examples.append(QAExample("what is nowhere", ("Atlantis",)))  # no block answers it
  return titles, texts, examples


def test_answer_types():
  assert [fv.answer_type(a) for a in ("1969", "2,000", "3 May 1990", "Alexander Graham Bell",
                                      "the Beatles", "red", "")] == [
                                          "year", "number", "number", "name", "other",
                                          "other", "other"]
  assert fv.claim_text("who wrote hamlet ?", "Shakespeare") == "who wrote hamlet? Shakespeare."


def test_claims_are_deterministic_balanced_and_split_by_article(tmp_path):
  titles, texts, examples = world()
  claims = fv.build_claims(titles, texts, examples, seed=3)
  assert claims == fv.build_claims(titles, texts, examples, seed=3)
  assert claims != fv.build_claims(titles, texts, examples, seed=4)
  assert len(claims) == 120  # every answerable question, none dropped
  labels = collections.Counter(c.label for c in claims)
  assert labels["true"] == labels["false"] == 60
  train = {c.title for c in claims if c.split == "train"}
  test = {c.title for c in claims if c.split == "test"}
  assert train and test and not train & test
  assert {c.split for c in fv.build_claims(titles, texts, examples, seed=4)
          if c.title in test} == {"test"}  # the split does not depend on the seed
  for claim in claims:
    block = texts[claim.row]
    assert claim.title == titles[claim.row] and AnswerMatcher([claim.answer]).has_answer(block)
    assert fv.answer_type(claim.stated) == claim.kind == fv.answer_type(claim.answer)
    if claim.label == "true":
      assert claim.stated == claim.answer
    else:
      assert claim.stated != claim.answer and not AnswerMatcher([claim.stated]).has_answer(block)
    assert claim.text == fv.claim_text(claim.question, claim.stated)
  path = str(tmp_path / "claims.jsonl")
  fv.write_claims(path, claims)
  loaded = data.load_examples(path)
  assert [(e.text, e.label) for e in loaded] == [(c.text, c.label) for c in claims]
  with open(path, encoding="utf-8") as f:
    assert json.loads(f.readline())["title"] == claims[0].title
