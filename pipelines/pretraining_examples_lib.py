"""Pipeline 2: blocks -> REALM pre-training examples (salient spans, or the ablations).

    ReadBlocks -> BlocksToSentences -> Reshuffle -> SentencesToExamples -> WriteExamples
                                                   \\-> dead letters -> WriteDeadLetters

Blocks re-split into the sentences they were packed from (pipeline 1's splitter), so only the
block records are needed; a sentence of >= `min_sentence_wordpieces` is a query, cut to
`max_query_wordpieces`. `masking`: "salient_span" (REALM) gives one example per tagged span of
1..`max_span_wordpieces` whole-word wordpieces inside the query; "random_span" one a sentence,
a whole-word span seeded by (block id, sentence index) so that reruns agree; "random_token" and
"spanbert" one a sentence with an empty span (span_end = span_start - 1) that the trainer masks.
Writes `examples-*.tfrecord` (`data.formats.EXAMPLE_FEATURES`), `examples.manifest.json` and
`dead_letter-*.jsonl`. Counters: `sentences_{too_short,truncated}`, `spans_found`,
`spans_{misaligned,too_long,outside_query}`, `examples_<LABEL>`, `dead_letters`, ...
"""
import dataclasses
import hashlib
import random
from typing import Dict, List, Optional

import apache_beam as beam
import numpy as np
import tensorflow as tf

from pipelines import beam_runner
from pipelines import block_records
from pipelines import dead_letter
from pipelines import pipeline_io
from pipelines import salient_span_tagger
from pipelines import wikipedia_to_blocks_lib
from realm_tf.data import formats
from realm_tf.data import shards
from realm_tf.tokenization import masking
from realm_tf.tokenization import sentence_splitter

EXAMPLES_PREFIX = "examples"
MASKINGS = ("salient_span", "random_span", "random_token", "spanbert")
RANDOM_TOKEN_LABEL = "RANDOM_TOKEN"
RANDOM_SPAN_LABEL = "RANDOM_SPAN"
SPANBERT_LABEL = "SPANBERT"
# The maskings the trainer draws (`training.pretraining_data`): examples with an empty span.
TRAINER_MASKED = {"random_token": RANDOM_TOKEN_LABEL, "spanbert": SPANBERT_LABEL}


@dataclasses.dataclass
class ExamplesConfig:
  """What pipeline 2 reads and writes.

  Attributes:
    corpus_dir: the block shards of pipeline 1, or any corpus `Corpus.load` takes (a corpus
      directory, a released `blocks.tfr`, JSONL, DPR TSV).
    output_dir: where the example and dead-letter shards go.
    masking: "salient_span", "random_span", "random_token" or "spanbert".
    tagger: `salient_span_tagger.load_tagger` spec ("spacy", "dates", "module:factory").
    vocab_file: WordPiece vocabulary ("" = MiniLM's); must be the corpus's.
    max_query_wordpieces: query_ids kept per sentence (REALM: 96 - [CLS] - [SEP] = 94).
    min_sentence_wordpieces: shorter sentences make no example.
    max_span_wordpieces: M, the most masked wordpieces (REALM: 10); longer spans are skipped.
    num_shards: example shards (0: the runner decides).
    sentences_per_batch: sentences per tokenizer / tagger call.
  """
  corpus_dir: str
  output_dir: str
  masking: str = "salient_span"
  tagger: str = "spacy"
  vocab_file: str = ""
  max_query_wordpieces: int = 94
  min_sentence_wordpieces: int = 5
  max_span_wordpieces: int = 10
  num_shards: int = 0
  sentences_per_batch: int = 512


@dataclasses.dataclass
class Sentence:
  """A sentence of a block: `index` is its position in the block."""
  block_id: int
  title: str
  index: int
  text: str


