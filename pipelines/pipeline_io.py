"""What every pipeline checks before it starts and does after it ran: input files that exist
and can be read, an output directory that is not a file, the shards' manifest
(`realm_tf.data.shards`), and an error (`InputError`, one line naming the file) instead of a
misleading empty output or an exception wrapped by the runner.
"""
import os
import re
from typing import Any, Dict, List

from absl import logging
import apache_beam as beam
from apache_beam.io import filesystem
from apache_beam.io import filesystems
import tensorflow as tf

from pipelines import beam_runner
from pipelines import dead_letter
from realm_tf import errors
from realm_tf.data import shards
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

_WHILE_RUNNING = re.compile(r" \[while running '[^']*'\]")
_WRAPPED = re.compile(r"(?:InputError|ShardError|IndexBuildError|DataLossError)[^:\n]*: ([^\n]+)")


def check_input_files(patterns: List[str], what: str = "--input") -> List[str]:
  """The files `patterns` match; raises FileNotFoundError / InputError naming the pattern or
  file if one matches nothing, or a file is a directory, empty or unreadable."""
  paths = []
  for pattern in patterns:
    matched = [m.path for m in filesystems.FileSystems.match([pattern])[0].metadata_list]
    if not matched:
      raise FileNotFoundError(errors.describe(
          pattern, f"no such file ({what} matches nothing)", "Check the path or pattern"))
    for path in sorted(matched):
      if tf.io.gfile.isdir(path):
        raise errors.InputError(errors.describe(
            path, f"is a directory, not a file ({what})",
            f"Pass the files inside it, e.g. {path.rstrip('/')}/*"))
      try:
        with filesystems.FileSystems.open(
            path, compression_type=filesystem.CompressionTypes.UNCOMPRESSED) as f:
          empty = not f.read(1)
      except (OSError, IOError) as e:
        raise errors.InputError(errors.describe(
            path, f"cannot be read ({type(e).__name__}: {errors.one_line(e)})",
            "Check its permissions")) from e
      if empty:
        raise errors.InputError(errors.describe(path, f"is empty ({what})",
                                                "Pass a non-empty file"))
      paths.append(path)
  return paths


def check_output_dir(output_dir: str, flag: str = "--output_dir") -> None:
  """Raises InputError if `output_dir` (`flag`) is empty or an existing file."""
  if not output_dir:
    raise errors.InputError(errors.describe("''", f"no {flag} given",
                                            "Pass the directory to write"))
  shards.check_output_directory(output_dir, flag)


def check_vocab_file(vocab_file: str) -> None:
  """Loads `vocab_file` ("" = MiniLM's, not checked) as the workers will: raises
  FileNotFoundError / InputError naming it if it is missing or not a BERT vocabulary."""
  if vocab_file:
    WordpieceTokenizer.from_vocab_file(vocab_file)


def output_counts(output_dir: str, prefix: str, count_name: str) -> Dict[str, int]:
  """The counts a run's outputs give without the runner's metrics: {count_name: records of the
  `<prefix>-*.tfrecord` shards, "dead_letters": lines of the dead-letter shards} (zeros
  omitted, as Beam omits counters never incremented)."""
  records = tf.io.gfile.glob(os.path.join(output_dir, f"{prefix}-*{shards.TFRECORD_SUFFIX}"))
  counts = {count_name: sum(shards.scan_shard(path, prefix).records for path in records),
            "dead_letters": 0}
  letters = os.path.join(output_dir, f"{dead_letter.FILE_PREFIX}-*{dead_letter.FILE_SUFFIX}")
  for path in tf.io.gfile.glob(letters):
    with tf.io.gfile.GFile(path, "rb") as f:
      counts["dead_letters"] += sum(1 for line in f if line.strip())
  return {name: value for name, value in counts.items() if value}


def finish_output(output_dir: str, prefix: str, count_name: str, counters: Dict[str, int],
                  config: Dict[str, Any], inputs: str) -> None:
  """Writes the shards' manifest; with no records, removes the empty shards this run wrote
  and raises InputError. Warns about dead letters. Empty `counters` (a runner that collects no
  metrics, e.g. DaskRunner) are filled, in place, with `output_counts`."""
  if not counters:
    counters.update(output_counts(output_dir, prefix, count_name))
  dead = counters.get("dead_letters", 0)
  letters = os.path.join(output_dir, f"{dead_letter.FILE_PREFIX}-*{dead_letter.FILE_SUFFIX}")
  if dead:
    logging.warning("%d records could not be used; they are in %s with file, offset and "
                    "reason", dead, letters)
  if not counters.get(count_name, 0):
    written = os.path.join(output_dir, f"{prefix}-*{shards.TFRECORD_SUFFIX}")
    for path in tf.io.gfile.glob(written):
      if not tf.io.gfile.stat(path).length:
        tf.io.gfile.remove(path)
    dropped = ", ".join(f"{value} {name.split('_dropped_')[1]}"
                        for name, value in sorted(counters.items())
                        if "_dropped_" in name and value)  # e.g. pages_dropped_redirect
    counts = f"{dead} dead letters" + (f"; dropped: {dropped}" if dropped else "")
    fix = (f"See why in {letters}" if dead else "Pass a dump with article pages (redirects, "
           "other namespaces and disambiguation pages are dropped)" if dropped else
           "Check the input's format")
    raise errors.InputError(errors.describe(inputs, f"no {prefix} came out ({counts})", fix))
  shards.write_manifest(output_dir, prefix, config)


def run(pipeline: beam.Pipeline) -> Dict[str, int]:
  """`beam_runner.run`, re-raising a bad-input error from inside the pipeline (which runners
  wrap or extend with the stage name) as a one-line `InputError`."""
  try:
    return beam_runner.run(pipeline)
  except Exception as e:  # pylint: disable=broad-except
    cause = e
    while cause is not None and not isinstance(cause, errors.InputError):
      cause = cause.__cause__ or cause.__context__
    if cause is not None:
      raise errors.InputError(_WHILE_RUNNING.sub("", errors.one_line(cause))) from e
    wrapped = _WRAPPED.search(str(e))
    if wrapped:
      raise errors.InputError(_WHILE_RUNNING.sub("", wrapped.group(1))) from e
    raise
