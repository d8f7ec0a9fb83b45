"""The toy world of the tests, the README's Open-QA commands and two benchmarks.

One table, `PEOPLE` (16 people, each living in a city and working as a job), over one
vocabulary (`VOCAB`: BERT's specials, the template words, names, cities, jobs). From it,
`write_pipeline` writes the pipeline formats (person i's block, id 1000 + i: "Ada lives in
Doha. Ada works as a tailor."; each pre-training example restates one fact with its value as
a one-wordpiece salient span), and `write_open_qa` (`python -m realm_tf.tiny_world
--output_dir=DIR`) the Open-QA files: `vocab.txt`, `corpus.jsonl`, `train.jsonl` /
`dev.jsonl` (12 questions about people 0-11; 12-15 are distractors), `curated.jsonl` (regex
answers) and `new_corpus.jsonl` (`UPDATES`, ids 2000 + i: new knowledge without retraining).

The tests' learning margins were measured (over seeds) with tiny towers on exactly these
blocks, examples and vocabulary, so the Open-QA files add no word: their questions are cloze
statements cut before the value ("ada lives in the city of" -> "Doha").
"""
import argparse
import dataclasses
import json
import os
from typing import Dict, List, Sequence, Tuple

import tensorflow as tf

from realm_tf import presets
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
# The values a fact can take (every one a wordpiece of VOCAB).
CITIES = ("paris", "rome", "oslo", "lima", "kyiv", "baku", "doha", "riga")
JOBS = ("baker", "pilot", "nurse", "judge", "miner", "tailor", "coach", "chef")


@dataclasses.dataclass(frozen=True)
class Person:
  """One row of the table: `name` lives in `city` and works as a `job` (one wordpiece each)."""
  name: str
  city: str
  job: str


# Cities and jobs as np.random.default_rng(0) drew them for the tests' measured margins.
PEOPLE = tuple(Person(*row) for row in (
    ("ada", "doha", "tailor"), ("bob", "kyiv", "nurse"), ("cid", "oslo", "baker"),
    ("dan", "paris", "baker"), ("eve", "rome", "coach"), ("fay", "baku", "chef"),
    ("gus", "kyiv", "miner"), ("hal", "riga", "tailor"), ("ivy", "baku", "miner"),
    ("jon", "kyiv", "chef"), ("kim", "oslo", "coach"), ("lou", "baku", "baker"),
    ("max", "lima", "coach"), ("ned", "kyiv", "baker"), ("oli", "doha", "tailor"),
    ("pam", "doha", "pilot")))
NAMES = tuple(person.name for person in PEOPLE)
TEMPLATE_WORDS = (".", "lives", "in", "works", "as", "a", "the", "city", "of", "is")
VOCAB = SPECIAL_TOKENS + TEMPLATE_WORDS + NAMES + CITIES + JOBS

# The swapped corpus: Ada moved to Lima, Hal became a pilot.
UPDATES = {"ada": Person("ada", "lima", "tailor"), "hal": Person("hal", "riga", "pilot")}
NUM_ASKED = 12  # questions about PEOPLE[:12]; the other blocks are distractors


def block_text(person: Person) -> str:
  """The person's block, e.g. 'Ada lives in Doha. Ada works as a tailor.'"""
  return (f"{person.name.title()} lives in {person.city.title()}. "
          f"{person.name.title()} works as a {person.job}.")


def tokenizer() -> WordpieceTokenizer:
  """The wordpiece tokenizer of VOCAB."""
  return WordpieceTokenizer(list(VOCAB))


def write_pipeline(directory: str, people: Sequence[Person] = PEOPLE,
                   vocab: Sequence[str] = VOCAB,
                   pretrained: int = -1) -> Tuple[Corpus, WordpieceTokenizer]:
  """Writes blocks-00000-of-00001.tfrecord (block ids 1000, 1001, ...) and
  examples-00000-of-00001.tfrecord with their manifests; returns (Corpus, tokenizer).

  Args:
    people, vocab: the table and its wordpieces (every name, city and job one wordpiece).
    pretrained: the first this many people have pre-training examples (-1: all); the others'
      facts are only in their blocks.
  """
  tok = WordpieceTokenizer(list(vocab))
  ids = lambda text: tok(tf.constant([text])).to_list()[0]
  os.makedirs(directory, exist_ok=True)
  blocks, examples = [], []
  for i, person in enumerate(people):
    name, text, block_id = person.name, block_text(person), 1000 + i
    blocks.append((block_id, name, text, ids(name), ids(text)))
    if 0 <= pretrained <= i:
      continue
    for sentence, value in ((f"{name} lives in the city of {person.city} .", person.city),
                            (f"the {person.job} is {name} .", person.job)):
      query = ids(sentence)
      position = query.index(ids(value)[0])
      examples.append((query, position, position, block_id, value, "FACT"))
  with tf.io.TFRecordWriter(os.path.join(directory, "blocks-00000-of-00001.tfrecord")) as w:
    for block in blocks:
      w.write(formats.block_example(*block))
  with tf.io.TFRecordWriter(os.path.join(directory, "examples-00000-of-00001.tfrecord")) as w:
    for example in examples:
      w.write(formats.pretraining_example(*example))
  for prefix in ("blocks", "examples"):
    shards.write_manifest(directory, prefix, {"tiny_world": True})
  return Corpus.load(directory), tok


