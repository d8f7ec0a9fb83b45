"""The toy world of the tests, the README's Open-QA commands and two benchmarks.

One module writes every format a test needs, from two small tables of facts:

- People (`write_people`): person i lives in a city and works as a job; its block says so, and
  each pre-training example restates one fact of one person with the fact's value as the
  salient span (one wordpiece), so predicting it needs the block. Written in the pipeline
  formats (`blocks-*.tfrecord`, `examples-*.tfrecord`, `PEOPLE_VOCAB`) for the trainer,
  refresh, recall and pre-training tests.
- Open-QA facts (`write_qa_world`): 24 fact blocks (12 that answer the questions, 12
  distractors), train/dev questions, CuratedTrec-style regex questions, the same corpus with
  updated facts (new block ids) and a vocabulary, in JSONL, for the fine-tune -> evaluate ->
  export -> ask chain with `EncoderConfig.tiny()` towers (`model_config`):

    python -m realm_tf.tiny_world --output_dir=/tmp/realm_qa

  writes `vocab.txt` (every word of the facts plus the BERT specials), `corpus.jsonl`,
  `train.jsonl` / `dev.jsonl` (ORQA JSONL, NaturalQuestions-style string answers),
  `curated.jsonl` (regex answers) and `new_corpus.jsonl`, for swapping knowledge without
  retraining (REALM Appendix C).

The two tables keep their own vocabularies: the learning margins the trainer tests assert
were measured with tiny towers over exactly these words.
"""
import argparse
import dataclasses
import json
import os
import re
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import presets
from realm_tf.data import formats
from realm_tf.experiment_config import ExperimentConfig
from realm_tf.experiment_config import OpenQATaskConfig
from realm_tf.experiment_config import RuntimeConfig
from realm_tf.experiment_config import TrainerConfig
from realm_tf.qa.finetune_lib import FineTuner
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# People ---------------------------------------------------------------------------------------

NAMES = ["ada", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lou",
         "max", "ned", "oli", "pam"]
CITIES = ["paris", "rome", "oslo", "lima", "kyiv", "baku", "doha", "riga"]
JOBS = ["baker", "pilot", "nurse", "judge", "miner", "tailor", "coach", "chef"]
PEOPLE_VOCAB = (list(SPECIAL_TOKENS) + [".", "lives", "in", "works", "as", "a", "the", "city",
                                        "of", "is"] + NAMES + CITIES + JOBS)


def people_tokenizer() -> WordpieceTokenizer:
  return WordpieceTokenizer(PEOPLE_VOCAB)


def write_people(directory: str, num_entities: int = 16,
                 seed: int = 0) -> Tuple[Corpus, WordpieceTokenizer]:
  """Writes blocks-00000-of-00001.tfrecord and examples-00000-of-00001.tfrecord (block ids
  1000, 1001, ...; cities and jobs drawn with `seed`); returns (Corpus, tokenizer)."""
  tok = people_tokenizer()
  rng = np.random.default_rng(seed)
  ids = lambda text: tok(tf.constant([text])).to_list()[0]
  os.makedirs(directory, exist_ok=True)
  blocks, examples = [], []
  for i in range(num_entities):
    name, city, job = NAMES[i], CITIES[rng.integers(len(CITIES))], JOBS[rng.integers(len(JOBS))]
    text = f"{name.title()} lives in {city.title()}. {name.title()} works as a {job}."
    block_id = 1000 + i
    blocks.append((block_id, name, text, ids(name), ids(text)))
    for sentence, value in ((f"{name} lives in the city of {city} .", city),
                            (f"the {job} is {name} .", job)):
      query = ids(sentence)
      position = query.index(ids(value)[0])
      examples.append((query, position, position, block_id, value, "FACT"))
  with tf.io.TFRecordWriter(os.path.join(directory, "blocks-00000-of-00001.tfrecord")) as w:
    for block in blocks:
      w.write(formats.block_example(*block))
  with tf.io.TFRecordWriter(os.path.join(directory, "examples-00000-of-00001.tfrecord")) as w:
    for example in examples:
      w.write(formats.pretraining_example(*example))
  return Corpus.load(directory), tok


