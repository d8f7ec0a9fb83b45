"""The frozen document index of a QA system: block embeddings + a MIPS index over them.

Legend: N blocks, D embedding dim.

A `DocIndex` directory is an index version directory of `realm_tf.mips.index_publisher`, the
format the pre-training refresher and the index builder publish: the MIPS index files, and
`manifest.json` (format_version, kind, N, D, a sha256 of every file) whose metadata holds
"corpus_fingerprint", "snapshot_step" and "embedding_dtype". The block embeddings float32
[N, D] (row r = corpus row r; the retriever logits of fine-tuning are gathered from them) are
the index's own (`MipsIndex.document_embeddings`). A directory in the older layout (info.json,
embeddings.npy, index/) is an `InputError` saying to rebuild it.

Embeddings always come from a doc tower through `retrieval.embedding.embed_blocks`: a
doc-embedder export (`realm_tf.signatures.doc_embedder`) here, as in the index builder, or the
retriever in memory (fine-tuning's `retrieval.index_refresh` refresher). Embeddings from
elsewhere (another `DocIndex` directory, or the embedding pipeline's `embeddings-*.tfrecord`
shards) are checked against the embedder before use: the dimension must agree and a
deterministic sample of blocks is re-embedded and compared, so a corpus embedded by another
model is an `EmbeddingMismatchError`, never silently wrong retrieval. The comparison allows the
rounding of the precision the embeddings were computed in ("embedding_dtype": float32, or
bfloat16 from a bfloat16 doc tower, `models.precision`):
`retrieval.embedding.embedding_tolerance`.
"""
import dataclasses
from typing import Any, Callable, Dict, Optional, Sequence

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.mips import index_publisher
from realm_tf.mips.index_builder import build_index
from realm_tf.mips.index_builder import kind_of
from realm_tf.mips.index_builder import ScannSettings
from realm_tf.mips.mips_index import MipsIndex
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval import embedding
from realm_tf.signatures.doc_embedder import DocEmbedder

_VERIFY_SAMPLE = 8


class EmbeddingMismatchError(errors.InputError):
  """Block embeddings do not belong to the corpus or were not made by the doc embedder."""


def verify_embeddings(doc_embedder: DocEmbedder, corpus: Corpus, embeddings: np.ndarray,
                      source: str = "embeddings",
                      dtypes: Sequence[str] = ("float32",)) -> None:
  """Checks that `embeddings` are the doc embedder's embeddings of `corpus`.

  Args:
    dtypes: the precisions of `embeddings` and of `doc_embedder` ("float32" / "bfloat16").

  Raises:
    EmbeddingMismatchError: a row count or dimension disagreement, or sampled blocks whose
      re-embedding differs by more than `embedding_tolerance(dtypes, ...)`.
  """
  embeddings = np.asarray(embeddings)
  if embeddings.ndim != 2 or embeddings.shape[0] != len(corpus):
    raise EmbeddingMismatchError(
        f"{source}: {embeddings.shape[0] if embeddings.ndim else 0} embeddings for the "
        f"{len(corpus)} blocks of corpus {corpus.source!r}")
  if embeddings.shape[1] != doc_embedder.embedding_dim:
    raise EmbeddingMismatchError(
        f"{source}: embeddings of dimension {embeddings.shape[1]}, but the doc embedder "
        f"{doc_embedder.path} makes dimension {doc_embedder.embedding_dim}; re-embed the "
        "corpus with this model's doc embedder")
  rows = np.unique(np.linspace(0, len(corpus) - 1, min(_VERIFY_SAMPLE, len(corpus))).astype(int))
  fresh = embedding.embed_texts(embedding.ExportTower(doc_embedder), doc_embedder.tokenizer(),
                                [corpus.titles[r] for r in rows], [corpus.texts[r] for r in rows])
  difference = float(np.max(np.abs(fresh - embeddings[rows])))
  tolerance = embedding.embedding_tolerance(dtypes, float(np.max(np.abs(fresh), initial=0.0)))
  if not np.isfinite(difference) or difference > tolerance:
    raise EmbeddingMismatchError(
        f"{source} were not made by the doc embedder {doc_embedder.path} for corpus "
        f"{corpus.source!r}: re-embedding {len(rows)} sampled blocks differs by up to "
        f"{difference:.3g} (tolerance {tolerance:.3g}); re-embed the corpus with this model's "
        "doc embedder (e.g. `realm-ask --corpus=...` without a precomputed index)")


