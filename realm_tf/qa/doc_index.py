"""The frozen document index of a QA system: block embeddings [N, D] and a MIPS index.

A `DocIndex` directory is an index version of `mips.index_publisher` (what pre-training and the
index builder publish): the MIPS index files, `manifest.json` (its metadata holds
"corpus_fingerprint", "snapshot_step", "embedding_dtype", "doc_input" if "body") and
`block_embeddings.npy` [N, D] (`retrieval.embedding_file`: float32, bfloat16 or float16,
memory-mapped; row r = corpus row r), read by fine-tuning's retriever logits; without it, the
index's float32 copy. The older layout (info.json, embeddings.npy, index/) is an error.

Embeddings come from a doc tower (`retrieval.embedding.embed_blocks`, straight into the file).
Embeddings from elsewhere (another `DocIndex`, the pipeline's `embeddings-*.tfrecord`, the
released `block_emb`, a `.npy`) are first checked against the embedder (`qa.embedding_check`:
the dimension, and a sample of blocks re-embedded and compared), so that a corpus embedded by
another model is an `EmbeddingMismatchError`, never silently wrong retrieval.
"""
import dataclasses
import os
import tempfile
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import released_embeddings
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.mips import index_publisher
from realm_tf.mips.index_builder import build_index
from realm_tf.mips.index_builder import kind_of
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.index_builder import Sharding
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.qa.embedding_check import verify_embeddings
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval import embedding
from realm_tf.retrieval import embedding_file
from realm_tf.signatures.doc_embedder import DocEmbedder
from realm_tf.tokenization import doc_input as doc_inputs

_PIPELINE_BATCH = 4096


EmbeddingMismatchError = errors.EmbeddingMismatchError


def load_pipeline_embeddings(directory: str, corpus: Corpus, path: str,
                             storage_dtype: str = "float32") -> np.ndarray:
  """Writes the embedding pipeline's `embeddings-*.tfrecord` shards in corpus row order into a
  new embeddings file at `path` (`retrieval.embedding_file`), streaming; returns it mapped.

  Raises:
    FileNotFoundError: no shards in `directory`.
    ShardError: a missing, damaged or miscounted shard (`realm_tf.data.shards`).
    EmbeddingMismatchError: blocks of the corpus without an embedding, or unknown blocks.
  """
  files = shards.check_shards(directory, "embeddings").files  # verified, or a warning
  out, seen, count, unknown, unknown_count = None, np.zeros(len(corpus), bool), 0, [], 0
  for ids, vectors in _pipeline_records(files):
    if len({len(v) for v in vectors} | ({out.shape[1]} if out is not None else set())) != 1:
      raise EmbeddingMismatchError(f"{directory}: embeddings of different dimensions")
    if out is None:
      out = embedding_file.create(path, len(corpus), len(vectors[0]), storage_dtype)
    rows = np.minimum(np.searchsorted(corpus.block_ids, ids), len(corpus) - 1)
    known = np.asarray(corpus.block_ids[rows]) == ids
    unknown.extend(ids[~known][:max(0, 5 - len(unknown))].tolist())
    unknown_count, count = unknown_count + int(np.sum(~known)), count + len(ids)
    out[rows[known]] = np.stack(vectors)[known].astype(out.dtype)
    seen[rows[known]] = True
  missing = np.asarray(corpus.block_ids)[~seen]
  if out is None or unknown_count or missing.size or count != len(corpus):
    raise EmbeddingMismatchError(errors.describe(
        directory, f"does not embed corpus {corpus.source!r}: {missing.size} blocks without "
        f"an embedding (e.g. {missing[:5].tolist()}), {unknown_count} unknown blocks "
        f"(e.g. {unknown}), {count} records for {len(corpus)} blocks",
        "Pass the embeddings of this corpus (python -m pipelines.build_index "
        "--embeddings_dir=...), or leave --embeddings_dir out to embed it"))
  out.flush()
  return embedding_file.open_embeddings(path, storage_dtype)


