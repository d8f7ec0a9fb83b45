"""The check that precomputed block embeddings pair with a corpus: re-embed blocks, compare rows.

Legend: N blocks, D embedding dim, C rows re-embedded at a time.

The default re-embeds `DEFAULT_ROWS` blocks spread over the corpus (`Corpus.sampled_rows`): it
catches embeddings of another corpus or another doc tower, but not a few rows out of place
(two swapped rows that the sample misses pass, and change every answer that retrieves them).
`rows=ALL` re-embeds every block, `CHUNK` at a time (as long as embedding the corpus), and
names the rows that differ. The comparison allows the rounding of the precisions the
embeddings were computed and stored in (`retrieval.embedding.embedding_tolerance`).
"""
from typing import Sequence, Union

import numpy as np

from realm_tf import errors
from realm_tf.retrieval import embedding
from realm_tf.retrieval import embedding_file
from realm_tf.retrieval.corpus import Corpus
from realm_tf.signatures.doc_embedder import DocEmbedder

DEFAULT_ROWS = 8
ALL = "all"
CHUNK = 1024
Rows = Union[int, str]
_NAMED_ROWS = 5


def check_rows(rows: Rows) -> Rows:
  """`rows` as `ALL` or a positive int (a string of digits is read as one).

  Raises:
    InputError: anything else.
  """
  if rows == ALL:
    return ALL
  if isinstance(rows, str) and rows.isdigit():
    rows = int(rows)
  if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
    raise errors.InputError(errors.describe(
        "--verify_blocks", f"{rows!r} is neither a positive number of blocks nor {ALL!r}",
        f"Pass a number of blocks to re-embed (default {DEFAULT_ROWS}) or {ALL}"))
  return int(rows)


def rows_checked(rows: Rows, num_blocks: int) -> int:
  """How many of `num_blocks` rows a check of `rows` re-embeds."""
  return num_blocks if check_rows(rows) == ALL else min(int(rows), num_blocks)


def _row_list(rows: np.ndarray) -> str:
  named = ", ".join(str(int(r)) for r in rows[:_NAMED_ROWS])
  return named + (f" and {len(rows) - _NAMED_ROWS} more" if len(rows) > _NAMED_ROWS else "")


def verify_embeddings(doc_embedder: DocEmbedder, corpus: Corpus, embeddings: np.ndarray,
                      source: str = "embeddings", dtypes: Sequence[str] = ("float32",),
                      rows: Rows = DEFAULT_ROWS, tower: str = "", remedy: str = "") -> int:
  """Checks that `embeddings` [N, D] are the doc embedder's embeddings of `corpus`; returns how
  many rows it re-embedded.

  Args:
    source: how the messages name the embeddings (e.g. "embeddings in <file>").
    dtypes: the precisions of `embeddings` and of `doc_embedder` ("float32" / "bfloat16"), and
      the dtype `embeddings` are stored in.
    rows: blocks re-embedded: a number (spread evenly, first and last included) or `ALL`.
    tower: how the messages name the doc tower (default: the export's path).
    remedy: what the messages tell the user to do (default: re-embed the corpus).

  Raises:
    EmbeddingMismatchError: a row count or dimension disagreement, or rows whose re-embedding
      differs by more than `embedding_tolerance(dtypes, ...)`, naming them.
  """
  tower = tower or f"the doc embedder {doc_embedder.path}"
  if embeddings.ndim != 2 or embeddings.shape[0] != len(corpus):
    raise errors.EmbeddingMismatchError(errors.describe(
        source, f"{embeddings.shape[0] if embeddings.ndim else 0} embeddings for the "
        f"{len(corpus)} blocks of corpus {corpus.source!r}",
        remedy or "Pass the embeddings of this corpus, one row per block in its order"))
  if embeddings.shape[1] != doc_embedder.embedding_dim:
    raise errors.EmbeddingMismatchError(errors.describe(
        source, f"embeddings of dimension {embeddings.shape[1]}, but {tower} makes dimension "
        f"{doc_embedder.embedding_dim}", remedy or "Re-embed the corpus with this model's doc "
        "embedder"))
  checked = (np.arange(len(corpus)) if check_rows(rows) == ALL else
             corpus.sampled_rows(int(rows)))
  export, tokenizer = embedding.ExportTower(doc_embedder), doc_embedder.tokenizer()
  bad, worst, worst_tolerance = [], 0.0, 0.0
  for begin in range(0, len(checked), CHUNK):
    chunk = checked[begin:begin + CHUNK]
    fresh = embedding.embed_texts(export, tokenizer, [corpus.titles[r] for r in chunk],
                                  [corpus.texts[r] for r in chunk])
    difference = np.max(np.abs(fresh - embedding_file.gather(embeddings, chunk)), axis=1)
    tolerance = embedding.embedding_tolerance(dtypes, float(np.max(np.abs(fresh), initial=0.0)))
    wrong = ~np.isfinite(difference) | (difference > tolerance)
    bad.extend(chunk[wrong].tolist())
    if np.any(wrong):
      worst = max(worst, float(np.nan_to_num(np.max(difference[wrong]), nan=np.inf)))
      worst_tolerance = tolerance
  if bad:
    raise errors.EmbeddingMismatchError(
        f"{source} were not made by {tower} for corpus {corpus.source!r}: "
        f"{len(bad)} of the {len(checked)} rows re-embedded differ (rows "
        f"{_row_list(np.asarray(bad))}, by up to {worst:.3g}, tolerance {worst_tolerance:.3g}). "
        + (remedy or "Re-embed the corpus with this model's doc embedder (e.g. `realm-ask "
           "--corpus=...` without a precomputed index)").rstrip(".") + ".")
  return len(checked)