def load_pipeline_embeddings(directory: str, corpus: Corpus) -> np.ndarray:
  """Reads the embedding pipeline's `embeddings-*.tfrecord` shards in corpus row order.

  Raises:
    FileNotFoundError: no shards in `directory`.
    ShardError: a missing, damaged or miscounted shard (`realm_tf.data.shards`).
    EmbeddingMismatchError: blocks of the corpus without an embedding, or unknown blocks.
  """
  files = shards.check_shards(directory, "embeddings").files  # verified, or a warning
  ids, vectors = [], []
  for record in tf.data.TFRecordDataset(files).map(formats.parse_embedding):
    ids.append(int(record["block_id"]))
    vectors.append(record["embedding"].numpy())
  ids = np.asarray(ids, np.int64)
  if len(set(len(v) for v in vectors)) != 1:
    raise EmbeddingMismatchError(f"{directory}: embeddings of different dimensions")
  unknown = np.setdiff1d(ids, corpus.block_ids)
  missing = np.setdiff1d(corpus.block_ids, ids)
  if unknown.size or missing.size or len(ids) != len(corpus):
    raise EmbeddingMismatchError(errors.describe(
        directory, f"does not embed corpus {corpus.source!r}: {missing.size} blocks without "
        f"an embedding (e.g. {missing[:5].tolist()}), {unknown.size} unknown blocks "
        f"(e.g. {unknown[:5].tolist()}), {len(ids)} records for {len(corpus)} blocks",
        "Pass the embeddings of this corpus (python -m pipelines.build_index "
        "--embeddings_dir=...), or leave --embeddings_dir out to embed it"))
  order = np.argsort(ids, kind="stable")
  return np.stack(vectors)[order].astype(np.float32)


@dataclasses.dataclass
class DocIndex:
  """Block embeddings [N, D] of a corpus and a MIPS index over them.

  Attributes:
    embeddings: float32 [N, D].
    index: the `MipsIndex` (row r = corpus row r).
    corpus_fingerprint: `Corpus.fingerprint` of the corpus embedded.
    snapshot_step: the training step of the doc tower that embedded it (0: pre-trained).
    kind: "scann" or "brute_force" (of each shard of a sharded index).
    embedding_dtype: the precision the embeddings were computed in ("float32" / "bfloat16").
  """
  embeddings: np.ndarray
  index: MipsIndex
  corpus_fingerprint: str
  snapshot_step: int = 0
  kind: str = "scann"
  embedding_dtype: str = "float32"

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
            scann: ScannSettings = ScannSettings(),
            embedding_dtype: str = "float32") -> "DocIndex":
    """Embeds `corpus` with `doc_embedder` (an export computing in `embedding_dtype`), tokenized
    by the export's own tokenizer (`retrieval.embedding.embed_texts`), and indexes it
    (`index_builder.build_index`)."""
    embeddings = embedding.embed_texts(embedding.ExportTower(doc_embedder),
                                       doc_embedder.tokenizer(), corpus.titles, corpus.texts,
                                       batch_size, progress)
    return cls(embeddings, build_index(embeddings, kind, scann), corpus.fingerprint,
               snapshot_step, kind, embedding_dtype)

  def metadata(self) -> Dict[str, Any]:
    """What the index directory records besides the index (`index_publisher` metadata)."""
    return {"corpus_fingerprint": self.corpus_fingerprint, "snapshot_step": self.snapshot_step,
            "embedding_dtype": self.embedding_dtype}

  @classmethod
  def from_index(cls, index: MipsIndex, metadata: Dict[str, Any]) -> "DocIndex":
    """The `DocIndex` of a loaded index version and its metadata."""
    return cls(index.document_embeddings(), index, str(metadata.get("corpus_fingerprint", "")),
               int(metadata.get("snapshot_step", 0)), kind_of(index),
               str(metadata.get("embedding_dtype", "float32")))

  def save(self, directory: str) -> None:
    """Writes the index with its metadata into `directory` (`index_publisher.write_index`)."""
    index_publisher.write_index(self.index, directory, self.metadata())

  @staticmethod
  def exists(directory: str) -> bool:
    """Whether `directory` holds a document index (one of the older layout included, which
    `load` rejects with the advice to rebuild it)."""
    return index_publisher.is_index(directory) or index_publisher.is_old_doc_index(directory)

  @staticmethod
  def read_info(directory: str) -> Dict[str, Any]:
    """{"kind", "num_blocks", "dim", "corpus_fingerprint", "snapshot_step", "embedding_dtype"}
    of a saved index, from its manifest (without loading its arrays).

    Raises:
      FileNotFoundError: no index in `directory`.
      InputError: an index in the older layout (rebuild it).
    """
    if not tf.io.gfile.isdir(directory):
      raise FileNotFoundError(f"no document index at {directory}")
    manifest = index_publisher.read_manifest(directory)
    info = {"snapshot_step": 0, "embedding_dtype": "float32"}
    info.update(index_publisher.metadata_of(manifest))
    info.update(kind=manifest.builder.get("shard_kind", manifest.kind),  # a sharded index's
                num_blocks=manifest.num_docs, dim=manifest.dim)  # shards' kind
    return info

  @classmethod
  def load(cls, directory: str, corpus: Optional[Corpus] = None) -> "DocIndex":
    """Loads a saved `DocIndex` (checksums verified); with `corpus`, checks that it indexes
    that corpus.

    Raises:
      FileNotFoundError: no index in `directory`.
      InputError: an index in the older layout (rebuild it).
      IndexCorruptedError: its files do not match its manifest.
      EmbeddingMismatchError: it indexes another corpus.
    """
    info = cls.read_info(directory)
    if corpus is not None and (info.get("corpus_fingerprint") != corpus.fingerprint or
                               info["num_blocks"] != len(corpus)):
      raise EmbeddingMismatchError(errors.describe(
          directory, f"document index built for another corpus than {corpus.source!r} "
          f"({info['num_blocks']} blocks, corpus fingerprint "
          f"{str(info.get('corpus_fingerprint'))[:12]}; this corpus: {len(corpus)} blocks, "
          f"{corpus.fingerprint[:12]})", "Pass the corpus it was built for, or a precomputed "
          "index of this corpus"))
    return cls.from_index(*index_publisher.read_index(directory))


