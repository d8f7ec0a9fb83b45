"""The document-embedder export: Embed_doc(z), what the index builder runs over every block.

N blocks, L length, D embedding dim:
  "serving_default": input_word_ids, input_mask, input_type_ids int32 [N, L]
                     -> {"embeddings": float32 [N, D]}
  "embed_blocks":    title_ids, body_ids int64 ragged as (values, row_lengths) -> the same
  "embed_texts":     titles, texts string [N] -> the same (exported with a tokenizer only;
                     loading it then needs `import tensorflow_text`)
"embed_blocks" packs blocks itself, in the retriever's `doc_input` form (`[CLS] title [SEP]
body [SEP]`, or `[CLS] body [SEP]` ignoring the titles), and pads a batch only to its longest
block, rounded up to `length_multiple`: XLA (`jit_compile`) compiles once per shape, so the
shapes stay few. `export_attributes` reads the scalars (`snapshot_step`, `doc_input`, ...)
back and `DocEmbedder` runs an export. docs/exports.md has the details.
"""
import dataclasses
import os
import tempfile
from typing import Callable, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import graph_functions
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.data.block_length import BLOCK_LENGTH
from realm_tf.models.precision import with_compute_dtype
from realm_tf.models.retriever import Retriever
from realm_tf.models.retriever import tower_embedding
from realm_tf.signatures.reusable import ReusableModule
from realm_tf.signatures.reusable import tower_outputs
from realm_tf.tokenization import doc_input as doc_inputs
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_ID_SPECS = {n: tf.TensorSpec([None, None], tf.int32, name=n)
             for n in ("input_word_ids", "input_mask", "input_type_ids")}
_TEXT_SPECS = {n: tf.TensorSpec([None], tf.string, name=n) for n in ("titles", "texts")}


class Untracked:
  """Holds objects a SavedModel module uses but must not serialize itself: Keras layers
  saved inside a `tf.Module` would be traced and written again as Keras objects. The module
  tracks their variables instead; its tf.functions capture them."""

  def __init__(self, **objects):
    self.__dict__.update(objects)


def vocab_asset(tokenizer: WordpieceTokenizer, directory: str) -> tf.saved_model.Asset:
  """The tokenizer's vocabulary as a SavedModel asset (`assets/vocab.txt`), staged in
  `directory` until the SavedModel is written."""
  path = os.path.join(directory, "vocab.txt")
  with open(path, "w", encoding="utf-8") as f:
    f.write("\n".join(tokenizer.vocabulary) + "\n")
  return tf.saved_model.Asset(path)


def _encoder_forward(encoder, projection, pooling: str):
  """The doc tower as a plain function of int32 [N, L] features -> float32 [N, D] (a closure,
  so that it can be wrapped as its own, optionally XLA-compiled, tf.function)."""

  def forward(input_word_ids, input_mask, input_type_ids):
    features = dict(input_word_ids=input_word_ids, input_mask=input_mask,
                    input_type_ids=input_type_ids)
    return tower_embedding(encoder, projection, features, pooling, training=False)

  return forward