def copy_released_embeddings(path: str, doc_embedder: DocEmbedder, corpus: Corpus, out_path: str,
                             embedding_dtype: str, storage_dtype: str) -> np.ndarray:
  """Checks released embeddings (`checkpoints.released_embeddings`) against `corpus` and the
  doc embedder, then copies them into a new embeddings file at `out_path`, a chunk of rows at
  a time; returns it mapped."""
  embeddings, source = released_embeddings.open_released_embeddings(path)
  verify_embeddings(doc_embedder, corpus, embeddings, f"embeddings in {source}",
                    (embedding_dtype, "float32"))
  embedding_file.copy_rows(embeddings, out_path, storage_dtype)
  return embedding_file.open_embeddings(out_path, storage_dtype)


def _pipeline_records(files: List[str]) -> Iterator[Tuple[np.ndarray, List[np.ndarray]]]:
  """(block ids int64 [C], C embeddings) of the shards' records, `_PIPELINE_BATCH` at a time."""
  ids, vectors = [], []
  for record in tf.data.TFRecordDataset(files).map(formats.parse_embedding):
    ids.append(int(record["block_id"]))
    vectors.append(record["embedding"].numpy())
    if len(ids) == _PIPELINE_BATCH:
      yield np.asarray(ids, np.int64), vectors
      ids, vectors = [], []
  if ids:
    yield np.asarray(ids, np.int64), vectors