def index_corpus(doc_embedder: DocEmbedder, corpus: Corpus, embeddings_dir: str = "",
                 kind: str = "scann", batch_size: int = 64,
                 progress: Optional[Callable[[int], None]] = None,
                 scann: ScannSettings = ScannSettings(),
                 embedding_dtype: str = "float32") -> DocIndex:
  """The `DocIndex` of a (possibly new) knowledge corpus for a model's doc embedder.

  Args:
    doc_embedder: the model's doc-embedder export.
    corpus: the corpus.
    embeddings_dir: optional precomputed embeddings: a `DocIndex` directory, or a directory
      of the embedding pipeline's `embeddings-*.tfrecord` shards. They are verified against
      the doc embedder. Empty: embed the corpus now.
    kind: the MIPS index to build ("scann" or "brute_force") when none is loaded.
    batch_size, progress: for embedding.
    scann: the ScaNN settings of a "scann" index built here.
    embedding_dtype: the precision `doc_embedder` computes in ("float32" / "bfloat16"); a
      `DocIndex` directory records its own, pipeline shards are taken to be in this one.

  Raises:
    EmbeddingMismatchError: the precomputed embeddings do not match the corpus or embedder.
  """
  if not embeddings_dir:
    return DocIndex.build(doc_embedder, corpus, kind, batch_size=batch_size, progress=progress,
                          scann=scann, embedding_dtype=embedding_dtype)
  source = f"embeddings in {embeddings_dir}"
  if DocIndex.exists(embeddings_dir):
    doc_index = DocIndex.load(embeddings_dir, corpus)
    verify_embeddings(doc_embedder, corpus, doc_index.embeddings, source,
                      (doc_index.embedding_dtype, embedding_dtype))
    return doc_index
  embeddings = load_pipeline_embeddings(embeddings_dir, corpus)
  verify_embeddings(doc_embedder, corpus, embeddings, source, (embedding_dtype,))
  return DocIndex(embeddings, build_index(embeddings, kind, scann), corpus.fingerprint, 0, kind,
                  embedding_dtype)
