"""Pipeline 1: Wikipedia (MediaWiki XML dump or JSONL) -> REALM evidence blocks.

    documents (document_sources) -> DocumentsToBlocks -> DeduplicateBlocks -> WriteBlocks
                                  \\-> dead letters of every stage -> WriteDeadLetters

Writes to `output_dir` `blocks-SSSSS-of-NNNNN.tfrecord` (`data.formats.BLOCK_FEATURES`),
`blocks.manifest.json` last (`data.shards`), `dead_letter-*.jsonl` (`pipelines.dead_letter`)
and `corpus/`, the same blocks in the memory-mapped corpus form, converted by the launching
process once the shards are complete (local output only; elsewhere the first `Corpus.load`
converts them). The shards stay the other pipelines' input: their workers read them in
parallel. Bad records never fail the run, they are dead letters; `run_pipeline` checks its
inputs first and fails with `InputError` when no block comes out. Counters, besides the
sources': `articles_packed`, `articles_dead_letter`, `blocks_packed`, `blocks_duplicate`,
`blocks_id_collision`, `blocks`, `block_wordpieces`, `dead_letters`.
"""
import dataclasses
import os
from typing import Dict, List, Optional

import apache_beam as beam

from pipelines import beam_runner
from pipelines import block_packer
from pipelines import dead_letter
from pipelines import document_sources
from pipelines import pipeline_io
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

BLOCKS_PREFIX = "blocks"
TFRECORD_SUFFIX = ".tfrecord"


def default_vocab_file() -> str:
  """The uncased BERT vocabulary shipped with all-MiniLM-L6-v2 (`realm_tf.pretrained`)."""
  from realm_tf import pretrained  # pylint: disable=g-import-not-at-top
  return os.path.join(pretrained.minilm_dir(), "vocab.txt")


def load_tokenizer(vocab_file: str):
  """The `WordpieceTokenizer` of `vocab_file` ("" = `default_vocab_file()`, resolved where
  this runs, i.e. on each worker)."""
  return WordpieceTokenizer.from_vocab_file(vocab_file or default_vocab_file())


@dataclasses.dataclass
class BlocksConfig:
  """What pipeline 1 reads and writes.

  Attributes:
    input_patterns: dump files (`.xml`, `.xml.bz2`, `.xml.gz`) or JSONL files, as patterns.
    output_dir: where the block and dead-letter shards go.
    input_format: "wikipedia" (MediaWiki XML) or "jsonl" (`{"title", "text"}` lines).
    vocab_file: WordPiece vocabulary ("" = MiniLM's uncased BERT vocabulary).
    block_length: L, wordpieces of `[CLS] title [SEP] body [SEP]` (REALM: 288).
    max_title_wordpieces: articles with longer titles go to the dead-letter output.
    block_boundaries: "greedy", "paragraph" or "section": where blocks must break besides
      articles (`block_packer.BlockPacker`'s `boundaries`).
    max_page_bytes: pages (or JSONL lines) with more bytes go to the dead-letter output.
    max_unparsed_fraction: see `wikitext_cleaner.clean_wikitext`.
    num_shards: block shards (0: the runner decides).
    articles_per_batch: articles tokenized per tokenizer call.
  """
  input_patterns: List[str]
  output_dir: str
  input_format: str = "wikipedia"
  vocab_file: str = ""
  block_length: int = block_packer.BLOCK_LENGTH
  max_title_wordpieces: int = 64
  block_boundaries: str = "greedy"
  max_page_bytes: int = 4 << 20
  max_unparsed_fraction: float = 0.25
  num_shards: int = 0
  articles_per_batch: int = 16