class BlocksToSentences(beam.PTransform):
  """`BlockRecord`s -> `Sentence`s (the sentence splitter of pipeline 1)."""

  def expand(self, blocks):
    read = beam_runner.counter("blocks_read")

    def split(block: block_records.BlockRecord):
      read.inc()
      for i, (start, end) in enumerate(sentence_splitter.split_sentences(block.text)):
        yield Sentence(block.block_id, block.title, i, block.text[start:end])

    return blocks | "Split" >> beam.FlatMap(split)


def _byte_offsets(text: str, char_offsets: List[int]) -> List[int]:
  """Character offsets of `text` -> UTF-8 byte offsets."""
  if text.isascii():
    return list(char_offsets)
  prefix = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
  return [int(prefix[c]) for c in char_offsets]


def random_word_span(query_ids: np.ndarray, is_word_start: np.ndarray, max_span: int,
                     seed: int):
  """A span of whole words of 1..max_span wordpieces, uniform among all such spans.

  Args:
    query_ids: int64 [T] wordpieces.
    is_word_start: bool [V], the wordpiece begins a word (not "##").
    max_span: the most wordpieces.
    seed: the draw's seed.

  Returns:
    (start, end) inclusive wordpiece positions, or None if no word fits.
  """
  starts = [i for i in range(len(query_ids)) if is_word_start[query_ids[i]]] + [len(query_ids)]
  if starts[0] != 0:
    starts = [0] + starts
  spans = []
  for a in range(len(starts) - 1):
    for b in range(a + 1, len(starts)):
      if starts[b] - starts[a] > max_span:
        break
      spans.append((starts[a], starts[b] - 1))
  if not spans:
    return None
  return spans[random.Random(seed).randrange(len(spans))]


def _sentence_seed(block_id: int, index: int) -> int:
  digest = hashlib.sha256(f"{block_id}:{index}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big")