def write_people_and_vocab(directory) -> tuple:
  """`write_people` into `directory` (a pathlib.Path) plus its vocab.txt, for the binaries'
  `--vocab_file`; returns (directory, vocab path)."""
  write_people(str(directory))
  vocab = directory / "vocab.txt"
  vocab.write_text("\n".join(PEOPLE_VOCAB) + "\n")
  return directory, vocab


# Open-QA facts --------------------------------------------------------------------------------

# (title, text): 12 blocks that answer the questions and 12 distractors.
BLOCKS: Tuple[Tuple[str, str], ...] = (
    ("Hamlet", "Hamlet is a tragedy written by William Shakespeare."),
    ("Paris", "Paris is the capital of France."),
    ("Mona Lisa", "The Mona Lisa was painted by Leonardo da Vinci."),
    ("Apollo 11", "Neil Armstrong walked on the Moon in 1969."),
    ("Water", "Water boils at 100 degrees Celsius."),
    ("Mount Everest", "Mount Everest is the highest mountain on Earth."),
    ("Jupiter", "Jupiter is the largest planet in the Solar System."),
    ("Tokyo", "Tokyo is the capital of Japan."),
    ("Gravity", "Isaac Newton described the law of gravity."),
    ("Penicillin", "Alexander Fleming discovered penicillin in 1928."),
    ("Nile", "The Nile is the longest river in Africa."),
    ("Telephone", "Alexander Graham Bell invented the telephone."),
    ("London", "London is the capital of England."),
    ("Rome", "Rome is the capital of Italy."),
    ("Amazon", "The Amazon is the longest river in South America."),
    ("Oliver Twist", "Oliver Twist is a novel written by Charles Dickens."),
    ("The Starry Night", "The Starry Night was painted by Vincent van Gogh."),
    ("Mars", "Mars is the fourth planet from the Sun."),
    ("Berlin", "Berlin is the capital of Germany."),
    ("Light bulb", "Thomas Edison invented the light bulb."),
    ("Relativity", "Albert Einstein described the theory of relativity."),
    ("Pacific Ocean", "The Pacific is the largest ocean on Earth."),
    ("Radium", "Marie Curie discovered radium in 1898."),
    ("K2", "K2 is the second highest mountain on Earth."),
)

QUESTIONS: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("who wrote hamlet?", ("William Shakespeare", "Shakespeare")),
    ("what is the capital of france?", ("Paris",)),
    ("who painted the mona lisa?", ("Leonardo da Vinci",)),
    ("who walked on the moon in 1969?", ("Neil Armstrong",)),
    ("at what temperature does water boil?", ("100 degrees Celsius",)),
    ("what is the highest mountain on earth?", ("Mount Everest",)),
    ("what is the largest planet in the solar system?", ("Jupiter",)),
    ("what is the capital of japan?", ("Tokyo",)),
    ("who described the law of gravity?", ("Isaac Newton",)),
    ("who discovered penicillin?", ("Alexander Fleming",)),
    ("what is the longest river in africa?", ("the Nile",)),
    ("who invented the telephone?", ("Alexander Graham Bell",)),
)

# CuratedTrec-style regex answers (matched at the start of the prediction).
CURATED: Tuple[Tuple[str, Tuple[str, ...]], ...] = (
    ("when did neil armstrong walk on the moon?", (r"19[0-9]{2}",)),
    ("who discovered penicillin?", (r"(alexander )?fleming",)),
    ("what is the capital of japan?", (r"tokyo|edo",)),
)

# Updated facts for the swapped corpus.
NEW_FACTS = {
    "Hamlet": "Hamlet is a tragedy written by Christopher Marlowe.",
    "Tokyo": "Tokyo is the capital of Japan and Kyoto was the old capital.",
}


@dataclasses.dataclass(frozen=True)
class QAWorld:
  """Paths of a written Open-QA world."""
  directory: str
  vocab_file: str
  corpus: str
  new_corpus: str
  train: str
  dev: str
  curated: str