@dataclasses.dataclass
class DocIndex:
  """Block embeddings [N, D] of a corpus and a MIPS index over them.

  Attributes:
    embeddings: [N, D] in `storage_dtype`, a read-only memmap of the embeddings file (float32
      in memory for an index version without one); `embedding_file.gather` reads rows as
      float32.
    index: the `MipsIndex` (row r = corpus row r).
    corpus_fingerprint: `Corpus.fingerprint` of the corpus embedded.
    snapshot_step: the training step of the doc tower that embedded it (0: pre-trained).
    kind: "scann" or "brute_force" (of each shard of a sharded index).
    embedding_dtype: the precision the embeddings were computed in ("float32" / "bfloat16").
    storage_dtype: the dtype they are stored in ("float32" / "bfloat16" / "float16").
    doc_input: the doc tower's block form they were embedded in (`tokenization.doc_input`).
    staging: the temporary directory holding the embeddings file of an index built here and
      not saved (it lives as long as the `DocIndex`).
  """
  embeddings: np.ndarray
  index: MipsIndex
  corpus_fingerprint: str
  snapshot_step: int = 0
  kind: str = "scann"
  embedding_dtype: str = "float32"
  storage_dtype: str = "float32"
  doc_input: str = doc_inputs.DEFAULT_DOC_INPUT
  staging: Optional[tempfile.TemporaryDirectory] = dataclasses.field(
      default=None, repr=False, compare=False)

  @property
  def num_blocks(self) -> int:
    return int(self.embeddings.shape[0])

  @property
  def dim(self) -> int:
    return int(self.embeddings.shape[1])

  @classmethod
  def build(cls, doc_embedder: DocEmbedder, corpus: Corpus, kind: str = "scann",
            snapshot_step: int = 0, batch_size: int = 64,
            progress: Optional[Callable[[int], None]] = None,
            scann: ScannSettings = ScannSettings(), sharding: Sharding = Sharding(),
            embedding_dtype: str = "float32", storage_dtype: str = "float32") -> "DocIndex":
    """Embeds `corpus` with `doc_embedder` (an export computing in `embedding_dtype`) over its
    wordpieces in the export's vocabulary into an embeddings file in `storage_dtype` (in a
    temporary directory until `save`), and indexes it (`index_builder.build_index`)."""
    staging = tempfile.TemporaryDirectory(prefix="realm_doc_index_")
    path = os.path.join(staging.name, embedding_file.EMBEDDING_FILE)
    out = embedding_file.create(path, len(corpus), doc_embedder.embedding_dim, storage_dtype)
    embedding.embed_blocks(embedding.ExportTower(doc_embedder),
                           *corpus.wordpieces(doc_embedder.tokenizer()), batch_size, progress,
                           out=out)
    out.flush()
    del out
    return cls.from_file(path, corpus, kind, scann, sharding, snapshot_step, embedding_dtype,
                         storage_dtype, staging, doc_embedder.doc_input)

  @classmethod
  def from_file(cls, path: str, corpus: Corpus, kind: str, scann: ScannSettings,
                sharding: Sharding, snapshot_step: int, embedding_dtype: str, storage_dtype: str,
                staging: Optional[tempfile.TemporaryDirectory] = None,
                doc_input: str = doc_inputs.DEFAULT_DOC_INPUT) -> "DocIndex":
    """The `DocIndex` of `corpus` over the embeddings file at `path` (embedded in the form
    `doc_input`), indexed here."""
    embeddings = embedding_file.open_embeddings(path, storage_dtype, len(corpus))
    index = build_index(embeddings, kind, scann, sharding)  # to float32 a shard at a time
    return cls(embeddings, index, corpus.fingerprint, snapshot_step, kind, embedding_dtype,
               storage_dtype, doc_input, staging)

  def metadata(self) -> Dict[str, Any]:
    """What the index directory records besides the index and the embeddings file's
    (`index_publisher` metadata)."""
    return {"corpus_fingerprint": self.corpus_fingerprint, "snapshot_step": self.snapshot_step,
            "embedding_dtype": self.embedding_dtype, **doc_inputs.metadata(self.doc_input)}

  @classmethod
  def from_index(cls, index: MipsIndex, metadata: Dict[str, Any],
                 embeddings: Optional[np.ndarray] = None) -> "DocIndex":
    """The `DocIndex` of a loaded index version, its metadata and its mapped embeddings file
    (None: the version has none, the index's copy is used)."""
    storage_dtype = str(metadata.get(embedding_file.STORAGE_KEY, "float32"))
    if embeddings is None:
      embeddings, storage_dtype = index.document_embeddings(), "float32"
    return cls(embeddings, index, str(metadata.get("corpus_fingerprint", "")),
               int(metadata.get("snapshot_step", 0)), kind_of(index),
               str(metadata.get("embedding_dtype", "float32")), storage_dtype,
               doc_inputs.of_metadata(metadata))

  def save(self, directory: str) -> None:
    """Writes the embeddings file, then the index with its metadata into `directory`
    (`index_publisher.write_index`)."""
    tf.io.gfile.makedirs(directory)
    path = os.path.join(directory, embedding_file.EMBEDDING_FILE)
    source = getattr(self.embeddings, "filename", None)
    if source is not None and os.path.exists(source):
      if os.path.abspath(source) != os.path.abspath(path):
        tf.io.gfile.copy(source, path, overwrite=True)
    else:
      out = embedding_file.create(path, self.num_blocks, self.dim, self.storage_dtype)
      out[:] = self.embeddings
      out.flush()
      del out
    index_publisher.write_index(self.index, directory, dict(
        self.metadata(), **embedding_file.metadata(path, self.storage_dtype)))

  @staticmethod
  def exists(directory: str) -> bool:
    """Whether `directory` holds a document index (one of the older layout included, which
    `load` rejects with the advice to rebuild it)."""
    return index_publisher.is_index(directory) or index_publisher.is_old_doc_index(directory)

  @staticmethod
  def read_info(directory: str) -> Dict[str, Any]:
    """{"kind", "num_blocks", "dim", "corpus_fingerprint", "snapshot_step", "embedding_dtype",
    "embedding_storage_dtype"} of a saved index, from its manifest (without loading its
    arrays).

    Raises:
      FileNotFoundError: no index in `directory`.
      InputError: an index in the older layout (rebuild it).
    """
    if not tf.io.gfile.isdir(directory):
      raise FileNotFoundError(f"no document index at {directory}")
    manifest = index_publisher.read_manifest(directory)
    info = {"snapshot_step": 0, "embedding_dtype": "float32",
            embedding_file.STORAGE_KEY: "float32"}
    info.update(index_publisher.metadata_of(manifest))
    info.update(kind=manifest.builder.get("shard_kind", manifest.kind),  # a sharded index's
                num_blocks=manifest.num_docs, dim=manifest.dim)  # shards' kind
    return info

  @classmethod
  def load(cls, directory: str, corpus: Optional[Corpus] = None) -> "DocIndex":
    """Loads a saved `DocIndex` (checksums verified), its embeddings file memory-mapped; with
    `corpus`, checks that it indexes that corpus.

    Raises:
      FileNotFoundError: no index in `directory`.
      InputError: an index in the older layout (rebuild it), or an embeddings file that is
        damaged, truncated or of another shape (naming the file).
      IndexCorruptedError: its files do not match its manifest.
      EmbeddingMismatchError: it indexes another corpus.
    """
    info = cls.read_info(directory)
    index = index_publisher.read_index(directory)  # its files agree with its manifest
    embeddings = embedding_file.open_in(directory, info, info["num_blocks"], info["dim"])
    if corpus is not None and (info.get("corpus_fingerprint") != corpus.fingerprint or
                               info["num_blocks"] != len(corpus)):
      raise EmbeddingMismatchError(errors.describe(
          directory, f"document index built for another corpus than {corpus.source!r} "
          f"(its manifest.json: {info['num_blocks']} blocks, corpus_fingerprint "
          f"{str(info.get('corpus_fingerprint'))[:12]}; this corpus: {len(corpus)} blocks, "
          f"{corpus.fingerprint[:12]})", "Pass the corpus it was built for, or a precomputed "
          "index of this corpus"))
    return cls.from_index(*index, embeddings)