class _SentencesToExamplesFn(beam.DoFn):
  """A batch of `Sentence`s -> serialized examples; failing sentences are dead letters."""

  def __init__(self, config: ExamplesConfig, tagger):
    super().__init__()
    self._config = config
    self._tagger = tagger
    self._tokenizer = None
    self._is_word_start = None
    names = ("sentences", "sentences_too_short", "sentences_truncated", "tagger_tokens",
             "spans_found", "spans_misaligned", "spans_too_long", "spans_outside_query",
             "examples")
    self._counters = {n: beam_runner.counter(n) for n in names}
    self._label_counters = {}

  def setup(self):
    self._tokenizer = wikipedia_to_blocks_lib.load_tokenizer(self._config.vocab_file)
    self._is_word_start = np.array(
        [not t.startswith("##") for t in self._tokenizer.vocabulary])
    if self._tagger is not None and hasattr(self._tagger, "setup"):
      self._tagger.setup()

  def _count_example(self, label: str):
    self._counters["examples"].inc()
    if label not in self._label_counters:
      self._label_counters[label] = beam_runner.counter(f"examples_{label}")
    self._label_counters[label].inc()

  def _tag(self, sentences: List[Sentence]):
    """Tags the batch; on failure tags one sentence at a time (None for a failing one)."""
    texts = [s.text for s in sentences]
    try:
      tagged = list(self._tagger(texts))
      if len(tagged) != len(texts):
        raise ValueError(f"the tagger returned {len(tagged)} rows for {len(texts)} sentences")
      return tagged, []
    except Exception:  # pylint: disable=broad-except
      spans, failures = [], []
      for sentence in sentences:
        try:
          spans.append(self._tagger([sentence.text])[0])
        except Exception as e:  # pylint: disable=broad-except  (any tagger may be plugged in)
          spans.append(None)
          failures.append(dead_letter.tagged(
              self._config.corpus_dir, sentence.block_id, sentence.title, "tag_sentence",
              f"tagger failed on sentence {sentence.index}: {type(e).__name__}: {e}"))
      return spans, failures

  def process(self, sentences: List[Sentence]):
    config = self._config
    ids, starts, ends = self._tokenizer.tokenize_with_offsets(
        tf.constant([s.text for s in sentences]))  # [S, (T)] each
    id_rows = [r.astype(np.int64) for r in _rows(ids)]
    kept = []
    for i, row in enumerate(id_rows):
      self._counters["sentences"].inc()
      if len(row) < config.min_sentence_wordpieces:
        self._counters["sentences_too_short"].inc()
        continue
      if len(row) > config.max_query_wordpieces:
        self._counters["sentences_truncated"].inc()
      kept.append(i)
    if config.masking in TRAINER_MASKED:
      label = TRAINER_MASKED[config.masking]
      for i in kept:
        self._count_example(label)
        yield formats.pretraining_example(id_rows[i][:config.max_query_wordpieces], 0, -1,
                                          sentences[i].block_id, "", label)
    elif config.masking == "random_span":
      start_rows, end_rows = _rows(starts), _rows(ends)
      for i in kept:
        query_ids = id_rows[i][:config.max_query_wordpieces]
        span = random_word_span(query_ids, self._is_word_start, config.max_span_wordpieces,
                                _sentence_seed(sentences[i].block_id, sentences[i].index))
        if span is None:
          self._counters["spans_too_long"].inc()
          continue
        text = sentences[i].text.encode("utf-8")[
            start_rows[i][span[0]]:end_rows[i][span[1]]].decode("utf-8", "replace")
        self._count_example(RANDOM_SPAN_LABEL)
        yield formats.pretraining_example(query_ids, span[0], span[1], sentences[i].block_id,
                                          text, RANDOM_SPAN_LABEL)
    else:
      yield from self._salient_span_examples([sentences[i] for i in kept],
                                             [id_rows[i] for i in kept],
                                             _take(starts, kept), _take(ends, kept))

  def _salient_span_examples(self, sentences, id_rows, starts, ends):
    config = self._config
    if not sentences:
      return
    self._counters["tagger_tokens"].inc(sum(len(s.text.split()) for s in sentences))
    tagged, failures = self._tag(sentences)
    yield from failures
    rows, begins, finishes, meta = [], [], [], []
    for row, (sentence, spans) in enumerate(zip(sentences, tagged)):
      if not spans:
        continue
      chars = [c for span in spans for c in (span.start, span.end)]
      offsets = _byte_offsets(sentence.text, chars)
      for k, span in enumerate(spans):
        if not 0 <= span.start < span.end <= len(sentence.text):
          continue
        self._counters["spans_found"].inc()
        rows.append(row)
        begins.append(offsets[2 * k])
        finishes.append(offsets[2 * k + 1])
        meta.append((row, span))
    if not rows:
      return
    span_starts, span_ends = masking.wordpiece_span(
        tf.gather(starts, rows), tf.gather(ends, rows), tf.constant(begins), tf.constant(finishes),
        offset=0)  # [P] each
    start_rows, end_rows = _rows(starts), _rows(ends)
    for (row, span), first, last, begin, finish in zip(
        meta, span_starts.numpy(), span_ends.numpy(), begins, finishes):
      if first < 0 or start_rows[row][first] < begin or end_rows[row][last] > finish:
        # No wordpiece, or the span cuts a word ("Paris" in "Parisian"): masking part of a
        # word would leave the rest as a clue.
        self._counters["spans_misaligned"].inc()
        continue
      if last - first + 1 > config.max_span_wordpieces:
        self._counters["spans_too_long"].inc()
        continue
      if last >= config.max_query_wordpieces:
        self._counters["spans_outside_query"].inc()
        continue
      sentence = sentences[row]
      self._count_example(span.label)
      yield formats.pretraining_example(
          id_rows[row][:config.max_query_wordpieces], int(first), int(last), sentence.block_id,
          sentence.text[span.start:span.end], span.label)


def _rows(ragged: tf.RaggedTensor) -> List[np.ndarray]:
  values, splits = ragged.flat_values.numpy(), ragged.row_splits.numpy()
  return [values[splits[i]:splits[i + 1]] for i in range(len(splits) - 1)]


def _take(ragged: tf.RaggedTensor, rows: List[int]) -> tf.RaggedTensor:
  return tf.gather(ragged, tf.constant(rows, tf.int32)) if rows else ragged[:0]


