"""The doc tower's input form, `doc_input`: which parts of a block the document embedding reads.

"title_body" (REALM's and ORQA's, the default): `[CLS] title [SEP] body [SEP]`, the title
first. "body" (the REALM patent's body-only embedding): `[CLS] body [SEP]`. T wordpieces of a
segment, B blocks; both are packed to at most L = `block_length` wordpieces.

It is a property of the retriever (`models.retriever.Retriever.doc_input`, saved with it, in
`presets.ModelConfig` and in a doc-embedder export), not a flag of each stage: an index is
only usable with the doc tower's form it was embedded in, so every embedder reads the form
from the model it embeds with, and an index records it (`check_index`). The reader's input
(`[CLS] x [SEP] z_body [SEP]`) does not depend on it.
"""
from realm_tf import errors

DOC_INPUTS = ("title_body", "body")
DEFAULT_DOC_INPUT = "title_body"
METADATA_KEY = "doc_input"  # in index metadata; absent: DEFAULT_DOC_INPUT


def check(doc_input: str) -> str:
  """Returns `doc_input`, one of `DOC_INPUTS` (ValueError otherwise)."""
  if doc_input not in DOC_INPUTS:
    raise ValueError(f"doc_input must be one of {DOC_INPUTS}, got {doc_input!r}")
  return doc_input


def segments(title_ids, body_ids, doc_input: str) -> tuple:
  """The segments a `BertPacker` packs for the doc tower: (title_ids, body_ids) or
  (body_ids,) of int [B, (T)] (or [T]) wordpieces without specials."""
  return (body_ids,) if check(doc_input) == "body" else (title_ids, body_ids)


def packed_lengths(title_lengths, body_lengths, doc_input: str):
  """The untruncated packed lengths [B] (wordpieces plus specials) of blocks of
  `title_lengths` and `body_lengths` [B]."""
  if check(doc_input) == "body":
    return body_lengths + 2
  return title_lengths + body_lengths + 3


def metadata(doc_input: str) -> dict:
  """What an index's metadata records of its form: nothing for "title_body" (the metadata of
  such indexes is the one written before it was a setting), else {"doc_input": "body"}."""
  return {} if check(doc_input) == DEFAULT_DOC_INPUT else {METADATA_KEY: doc_input}


def of_metadata(metadata_values) -> str:
  """The form an index's metadata records (`DEFAULT_DOC_INPUT` where it records none)."""
  return str(metadata_values.get(METADATA_KEY, DEFAULT_DOC_INPUT))


def check_index(index_doc_input: str, model_doc_input: str, where: str) -> None:
  """Raises `errors.EmbeddingMismatchError` (an `InputError`) when an index (at `where`) was
  embedded in another form than the model's doc tower reads."""
  if index_doc_input != model_doc_input:
    raise errors.EmbeddingMismatchError(errors.describe(
        where, f"index embedded with doc_input={index_doc_input!r}, but the model's doc tower "
        f"reads doc_input={model_doc_input!r}", f"Rebuild the index with this model's doc "
        f"tower, or use a model trained with doc_input={index_doc_input!r}"))
