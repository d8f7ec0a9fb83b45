"""Writes a knowledge world in the formats the trainers and the QA system read unchanged.

    <directory>/vocab.txt                           the world's whole-word vocabulary
    <directory>/blocks-00000-of-00001.tfrecord      Z as blocks (`realm_tf.data.formats`)
    <directory>/examples-00000-of-00001.tfrecord    X as salient-span pre-training examples
    <directory>/{blocks,examples}.manifest.json     their counts and checksums (`data.shards`)
    <directory>/{train,dev,test}.jsonl              ORQA JSONL questions {"question", "answer"}
    <directory>/world.json                          the config, the people and their facts

The directory is at once a corpus (`realm_tf.retrieval.corpus.Corpus.load`),
an examples directory (`masked_query_dataset`) and a QA data directory. Block ids are the
corpus pipeline's content hash (sha256 of "title\\ntext", 63 bits); an X example's `block_id`
is the block of the Z document stating its fact, the block REALM excludes from its retrieval.
"""
import dataclasses
import hashlib
import json
import os
from typing import List, Optional

import tensorflow as tf

from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.knowledge_world.world import World
from realm_tf.knowledge_world.world import WorldConfig
from realm_tf.knowledge_world.world import generate_world
from realm_tf.knowledge_world.world import vocabulary
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
BLOCKS_FILE = "blocks-00000-of-00001.tfrecord"
EXAMPLES_FILE = "examples-00000-of-00001.tfrecord"
_ID_MASK = (1 << 63) - 1


def block_id(title: str, text: str) -> int:
  """The corpus pipeline's 63-bit content hash of a block."""
  digest = hashlib.sha256(f"{title}\n{text}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") & _ID_MASK


@dataclasses.dataclass(frozen=True)
class WorldFiles:
  """Paths of a written world; `directory` is the corpus and examples directory."""
  directory: str
  vocab_file: str
  train: str
  dev: str
  test: str
  world_json: str
  num_blocks: int
  num_examples: int
  max_block_wordpieces: int  # longest `[CLS] title [SEP] body [SEP]`
  max_sentence_wordpieces: int  # longest X sentence without specials
  max_question_wordpieces: int

  def tokenizer(self) -> WordpieceTokenizer:
    return WordpieceTokenizer.from_vocab_file(self.vocab_file)

  def store(self) -> Corpus:
    return Corpus.load(self.directory)


def _ids(tokenizer: WordpieceTokenizer, texts: List[str]) -> List[List[int]]:
  return tokenizer(tf.constant(texts, tf.string)).to_list() if texts else []


def _write_jsonl(path: str, records) -> None:
  with tf.io.gfile.GFile(path, "w") as f:
    for record in records:
      f.write(json.dumps(record, ensure_ascii=False) + "\n")


def write_world(directory: str, config: WorldConfig = WorldConfig(),
                world: Optional[World] = None) -> WorldFiles:
  """Generates the world of `config` (or writes `world`) into `directory`.

  Raises:
    ValueError: a word outside the vocabulary, or an X span that is not a whole-wordpiece
      span of its sentence (both would be generator bugs).
  """
  world = world or generate_world(config)
  tf.io.gfile.makedirs(directory)
  vocab = vocabulary(world, SPECIAL_TOKENS)
  vocab_file = os.path.join(directory, "vocab.txt")
  with tf.io.gfile.GFile(vocab_file, "w") as f:
    f.write("\n".join(vocab) + "\n")
  tokenizer = WordpieceTokenizer(vocab)

  docs = world.documents
  titles = _ids(tokenizer, [d.title for d in docs])
  bodies = _ids(tokenizer, [d.text for d in docs])
  ids = [block_id(d.title, d.text) for d in docs]
  if len(set(ids)) != len(ids):
    raise ValueError("two Z documents have the same title and text")
  with tf.io.TFRecordWriter(os.path.join(directory, BLOCKS_FILE)) as writer:
    for order in sorted(range(len(docs)), key=lambda i: ids[i]):
      writer.write(formats.block_example(ids[order], docs[order].title, docs[order].text,
                                         titles[order], bodies[order]))

  sentences = world.sentences
  before = _ids(tokenizer, [s.text[:s.span_start] for s in sentences])
  value = _ids(tokenizer, [s.span_text for s in sentences])
  after = _ids(tokenizer, [s.text[s.span_end:] for s in sentences])
  whole = _ids(tokenizer, [s.text for s in sentences])
  with tf.io.TFRecordWriter(os.path.join(directory, EXAMPLES_FILE)) as writer:
    for s, b, v, a, w in zip(sentences, before, value, after, whole):
      if b + v + a != w or not v:
        raise ValueError(f"salient span {s.span_text!r} is not a wordpiece span of {s.text!r}")
      writer.write(formats.pretraining_example(w, len(b), len(b) + len(v) - 1,
                                               ids[s.document], s.span_text, s.label))
  for rows in (titles, bodies, whole):
    if any(tokenizer.unk_id in row for row in rows):
      raise ValueError("a world text has a word outside its vocabulary")
  for prefix in ("blocks", "examples"):
    shards.write_manifest(directory, prefix, dataclasses.asdict(world.config),
                          producer="realm_tf.knowledge_world")

  paths = {}
  for split, questions in world.questions.items():
    paths[split] = os.path.join(directory, f"{split}.jsonl")
    _write_jsonl(paths[split], ({"question": q.question, "answer": list(q.answers)}
                                for q in questions))
  question_ids = _ids(tokenizer, [q.question for qs in world.questions.values() for q in qs])
  world_json = os.path.join(directory, "world.json")
  with tf.io.gfile.GFile(world_json, "w") as f:
    json.dump({"config": dataclasses.asdict(world.config),
               "entities": [{"name": e.name, **e.facts} for e in world.entities],
               "documents": [{"block_id": ids[i], "entity": d.entity, "title": d.title,
                              "facts": list(d.facts)} for i, d in enumerate(docs)]},
              f, indent=1, ensure_ascii=False)
  return WorldFiles(
      directory=directory, vocab_file=vocab_file, train=paths["train"], dev=paths["dev"],
      test=paths["test"], world_json=world_json, num_blocks=len(docs),
      num_examples=len(sentences),
      max_block_wordpieces=max(len(t) + len(b) for t, b in zip(titles, bodies)) + 3,
      max_sentence_wordpieces=max(len(w) for w in whole),
      max_question_wordpieces=max(len(q) for q in question_ids))