def write_vocab(path: str, vocab: Sequence[str] = VOCAB) -> None:
  """`vocab` as a vocab.txt, one wordpiece a line."""
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(vocab) + "\n")


def write_pipeline_and_vocab(directory) -> tuple:
  """`write_pipeline` into `directory` (a pathlib.Path) plus its vocab.txt, for the binaries'
  `--vocab_file`; returns (directory, vocab path)."""
  write_pipeline(str(directory))
  vocab = directory / "vocab.txt"
  write_vocab(str(vocab))
  return directory, vocab


# Open-QA --------------------------------------------------------------------------------------


def _cloze(i: int, person: Person) -> Tuple[str, str, str]:
  """(question, value as the block writes it, regex prefix): the city of even `i`, the job of
  odd `i`."""
  if i % 2 == 0:
    return f"{person.name} lives in the city of", person.city.title(), "(the city of )?"
  return f"{person.name} works as a", person.job, "(an? )?"


# (question, answers) of PEOPLE[:NUM_ASKED]: NaturalQuestions-style strings, and for the first
# three CuratedTrec-style regexes (matched at the start of the prediction).
QUESTIONS = tuple((q, (value,)) for q, value, _ in
                  (_cloze(i, p) for i, p in enumerate(PEOPLE[:NUM_ASKED])))
CURATED = tuple((q, (prefix + value.lower(),)) for q, value, prefix in
                (_cloze(i, p) for i, p in enumerate(PEOPLE[:3])))


@dataclasses.dataclass(frozen=True)
class OpenQAFiles:
  """Paths of the written Open-QA files."""
  directory: str
  vocab_file: str
  corpus: str
  new_corpus: str
  train: str
  dev: str
  curated: str


def corpus_records(updated: bool = False) -> List[Dict]:
  """The blocks of `write_pipeline` (ids 1000, 1001, ...), or with `UPDATES` applied (ids
  2000, 2001, ...)."""
  people = [UPDATES.get(p.name, p) if updated else p for p in PEOPLE]
  return _records(people, 2000 if updated else 1000)


def _records(people: Sequence[Person], first_id: int) -> List[Dict]:
  return [{"id": first_id + i, "title": p.name, "text": block_text(p)}
          for i, p in enumerate(people)]


def write_corpus(path: str, people: Sequence[Person], first_id: int = 5000) -> str:
  """`people`'s blocks as a JSONL corpus (ids `first_id`, ...); returns `path`."""
  _write_jsonl(path, _records(people, first_id))
  return path


def _write_jsonl(path: str, records: Sequence[Dict]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")


def write_open_qa(directory: str) -> OpenQAFiles:
  """Writes the Open-QA files into `directory` (created if absent)."""
  os.makedirs(directory, exist_ok=True)
  files = OpenQAFiles(directory, *(os.path.join(directory, name) for name in (
      "vocab.txt", "corpus.jsonl", "new_corpus.jsonl", "train.jsonl", "dev.jsonl",
      "curated.jsonl")))
  write_vocab(files.vocab_file)
  _write_jsonl(files.corpus, corpus_records())
  _write_jsonl(files.new_corpus, corpus_records(updated=True))
  questions = [{"question": q, "answer": list(a)} for q, a in QUESTIONS]
  _write_jsonl(files.train, questions)
  _write_jsonl(files.dev, questions)
  _write_jsonl(files.curated, [{"question": q, "answer": list(a)} for q, a in CURATED])
  return files


# The model of the README's tiny commands (`--encoder=tiny --initializer_range=0.2 ...`).
MODEL_FLAGS = dict(initializer_range=0.2, projection_size=16, span_hidden_size=16,
                   query_length=16, block_length=32, reader_length=48, init_weights="random")
# Tiny towers start from random weights, asked for (`presets.note_random_start`).
INIT = presets.InitConfig(bert_weights=MODEL_FLAGS["init_weights"])


def model_config() -> presets.ModelConfig:
  """The `presets.ModelConfig` of `MODEL_FLAGS` over `VOCAB`: tiny 2-layer towers
  whose wider initialiser (0.2, not BERT's 0.02) lets the untrained doc tower tell the blocks
  apart, as a pre-trained one would."""
  encoder = presets.encoder_config("tiny", len(VOCAB),
                                   initializer_range=MODEL_FLAGS["initializer_range"])
  return presets.ModelConfig(encoder=encoder, **{
      k: v for k, v in MODEL_FLAGS.items() if k not in ("initializer_range", "init_weights")})


def write_untrained_model(world: OpenQAFiles, model_dir: str) -> str:
  """The untrained `model_config()` model written as a QA model directory (0 fine-tuning
  steps: the directory and its best/), for the tests of what loads and answers."""
  experiment = ExperimentConfig(
      task=OpenQATaskConfig(corpus=world.corpus, train_data=world.train,
                            vocab_file=world.vocab_file, model=model_config(), init=INIT,
                            retriever_top_k=16, index_kind="brute_force",
                            embedding_dtype="float32"),
      trainer=TrainerConfig(model_dir=model_dir, num_steps=0, batch_size=4),
      runtime=RuntimeConfig(compute_dtype="float32"))
  FineTuner(experiment, log=lambda message: None).run()
  return model_dir


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description="Writes the Open-QA files of the toy world.")
  parser.add_argument("--output_dir", required=True)
  files = write_open_qa(parser.parse_args(argv).output_dir)
  print(json.dumps(dataclasses.asdict(files), indent=2))


if __name__ == "__main__":
  main()