class _PackBlocksFn(beam.DoFn):
  """A batch of `Document`s -> `Block`s; articles that cannot be packed are dead letters."""

  def __init__(self, vocab_file: str, block_length: int, max_title_wordpieces: int,
               boundaries: str):
    super().__init__()
    self._vocab_file = vocab_file
    self._block_length = block_length
    self._max_title_wordpieces = max_title_wordpieces
    self._boundaries = boundaries
    self._packer: Optional[block_packer.BlockPacker] = None
    self._articles = beam_runner.counter("articles_packed")
    self._blocks = beam_runner.counter("blocks_packed")
    self._wordpieces = beam_runner.counter("block_wordpieces")
    self._dead = beam_runner.counter("articles_dead_letter")

  def setup(self):
    self._packer = block_packer.BlockPacker(
        load_tokenizer(self._vocab_file), self._block_length, self._max_title_wordpieces,
        self._boundaries)

  def _pack_one(self, document):
    try:
      return self._packer.pack([(document.title, document.text)],
                               [document.section_starts])[0], None
    except block_packer.BlockPackingError as e:
      return None, str(e)

  def process(self, documents: List[document_sources.Document]):
    try:
      packed = [(blocks, None) for blocks in self._packer.pack(
          [(d.title, d.text) for d in documents], [d.section_starts for d in documents])]
    except block_packer.BlockPackingError:
      packed = [self._pack_one(d) for d in documents]  # isolate the failing article
    for document, (blocks, error) in zip(documents, packed):
      if error is None and not blocks:
        error = "empty article: its text has no wordpieces"
      if error is not None:
        self._dead.inc()
        yield dead_letter.tagged(document.source, document.offset, document.title,
                                 "pack_blocks", error)
        continue
      self._articles.inc()
      self._blocks.inc(len(blocks))
      for block in blocks:
        self._wordpieces.inc(len(block.title_ids) + len(block.body_ids) + 3)
        yield block


class DocumentsToBlocks(beam.PTransform):
  """`Document`s -> `block_packer.Block`s (sentence split, tokenized, packed greedily within
  `boundaries`).

  Returns {"blocks": Blocks, "dead_letter": dead letters}.

  Args:
    vocab_file: WordPiece vocabulary ("" = MiniLM's).
    block_length: L.
    max_title_wordpieces: longer titles are dead letters.
    articles_per_batch: articles per tokenizer call.
    boundaries: "greedy", "paragraph" or "section" (`block_packer.BLOCK_BOUNDARIES`).
  """

  def __init__(self, vocab_file: str = "", block_length: int = block_packer.BLOCK_LENGTH,
               max_title_wordpieces: int = 64, articles_per_batch: int = 16,
               boundaries: str = "greedy"):
    super().__init__()
    self.vocab_file = vocab_file
    self.block_length = block_length
    self.max_title_wordpieces = max_title_wordpieces
    self.articles_per_batch = articles_per_batch
    self.boundaries = boundaries

  def expand(self, documents):
    packed = (documents
              | "Batch" >> beam.BatchElements(min_batch_size=1,
                                              max_batch_size=self.articles_per_batch)
              | "Pack" >> beam.ParDo(_PackBlocksFn(
                  self.vocab_file, self.block_length, self.max_title_wordpieces,
                  self.boundaries)).with_outputs(dead_letter.DEAD_LETTER, main="blocks"))
    return {"blocks": packed.blocks, dead_letter.DEAD_LETTER: packed[dead_letter.DEAD_LETTER]}


class _KeepOneFn(beam.DoFn):
  """(block_id, [Block]) -> one Block; different contents under one id are dead letters."""

  def __init__(self):
    super().__init__()
    self._duplicates = beam_runner.counter("blocks_duplicate")
    self._blocks = beam_runner.counter("blocks")
    self._dead = beam_runner.counter("blocks_id_collision")

  def process(self, keyed):
    block_id, blocks = keyed
    blocks = sorted(blocks, key=lambda b: (b.title, b.text))
    kept = blocks[0]
    self._blocks.inc()
    for other in blocks[1:]:
      if (other.title, other.text) == (kept.title, kept.text):
        self._duplicates.inc()
      else:
        self._dead.inc()
        yield dead_letter.tagged("", block_id, other.title, "deduplicate_blocks",
                                 f"block id {block_id} collides with a block of "
                                 f"{kept.title!r}; kept that one")
    yield kept