def _words(text: str) -> List[str]:
  return re.findall(r"[a-z0-9]+|[^\sa-z0-9]", text.lower())


def qa_vocabulary() -> List[str]:
  """The specials, then every lower-cased word and punctuation mark of the Open-QA facts,
  sorted."""
  texts = [t for block in BLOCKS for t in block] + list(NEW_FACTS.values())
  texts += [q for q, _ in QUESTIONS + CURATED]
  texts += [a for _, answers in QUESTIONS for a in answers]
  return list(SPECIAL_TOKENS) + sorted({w for text in texts for w in _words(text)})


def corpus_records(new_facts: bool = False) -> List[Dict]:
  """The corpus blocks (ids 1000, 1007, ...), or the updated corpus (ids 2000, 2007, ...)."""
  records = []
  for i, (title, text) in enumerate(BLOCKS):
    text = NEW_FACTS.get(title, text) if new_facts else text
    records.append({"id": (2000 if new_facts else 1000) + 7 * i, "title": title, "text": text})
  return records


def _write_jsonl(path: str, records: Sequence[Dict]) -> None:
  with open(path, "w", encoding="utf-8") as f:
    for record in records:
      f.write(json.dumps(record) + "\n")


def write_qa_world(directory: str) -> QAWorld:
  """Writes the Open-QA files into `directory` (created if absent)."""
  os.makedirs(directory, exist_ok=True)
  world = QAWorld(directory, *(os.path.join(directory, name) for name in (
      "vocab.txt", "corpus.jsonl", "new_corpus.jsonl", "train.jsonl", "dev.jsonl",
      "curated.jsonl")))
  with open(world.vocab_file, "w", encoding="utf-8") as f:
    f.write("\n".join(qa_vocabulary()) + "\n")
  _write_jsonl(world.corpus, corpus_records())
  _write_jsonl(world.new_corpus, corpus_records(new_facts=True))
  questions = [{"question": q, "answer": list(a)} for q, a in QUESTIONS]
  _write_jsonl(world.train, questions)
  _write_jsonl(world.dev, questions)
  _write_jsonl(world.curated, [{"question": q, "answer": list(a)} for q, a in CURATED])
  return world


# The model of the README's tiny commands (`--encoder=tiny --initializer_range=0.2 ...`).
MODEL_FLAGS = dict(initializer_range=0.2, projection_size=16, span_hidden_size=16,
                   query_length=16, block_length=32, reader_length=48)


def model_config() -> presets.ModelConfig:
  """The `presets.ModelConfig` of `MODEL_FLAGS` over `qa_vocabulary()`: tiny 2-layer towers
  whose wider initialiser (0.2, not BERT's 0.02) lets the untrained doc tower tell the blocks
  apart, as a pre-trained one would."""
  encoder = presets.encoder_config("tiny", len(qa_vocabulary()),
                                   initializer_range=MODEL_FLAGS["initializer_range"])
  return presets.ModelConfig(encoder=encoder, **{
      k: v for k, v in MODEL_FLAGS.items() if k != "initializer_range"})


def write_untrained_model(world: QAWorld, model_dir: str) -> str:
  """The untrained `model_config()` model written as a QA model directory (0 fine-tuning
  steps: the directory and its best/), for the tests of what loads and answers."""
  experiment = ExperimentConfig(
      task=OpenQATaskConfig(corpus=world.corpus, train_data=world.train,
                            vocab_file=world.vocab_file, model=model_config(),
                            retriever_top_k=24, index_kind="brute_force",
                            embedding_dtype="float32"),
      trainer=TrainerConfig(model_dir=model_dir, num_steps=0, batch_size=4),
      runtime=RuntimeConfig(compute_dtype="float32"))
  FineTuner(experiment, log=lambda message: None).run()
  return model_dir


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description="Writes the Open-QA files of the toy world.")
  parser.add_argument("--output_dir", required=True)
  world = write_qa_world(parser.parse_args(argv).output_dir)
  print(json.dumps(dataclasses.asdict(world), indent=2))


if __name__ == "__main__":
  main()