def index_corpus(doc_embedder: DocEmbedder, corpus: Corpus, embeddings_dir: str = "",
                 kind: str = "scann", batch_size: int = 64,
                 progress: Optional[Callable[[int], None]] = None,
                 scann: ScannSettings = ScannSettings(), sharding: Sharding = Sharding(),
                 embedding_dtype: str = "float32",
                 storage_dtype: str = "float32") -> DocIndex:
  """The `DocIndex` of a (possibly new) knowledge corpus for a model's doc embedder.

  Args:
    doc_embedder: the model's doc-embedder export.
    corpus: the corpus.
    embeddings_dir: optional precomputed embeddings: a `DocIndex` directory, a directory
      of the embedding pipeline's `embeddings-*.tfrecord` shards, or the released forms of
      `checkpoints.released_embeddings` (a TF1 checkpoint of `block_emb`, a `.npy`). They are
      verified against the doc embedder. Empty: embed the corpus now.
    kind: the MIPS index to build ("scann" or "brute_force") when none is loaded.
    batch_size, progress: for embedding.
    scann, sharding: the ScaNN settings of a "scann" index built here, and its shard size.
    embedding_dtype: the precision `doc_embedder` computes in ("float32" / "bfloat16"); a
      `DocIndex` directory records its own, pipeline shards are taken to be in this one.
    storage_dtype: the dtype embeddings made or read here are stored in (a `DocIndex`
      directory keeps its own).

  Raises:
    EmbeddingMismatchError: the precomputed embeddings do not match the corpus or embedder
      (a `DocIndex` of the other `doc_input`, too).
  """
  if not embeddings_dir:
    return DocIndex.build(doc_embedder, corpus, kind, batch_size=batch_size, progress=progress,
                          scann=scann, sharding=sharding, embedding_dtype=embedding_dtype,
                          storage_dtype=storage_dtype)
  source = f"embeddings in {embeddings_dir}"
  if DocIndex.exists(embeddings_dir):
    doc_index = DocIndex.load(embeddings_dir, corpus)
    doc_inputs.check_index(doc_index.doc_input, doc_embedder.doc_input, embeddings_dir)
    verify_embeddings(doc_embedder, corpus, doc_index.embeddings, source,
                      (doc_index.embedding_dtype, embedding_dtype, doc_index.storage_dtype))
    return doc_index
  staging = tempfile.TemporaryDirectory(prefix="realm_doc_index_")
  path = os.path.join(staging.name, embedding_file.EMBEDDING_FILE)
  if released_embeddings.is_released_embeddings(embeddings_dir):
    embeddings = copy_released_embeddings(embeddings_dir, doc_embedder, corpus, path,
                                          embedding_dtype, storage_dtype)
  else:
    embeddings = load_pipeline_embeddings(embeddings_dir, corpus, path, storage_dtype)
  verify_embeddings(doc_embedder, corpus, embeddings, source, (embedding_dtype, storage_dtype))
  del embeddings
  return DocIndex.from_file(path, corpus, kind, scann, sharding, 0, embedding_dtype,
                            storage_dtype, staging, doc_embedder.doc_input)