class SentencesToExamples(beam.PTransform):
  """`Sentence`s -> serialized pre-training examples (see the module docstring).

  Returns {"examples": serialized `formats.pretraining_example`s, "dead_letter": ...}.

  Args:
    config: the pipeline's `ExamplesConfig` (masking, lengths, vocabulary, batch size).
    tagger: the salient-span tagger (`salient_span_tagger.Tagger`; only for "salient_span").
  """

  def __init__(self, config: ExamplesConfig, tagger: Optional[salient_span_tagger.Tagger]):
    super().__init__()
    if config.masking not in MASKINGS:
      raise ValueError(f"masking must be one of {MASKINGS}, got {config.masking!r}")
    if config.masking == "salient_span" and tagger is None:
      raise ValueError("salient_span masking needs a tagger")
    self.config = config
    self.tagger = tagger

  def expand(self, sentences):
    examples = (sentences
                | "Batch" >> beam.BatchElements(
                    min_batch_size=min(64, self.config.sentences_per_batch),
                    max_batch_size=self.config.sentences_per_batch)
                | "Examples" >> beam.ParDo(_SentencesToExamplesFn(
                    self.config, self.tagger)).with_outputs(
                        dead_letter.DEAD_LETTER, main="examples"))
    return {"examples": examples.examples,
            dead_letter.DEAD_LETTER: examples[dead_letter.DEAD_LETTER]}


def build_pipeline(pipeline: beam.Pipeline, config: ExamplesConfig,
                   tagger: Optional[salient_span_tagger.Tagger] = None,
                   verify: bool = True, read_dir: str = "") -> None:
  """Adds pipeline 2's transforms to `pipeline`; `tagger` defaults to
  `load_tagger(config.tagger)` for salient-span masking; `verify`: check the block shards;
  `read_dir`: where the blocks are read (`block_records.readable_corpus`; "": the corpus)."""
  if tagger is None and config.masking == "salient_span":
    tagger = salient_span_tagger.load_tagger(config.tagger)
  sentences = (pipeline
               | "ReadBlocks" >> block_records.ReadBlocks(read_dir or config.corpus_dir,
                                                          verify, wordpieces=False)
               | "BlocksToSentences" >> BlocksToSentences()
               | "SpreadSentences" >> beam.Reshuffle())  # tagging is the costly stage
  examples = sentences | "SentencesToExamples" >> SentencesToExamples(config, tagger)
  _ = examples["examples"] | "WriteExamples" >> wikipedia_to_blocks_lib.WriteRecords(
      config.output_dir, EXAMPLES_PREFIX, config.num_shards)
  _ = examples[dead_letter.DEAD_LETTER] | "WriteDeadLetters" >> dead_letter.WriteDeadLetters(
      config.output_dir)


def run_pipeline(pipeline: beam.Pipeline, config: ExamplesConfig,
                 tagger: Optional[salient_span_tagger.Tagger] = None) -> Dict[str, int]:
  """Verifies the corpus (block shards, or any input `Corpus.load` takes, converted once into
  its corpus form: `block_records.readable_corpus`), builds pipeline 2 on `pipeline`, runs it
  to completion, writes the examples' manifest and returns its counters.

  Raises:
    FileNotFoundError, InputError: a missing or damaged corpus (`shards.check_shards`,
      `Corpus.load`), an output directory that is a file, or no example came out.
  """
  read_dir, num_records = block_records.readable_corpus(config.corpus_dir)
  pipeline_io.check_output_dir(config.output_dir)
  pipeline_io.check_vocab_file(config.vocab_file)
  shards.remove_manifest(config.output_dir, EXAMPLES_PREFIX)
  build_pipeline(pipeline, config, tagger, verify=False, read_dir=read_dir)
  counters = pipeline_io.run(pipeline)
  pipeline_io.finish_output(
      config.output_dir, EXAMPLES_PREFIX, "examples", counters,
      dict(dataclasses.asdict(config), corpus_records=num_records), config.corpus_dir)
  return counters
