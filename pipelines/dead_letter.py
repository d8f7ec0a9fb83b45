"""The dead-letter output: records a pipeline could not process, with where and why.

Every stage that can fail on a record emits a dead letter on the tagged output `DEAD_LETTER`
instead of raising, so one bad page never fails a 13M-block job. Dead letters are written as
JSON lines, `dead_letter-SSSSS-of-NNNNN.jsonl` in the pipeline's output directory:

    {"source": "enwiki-...-pages-articles1.xml.bz2", "offset": 3581, "title": "Anarchism",
     "stage": "clean_wikitext", "reason": "..."}

`offset` is the byte offset of the page in the decompressed dump, the 1-based line of a JSONL
input, or the block id for stages that work on blocks.
"""
import json
import os
from typing import Any, Dict

import apache_beam as beam

from pipelines import beam_runner

DEAD_LETTER = "dead_letter"
FILE_PREFIX = "dead_letter"
FILE_SUFFIX = ".jsonl"
SHARD_TEMPLATE = "-SSSSS-of-NNNNN"
_MAX_TITLE_CHARS = 512
_MAX_REASON_CHARS = 2000


def _utf8(text: Any) -> str:
  """`text` as UTF-8-encodable text: a lone surrogate (a JSONL record's `"\\ud800"`) becomes
  its escape, which Beam's coders and the dead-letter file can carry."""
  return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


def dead_letter(source: str, offset: int, title: str, stage: str, reason: str) -> Dict[str, Any]:
  """A dead-letter record (a JSON-serialisable dict of UTF-8-encodable strings)."""
  return {"source": _utf8(source), "offset": int(offset),
          "title": _utf8(title)[:_MAX_TITLE_CHARS], "stage": str(stage),
          "reason": _utf8(reason)[:_MAX_REASON_CHARS]}


def tagged(source: str, offset: int, title: str, stage: str,
           reason: str) -> beam.pvalue.TaggedOutput:
  """`dead_letter(...)` on the `DEAD_LETTER` output of a DoFn."""
  return beam.pvalue.TaggedOutput(DEAD_LETTER, dead_letter(source, offset, title, stage, reason))


class WriteDeadLetters(beam.PTransform):
  """Writes dead letters as JSONL shards `<output_dir>/dead_letter-SSSSS-of-NNNNN.jsonl`,
  counting them in the `dead_letters` counter.

  Args:
    output_dir: the pipeline's output directory.
    num_shards: number of shards (0: the runner decides).
  """

  def __init__(self, output_dir: str, num_shards: int = 1):
    super().__init__()
    self.output_dir = output_dir
    self.num_shards = num_shards

  def expand(self, dead_letters):
    written = beam_runner.counter("dead_letters")

    def to_json(record):
      written.inc()
      return json.dumps(record, ensure_ascii=False, sort_keys=True)

    return (dead_letters
            | "ToJson" >> beam.Map(to_json)
            | "Write" >> beam.io.WriteToText(
                os.path.join(self.output_dir, FILE_PREFIX), file_name_suffix=FILE_SUFFIX,
                num_shards=self.num_shards, shard_name_template=SHARD_TEMPLATE))