class _DocEmbedderModule(ReusableModule):

  def __init__(self, retriever: Retriever, cls_id: int, sep_id: int, pad_id: int,
               block_length: int, snapshot_step: int,
               tokenizer: Optional[WordpieceTokenizer] = None, staging_dir: str = "",
               length_multiple: int = 32, jit_compile: bool = False):
    super().__init__(retriever.doc_encoder.variables + retriever.doc_projection.variables)
    self.tokenizer = tokenizer
    if tokenizer is not None:
      self.vocab_file = vocab_asset(tokenizer, staging_dir)
      self.do_lower_case = tf.Variable(tokenizer.lower_case, trainable=False)
    self.encoder = retriever.doc_encoder
    self.projection = retriever.doc_projection
    scalar = lambda value: tf.Variable(value, trainable=False, dtype=tf.int64)
    self.embedding_dim = scalar(retriever.projection_size)
    self.block_length = scalar(block_length)
    self.cls_id, self.sep_id, self.pad_id = scalar(cls_id), scalar(sep_id), scalar(pad_id)
    self.snapshot_step = scalar(snapshot_step)
    self.length_multiple = scalar(length_multiple)
    self.jit_compile = tf.Variable(jit_compile, trainable=False)
    self.doc_input = tf.Variable(retriever.doc_input, trainable=False)
    self._doc_input = retriever.doc_input
    self._pooling = retriever.pooling
    self._forward = graph_functions.function(
        _encoder_forward(self.encoder, self.projection, retriever.pooling),
        jit_compile=jit_compile)
    self._packer = BertPacker(seq_length=block_length, cls_id=cls_id, sep_id=sep_id,
                              pad_id=pad_id, truncation="waterfall")

  @graph_functions.function(input_signature=[
      tf.TensorSpec([None, None], tf.int32, name=n)
      for n in ("input_word_ids", "input_mask", "input_type_ids")])
  def serve(self, input_word_ids, input_mask, input_type_ids):
    return {"embeddings": self._forward(input_word_ids, input_mask, input_type_ids)}

  @graph_functions.function(input_signature=[
      tf.TensorSpec([None], tf.int64, name=n)
      for n in ("title_values", "title_row_lengths", "body_values", "body_row_lengths")])
  def embed_blocks(self, title_values, title_row_lengths, body_values, body_row_lengths):
    titles = tf.RaggedTensor.from_row_lengths(title_values, title_row_lengths)
    bodies = tf.RaggedTensor.from_row_lengths(body_values, body_row_lengths)
    features = self._packer(tuple(tf.cast(s, tf.int32) for s in doc_inputs.segments(
        titles, bodies, self._doc_input)))
    longest = tf.reduce_max(tf.reduce_sum(features["input_mask"], axis=1))
    multiple = tf.cast(self.length_multiple, longest.dtype)
    length = tf.minimum(-(-longest // multiple) * multiple, tf.shape(features["input_mask"])[1])
    features = {name: t[:, :length] for name, t in features.items()}
    return self.serve(**features)

  def _embed_texts(self, titles, texts):
    titles = self.tokenizer(titles)
    bodies = self.tokenizer(texts)
    return self.embed_blocks(tf.cast(titles.values, tf.int64), titles.row_lengths(),
                             tf.cast(bodies.values, tf.int64), bodies.row_lengths())

  @graph_functions.function
  def __call__(self, inputs, training=False):
    if "titles" in inputs:
      if not training:  # the index's path: padded to the length multiple, XLA if exported so
        return self._embed_texts(inputs["titles"], inputs["texts"])["embeddings"]
      features = self._packer(doc_inputs.segments(
          self.tokenizer(inputs["titles"]), self.tokenizer(inputs["texts"]), self._doc_input))
      return self._outputs(features, training)["embeddings"]
    return self._outputs(inputs, training)

  def _outputs(self, features, training):
    return tower_outputs(self.encoder, self.projection, {n: features[n] for n in _ID_SPECS},
                         self._pooling, training)


class DocEmbedderExporter:
  """Writes `retriever`'s doc tower as a doc-embedder SavedModel, again at each `export`: the
  index refreshers' snapshots. The module and its traced functions are built once and read the
  retriever's variables, so a later export writes the current weights without tracing again
  (half an export's cost). Arguments as `export_doc_embedder`'s."""

  def __init__(self, retriever: Retriever, cls_id: int, sep_id: int, pad_id: int,
               block_length: int = BLOCK_LENGTH, tokenizer: Optional[WordpieceTokenizer] = None,
               compute_dtype: str = "float32", length_multiple: int = 32,
               jit_compile: bool = False):
    self.retriever = retriever
    self._model = with_compute_dtype(retriever, compute_dtype)  # a copy in another dtype
    self._staging = tempfile.TemporaryDirectory()  # the vocabulary asset, until saved
    self._module = _DocEmbedderModule(self._model, cls_id, sep_id, pad_id, block_length, -1,
                                      tokenizer, self._staging.name, length_multiple,
                                      jit_compile)
    self._signatures = {"serving_default": self._module.serve.get_concrete_function,
                        "embed_blocks": self._module.embed_blocks.get_concrete_function}
    self._input_specs = [dict(_ID_SPECS)]
    if tokenizer is not None:
      self._module.embed_texts = graph_functions.function(
          self._module._embed_texts,  # pylint: disable=protected-access
          input_signature=[_TEXT_SPECS["titles"], _TEXT_SPECS["texts"]])
      self._signatures["embed_texts"] = self._module.embed_texts.get_concrete_function
      self._input_specs.append(dict(_TEXT_SPECS))

  def export(self, path: str, snapshot_step: int = -1) -> str:
    """Writes the doc tower's current weights at `path`, recording `snapshot_step`."""
    if self._model is not self.retriever:  # the copy does not follow training
      self._model.set_weights(self.retriever.get_weights())
    self._module.snapshot_step.assign(snapshot_step)
    self._module.save(path, self._input_specs, self._signatures)
    return path

  def close(self) -> None:
    """Removes the staged vocabulary (each export holds its own copy)."""
    self._staging.cleanup()


def export_doc_embedder(retriever: Retriever, path: str, cls_id: int, sep_id: int, pad_id: int,
                        block_length: int = BLOCK_LENGTH, snapshot_step: int = -1,
                        tokenizer: Optional[WordpieceTokenizer] = None,
                        compute_dtype: str = "float32", length_multiple: int = 32,
                        jit_compile: bool = False) -> str:
  """Writes the doc tower of `retriever` as a SavedModel at `path`; returns `path`. It packs
  blocks in `retriever.doc_input`'s form and records it (`ExportAttributes.doc_input`).

  With a `tokenizer` the export also takes strings: the "embed_texts" signature and the
  `{"titles", "texts"}` form of `__call__` (docs/exports.md). With
  `compute_dtype="bfloat16"` the export computes in bfloat16 (`models.precision`; weights and
  outputs stay float32). `embed_blocks` pads each batch to a multiple of `length_multiple`;
  `jit_compile=True` XLA-compiles the encoder forward (BENCHMARKS.md §1: 1.3-1.55× per batch
  on CPU), one compilation per input shape.
  """
  exporter = DocEmbedderExporter(retriever, cls_id, sep_id, pad_id, block_length, tokenizer,
                                 compute_dtype, length_multiple, jit_compile)
  try:
    return exporter.export(path, snapshot_step)
  finally:
    exporter.close()


@dataclasses.dataclass(frozen=True)
class ExportAttributes:
  """The scalar attributes of a doc-embedder export (docs/exports.md)."""
  embedding_dim: int
  block_length: int
  snapshot_step: int
  length_multiple: int
  jit_compile: bool
  cls_id: int
  sep_id: int
  pad_id: int
  doc_input: str = doc_inputs.DEFAULT_DOC_INPUT


def _export_values(path: str) -> Callable[..., np.ndarray]:
  """(name, absent=None) -> the export's variable `name`, read from its checkpoint without
  loading the model (one line naming the checkpoint if it is truncated or damaged); `absent`
  for an export written before the variable was (None: it must be there)."""
  variables = os.path.join(path, "variables", "variables")
  reader = tf.train.load_checkpoint(variables)
  get = tf2_checkpoint.tensor_getter(reader, variables)

  def value(name: str, absent=None):
    key = f"{name}/.ATTRIBUTES/VARIABLE_VALUE"
    return absent if absent is not None and not reader.has_tensor(key) else get(key)

  return value


def export_attributes(path: str) -> ExportAttributes:
  """Reads the export's scalar attributes from its variables alone, without loading the model
  (cheap: for the index builder's launching process, which never embeds)."""
  value = _export_values(path)
  return ExportAttributes(
      embedding_dim=int(value("embedding_dim")), block_length=int(value("block_length")),
      snapshot_step=int(value("snapshot_step")), length_multiple=int(value("length_multiple")),
      jit_compile=bool(value("jit_compile")), cls_id=int(value("cls_id")),
      sep_id=int(value("sep_id")), pad_id=int(value("pad_id")),
      doc_input=doc_inputs.check(value("doc_input", doc_inputs.DEFAULT_DOC_INPUT.encode()
                                       ).decode("utf-8")))


def export_tokenizer(path: str) -> Optional[WordpieceTokenizer]:
  """The tokenizer an export was written with (its vocabulary asset and lower-casing), None
  for an export without one; read from its files alone, without loading the model."""
  vocab = os.path.join(path, "assets", "vocab.txt")
  if not tf.io.gfile.exists(vocab):
    return None
  lower_case = bool(_export_values(path)("do_lower_case"))
  return WordpieceTokenizer.from_vocab_file(vocab, lower_case=lower_case)


class DocEmbedder:
  """A loaded doc-embedder export: `embed_blocks(title_ids, body_ids)` -> [N, D] numpy, and
  `embed_texts(titles, texts)` for exports written with a tokenizer."""

  def __init__(self, path: str):
    self.path = path
    self._module = tf.saved_model.load(path)
    attributes = export_attributes(path)
    self.embedding_dim, self.block_length = attributes.embedding_dim, attributes.block_length
    self.snapshot_step = attributes.snapshot_step
    self.length_multiple, self.jit_compile = attributes.length_multiple, attributes.jit_compile
    self.cls_id, self.sep_id, self.pad_id = attributes.cls_id, attributes.sep_id, attributes.pad_id
    self.doc_input = attributes.doc_input

  @property
  def takes_text(self) -> bool:
    """Whether the export has the "embed_texts" signature."""
    return "embed_texts" in self._module.signatures

  def tokenizer(self) -> WordpieceTokenizer:
    """The export's own tokenizer (its `vocab_file` asset and `do_lower_case`).

    Raises:
      ValueError: the export has no tokenizer.
    """
    if not self.takes_text:
      raise ValueError(f"doc embedder {self.path} was exported without a tokenizer")
    return WordpieceTokenizer.from_vocab_file(
        self._module.vocab_file.asset_path.numpy().decode("utf-8"),
        lower_case=bool(self._module.do_lower_case.numpy()))

  def embed_texts(self, titles: Sequence[str], texts: Sequence[str],
                  batch_size: int = 64) -> np.ndarray:
    """N titles and texts -> float32 [N, D] numpy, `batch_size` blocks at a time.

    Raises:
      ValueError: the export has no tokenizer (no "embed_texts" signature).
    """
    if not self.takes_text:
      raise ValueError(f"doc embedder {self.path} was exported without a tokenizer; "
                       "it only embeds wordpiece ids (embed_blocks)")
    if len(titles) != len(texts):
      raise ValueError(f"{len(titles)} titles for {len(texts)} texts")
    signature = self._module.signatures["embed_texts"]
    chunks = [np.zeros([0, self.embedding_dim], np.float32)]
    for begin in range(0, len(texts), batch_size):
      chunks.append(signature(
          titles=tf.constant(list(titles[begin:begin + batch_size]), tf.string),
          texts=tf.constant(list(texts[begin:begin + batch_size]), tf.string)
      )["embeddings"].numpy())
    return np.concatenate(chunks, axis=0)

  def embed_blocks(self, title_ids: tf.RaggedTensor, body_ids: tf.RaggedTensor):
    """[N, (T)] title and body wordpieces (no specials) -> float32 [N, D] numpy (an export
    of `doc_input` "body" ignores the titles)."""
    out = self._module.embed_blocks(
        tf.cast(title_ids.values, tf.int64), tf.cast(title_ids.row_lengths(), tf.int64),
        tf.cast(body_ids.values, tf.int64), tf.cast(body_ids.row_lengths(), tf.int64))
    return out["embeddings"].numpy()

  def embed_features(self, features):
    """[N, L] packed features -> float32 [N, D] numpy."""
    return self._module.serve(**{n: tf.cast(features[n], tf.int32) for n in
                                 ("input_word_ids", "input_mask", "input_type_ids")}
                              )["embeddings"].numpy()