class DeduplicateBlocks(beam.PTransform):
  """Removes exact duplicate blocks (same title and text, hence the same id).

  Returns {"blocks": unique Blocks, "dead_letter": hash collisions (different content under
  one 63-bit id, ~1e-5 probable for 13M blocks)}.
  """

  def expand(self, blocks):
    unique = (blocks
              | "KeyById" >> beam.Map(lambda b: (b.block_id, b))
              | "GroupById" >> beam.GroupByKey()
              | "KeepOne" >> beam.ParDo(_KeepOneFn()).with_outputs(
                  dead_letter.DEAD_LETTER, main="blocks"))
    return {"blocks": unique.blocks, dead_letter.DEAD_LETTER: unique[dead_letter.DEAD_LETTER]}


def serialize_block(block: block_packer.Block) -> bytes:
  """A `Block` as a `formats.block_example` record."""
  return formats.block_example(block.block_id, block.title, block.text, block.title_ids,
                               block.body_ids)


class WriteRecords(beam.PTransform):
  """Writes serialized records as `<output_dir>/<prefix>-SSSSS-of-NNNNN.tfrecord`, reshuffled
  (pipeline 1's blocks, pipeline 2's examples).

  Args:
    output_dir: the pipeline's output directory.
    prefix: the shards' name before the shard numbers, e.g. `BLOCKS_PREFIX`.
    num_shards: number of shards (0: the runner decides).
  """

  def __init__(self, output_dir: str, prefix: str, num_shards: int = 0):
    super().__init__()
    self.output_dir = output_dir
    self.prefix = prefix
    self.num_shards = num_shards

  def expand(self, records):
    return (records
            | "Reshuffle" >> beam.Reshuffle()
            | "Write" >> beam.io.WriteToTFRecord(
                os.path.join(self.output_dir, self.prefix), file_name_suffix=TFRECORD_SUFFIX,
                num_shards=self.num_shards, shard_name_template=dead_letter.SHARD_TEMPLATE))


def build_pipeline(pipeline: beam.Pipeline, config: BlocksConfig) -> None:
  """Adds pipeline 1's transforms to `pipeline`."""
  sources = document_sources.read_documents(
      pipeline, config.input_patterns, config.input_format, config.max_page_bytes,
      config.max_unparsed_fraction)
  packed = sources["documents"] | "DocumentsToBlocks" >> DocumentsToBlocks(
      config.vocab_file, config.block_length, config.max_title_wordpieces,
      config.articles_per_batch, config.block_boundaries)
  unique = packed["blocks"] | "DeduplicateBlocks" >> DeduplicateBlocks()
  _ = (unique["blocks"]
       | "SerializeBlocks" >> beam.Map(serialize_block)
       | "WriteBlocks" >> WriteRecords(config.output_dir, BLOCKS_PREFIX, config.num_shards))
  _ = ((sources[dead_letter.DEAD_LETTER], packed[dead_letter.DEAD_LETTER],
        unique[dead_letter.DEAD_LETTER])
       | "FlattenDeadLetters" >> beam.Flatten()
       | "WriteDeadLetters" >> dead_letter.WriteDeadLetters(config.output_dir))


def run_pipeline(pipeline: beam.Pipeline, config: BlocksConfig) -> Dict[str, int]:
  """Builds pipeline 1 on `pipeline`, runs it to completion, writes the blocks' manifest and
  returns its counters.

  Raises:
    FileNotFoundError, InputError: a block length without room for a body; unknown block
      boundaries; an input pattern
      matches nothing, or a directory, empty or unreadable file; the output directory is a
      file; no block came out.
  """
  block_packer.check_lengths(config.block_length, config.max_title_wordpieces)
  block_packer.check_boundaries(config.block_boundaries)
  pipeline_io.check_input_files(config.input_patterns)
  pipeline_io.check_output_dir(config.output_dir)
  pipeline_io.check_vocab_file(config.vocab_file)
  shards.remove_manifest(config.output_dir, BLOCKS_PREFIX)
  build_pipeline(pipeline, config)
  counters = pipeline_io.run(pipeline)
  pipeline_io.finish_output(config.output_dir, BLOCKS_PREFIX, "blocks", counters,
                            dataclasses.asdict(config), ",".join(config.input_patterns))
  if "://" not in config.output_dir:
    Corpus.load(config.output_dir)
  return counters
