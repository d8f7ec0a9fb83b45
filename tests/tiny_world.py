"""A tiny deterministic knowledge world written in the pipeline formats, for trainer tests.

Entity i has a city and a job; its block says so; each pre-training example restates one fact
of one entity with the fact's value as the salient span, so predicting it needs the block.
"""
import os

import numpy as np
import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data.block_store import BlockStore
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

NAMES = ["ada", "bob", "cid", "dan", "eve", "fay", "gus", "hal", "ivy", "jon", "kim", "lou",
         "max", "ned", "oli", "pam"]
CITIES = ["paris", "rome", "oslo", "lima", "kyiv", "baku", "doha", "riga"]
JOBS = ["baker", "pilot", "nurse", "judge", "miner", "tailor", "coach", "chef"]
VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", ".", "lives", "in", "works", "as", "a",
          "the", "city", "of", "is"] + NAMES + CITIES + JOBS)


def tokenizer() -> WordpieceTokenizer:
  return WordpieceTokenizer(VOCAB)


def write_world(directory: str, num_entities: int = 16, seed: int = 0):
  """Writes blocks-00000-of-00001.tfrecord and examples-00000-of-00001.tfrecord; returns
  (BlockStore, tokenizer)."""
  tok = tokenizer()
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
  return BlockStore.load(directory), tok


def write_world_and_vocab(directory) -> tuple:
  """`write_world` into `directory` (a pathlib.Path) plus its vocab.txt, for the binaries'
  `--vocab_file`; returns (directory, vocab path)."""
  write_world(str(directory))
  vocab = directory / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  return directory, vocab
