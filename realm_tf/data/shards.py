"""Counted, checksummed TFRecord shards: the manifest a pipeline writes beside its output, and
the check a reader makes before it trusts a directory of shards.

Beside `<prefix>-SSSSS-of-NNNNN.tfrecord` a pipeline writes, last, `<prefix>.manifest.json`:
`{"format_version": 1, "prefix", "producer", "num_shards", "num_records", "config",
"shards": [{"name", "records", "bytes", "crc32c"}, ...]}`.

`check_shards(directory, prefix)` reads every shard once and raises `ShardError` naming the
shard: a corrupt or truncated record, a missing shard of its `-of-N` set, mixed sets, and a
shard missing from, unlisted in or differing from the manifest. Shards without a manifest (a
user's own) cannot be shown complete: they are read with a warning, or refused where the
reader asks (`allow_unverified=False`), and refused when they hold no record.
"""
import dataclasses
import json
import os
import re
import struct
from typing import Any, Dict, List, Mapping, Optional

from absl import logging
import google_crc32c
import tensorflow as tf

from realm_tf import errors

FORMAT_VERSION = 1
MANIFEST_SUFFIX = ".manifest.json"
TFRECORD_SUFFIX = ".tfrecord"
PRODUCERS = {"blocks": "pipelines.wikipedia_to_blocks",
             "examples": "pipelines.pretraining_examples",
             "embeddings": "pipelines.build_index"}
_HEADER = 12  # uint64 length, uint32 masked crc32c of the length
_FOOTER = 4  # uint32 masked crc32c of the data
_CHUNK = 1 << 24
_MASK_DELTA = 0xA282EAD8


class ShardError(errors.InputError):
  """A shard is missing, damaged, or disagrees with its directory's manifest."""


@dataclasses.dataclass(frozen=True)
class ShardInfo:
  """One shard: its file name, record count, size in bytes and crc32c (hex) of its bytes."""
  name: str
  records: int
  bytes: int
  crc32c: str


@dataclasses.dataclass(frozen=True)
class ShardSet:
  """The verified shards of a directory, in name order; `manifest` is None without one."""
  directory: str
  prefix: str
  files: List[str]
  num_records: int
  manifest: Optional[Dict[str, Any]]


def manifest_path(directory: str, prefix: str) -> str:
  return os.path.join(directory, prefix + MANIFEST_SUFFIX)


def _fix(prefix: str) -> str:
  producer = PRODUCERS.get(prefix)
  rerun = f"rerun python -m {producer} into an empty directory" if producer else "rewrite it"
  return f"Restore the shard from a good copy or {rerun}"


def _masked_crc(data: bytes) -> int:
  crc = google_crc32c.value(data)
  return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & 0xFFFFFFFF


def scan_shard(path: str, prefix: str = "") -> ShardInfo:
  """Reads one TFRecord shard, checking its framing and every checksum.

  Raises:
    ShardError: a truncated or corrupted record, named by index and byte offset.
  """
  checksum = google_crc32c.Checksum()
  state = {"buffer": b"", "base": 0, "eof": False, "size": 0}  # base: file offset of buffer[0]
  records, pos = 0, 0  # pos: of the current record in the buffer

  def fail(problem: str):
    raise ShardError(errors.describe(path, problem, _fix(prefix),
                                     where=f"record {records} (byte {state['base'] + pos})"))

  def fill(f, need: int) -> int:
    """Reads until `need` bytes from `pos` are buffered or the file ends; returns the new pos."""
    nonlocal pos
    while len(state["buffer"]) - pos < need and not state["eof"]:
      chunk = f.read(max(_CHUNK, need))
      state["eof"] = not chunk
      checksum.update(chunk)
      state["size"] += len(chunk)
      state["base"] += pos
      state["buffer"] = state["buffer"][pos:] + chunk
      pos = 0
    return len(state["buffer"]) - pos

  with tf.io.gfile.GFile(path, "rb") as f:
    while fill(f, _HEADER):
      buffer = state["buffer"]
      if len(buffer) - pos < _HEADER:
        fail(f"truncated record: the shard ends {len(buffer) - pos} bytes into a record header")
      length, length_crc = struct.unpack_from("<QI", buffer, pos)
      if _masked_crc(buffer[pos:pos + 8]) != length_crc:
        fail("corrupted record: its length header fails its checksum")
      end = _HEADER + length + _FOOTER
      available = fill(f, end)
      buffer = state["buffer"]
      if available < end:
        fail(f"truncated record: the shard ends {available} bytes into a record of {end} bytes")
      (data_crc,) = struct.unpack_from("<I", buffer, pos + _HEADER + length)
      if _masked_crc(buffer[pos + _HEADER:pos + _HEADER + length]) != data_crc:
        fail("corrupted record: its data fails its checksum")
      records += 1
      pos += end
  return ShardInfo(os.path.basename(path), records, state["size"], checksum.digest().hex())


def write_manifest(directory: str, prefix: str, config: Optional[Mapping[str, Any]] = None,
                   producer: str = "") -> Dict[str, Any]:
  """Scans the `<prefix>-*.tfrecord` shards of `directory` and writes their manifest.

  Returns:
    the manifest.

  Raises:
    ShardError: a damaged shard, or shards of several runs (different `-of-N` sets).
  """
  files = _shard_files(directory, prefix)
  _check_shard_count(directory, prefix, files)
  shards = [dataclasses.asdict(scan_shard(path, prefix)) for path in files]
  manifest = {"format_version": FORMAT_VERSION, "prefix": prefix,
              "producer": producer or PRODUCERS.get(prefix, ""),
              "num_shards": len(shards), "num_records": sum(s["records"] for s in shards),
              "config": json.loads(json.dumps(dict(config or {}), default=str)),
              "shards": shards}
  path = manifest_path(directory, prefix)
  tmp = f"{path}.tmp"
  with tf.io.gfile.GFile(tmp, "w") as f:
    json.dump(manifest, f, indent=1, sort_keys=True)
    f.write("\n")
  tf.io.gfile.rename(tmp, path, overwrite=True)
  return manifest


def remove_manifest(directory: str, prefix: str) -> None:
  """Removes the manifest of `directory` (before a pipeline rewrites its shards)."""
  path = manifest_path(directory, prefix)
  if tf.io.gfile.exists(path):
    tf.io.gfile.remove(path)


def check_directory(directory: str, what: str, fix: str) -> None:
  """Raises FileNotFoundError / InputError unless `directory` is an existing directory;
  `what` says what it should be ("a directory of blocks-*.tfrecord shards")."""
  if not directory:
    raise errors.InputError(errors.describe("''", f"empty path, expected {what}", fix))
  if tf.io.gfile.isdir(directory):
    return
  if tf.io.gfile.exists(directory):
    raise errors.InputError(errors.describe(directory, f"is a file, not {what}", fix))
  raise FileNotFoundError(errors.describe(directory, f"no such directory (expected {what})",
                                          fix))


def check_output_directory(directory: str, flag: str, fix: str = "Pass a directory") -> None:
  """Raises InputError if `directory`, which `flag` names as a directory to write, is a file."""
  if tf.io.gfile.exists(directory) and not tf.io.gfile.isdir(directory):
    raise errors.InputError(errors.describe(directory, f"is a file, not a directory ({flag})",
                                            fix))


def _shard_files(directory: str, prefix: str) -> List[str]:
  check_directory(directory, f"a directory of {prefix}-*{TFRECORD_SUFFIX} shards",
                  f"Pass the directory that python -m {PRODUCERS.get(prefix, '...')} wrote")
  files = sorted(tf.io.gfile.glob(os.path.join(directory, f"{prefix}-*{TFRECORD_SUFFIX}")))
  if not files:
    raise FileNotFoundError(errors.describe(
        directory, f"no {prefix}-*{TFRECORD_SUFFIX} shards",
        f"Pass the directory that python -m {PRODUCERS.get(prefix, '...')} wrote"))
  return files


def _check_shard_count(directory: str, prefix: str, files: List[str]) -> None:
  """Raises ShardError for a missing shard of an `-of-N` set or mixed sets."""
  pattern = re.compile(rf"^{re.escape(prefix)}-(\d+)-of-(\d+){re.escape(TFRECORD_SUFFIX)}$")
  numbered = {}
  for path in files:
    match = pattern.match(os.path.basename(path))
    if match:
      numbered.setdefault(int(match.group(2)), set()).add(int(match.group(1)))
  if len(numbered) > 1:
    counts = ", ".join(f"-of-{n:05d}" for n in sorted(numbered))
    raise ShardError(errors.describe(
        directory, f"{prefix} shards of different sets ({counts}): output of several runs",
        f"Keep one run's shards, or rerun python -m {PRODUCERS.get(prefix, '...')} into an "
        "empty directory"))
  for total, present in numbered.items():
    missing = sorted(set(range(total)) - present)
    if missing:
      name = f"{prefix}-{missing[0]:05d}-of-{total:05d}{TFRECORD_SUFFIX}"
      raise ShardError(errors.describe(
          os.path.join(directory, name),
          f"missing: shard {missing[0] + 1} of {total} ({len(missing)} of {total} missing)",
          _fix(prefix)))


def _read_manifest(directory: str, prefix: str) -> Optional[Dict[str, Any]]:
  path = manifest_path(directory, prefix)
  if not tf.io.gfile.exists(path):
    return None
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      manifest = json.load(f)
    shards = manifest["shards"]
    for shard in shards:
      _ = (shard["name"], int(shard["records"]), int(shard["bytes"]), str(shard["crc32c"]))
  except (ValueError, KeyError, TypeError) as e:
    raise ShardError(errors.describe(
        path, f"not a valid shard manifest ({type(e).__name__}: {e})",
        f"Delete it to read the shards unchecked, or {_fix(prefix)[0].lower()}"
        f"{_fix(prefix)[1:]}")) from e
  return manifest


def check_shards(directory: str, prefix: str, allow_unverified: bool = True) -> ShardSet:
  """Verifies the `<prefix>-*.tfrecord` shards of `directory` (see the module docstring).

  Args:
    directory: the shards' directory.
    prefix: "blocks", "examples" or "embeddings".
    allow_unverified: shards without a manifest are read with a warning; False: refused
      (`ShardError` naming the directory and `--allow_unverified_<prefix>`).

  Raises:
    FileNotFoundError: no such directory, or no shards in it.
    InputError: `directory` is a file.
    ShardError: a missing, unlisted, damaged or miscounted shard, named with expected vs found.
  """
  files = _shard_files(directory, prefix)
  _check_shard_count(directory, prefix, files)
  manifest = _read_manifest(directory, prefix)
  found = {os.path.basename(path): path for path in files}
  if manifest is not None:
    listed = {shard["name"]: shard for shard in manifest["shards"]}
    manifest_name = os.path.basename(manifest_path(directory, prefix))
    for name in sorted(set(listed) - set(found)):
      raise ShardError(errors.describe(
          os.path.join(directory, name),
          f"missing: listed in {manifest_name} with {listed[name]['records']} records",
          _fix(prefix)))
    for name in sorted(set(found) - set(listed)):
      raise ShardError(errors.describe(
          found[name], f"not listed in {manifest_name}: a shard of another run",
          "Remove it, or rerun the pipeline into an empty directory"))
  total = 0
  for name, path in sorted(found.items()):
    info = scan_shard(path, prefix)
    total += info.records
    if manifest is None:
      continue
    want = listed[name]
    if (info.records, info.bytes) != (int(want["records"]), int(want["bytes"])):
      raise ShardError(errors.describe(
          path, f"{info.records} records ({info.bytes} bytes) found, {manifest_name} expects "
          f"{want['records']} records ({want['bytes']} bytes)", _fix(prefix)))
    if info.crc32c != want["crc32c"]:
      raise ShardError(errors.describe(
          path, f"content changed: crc32c {info.crc32c} found, {manifest_name} expects "
          f"{want['crc32c']}", _fix(prefix)))
  if manifest is None and not total:
    raise ShardError(errors.describe(
        directory, f"{len(files)} {prefix} shards without a manifest hold no records",
        _fix(prefix)))
  if manifest is None and not allow_unverified:
    raise ShardError(errors.describe(
        directory, f"no {os.path.basename(manifest_path(directory, prefix))}: nothing tells "
        f"whether its {len(files)} {prefix} shards ({total} records) are complete",
        f"Rerun python -m {PRODUCERS.get(prefix, '...')} into an empty directory, or pass "
        f"--allow_unverified_{prefix} to read them uncounted"))
  if manifest is None:
    logging.warning("%s", errors.describe(
        directory, f"no {os.path.basename(manifest_path(directory, prefix))}: read "
        f"{total} records from {len(files)} {prefix} shards without a completeness check",
        f"Shards written by python -m {PRODUCERS.get(prefix, '...')} carry one"))
  return ShardSet(directory, prefix, [found[n] for n in sorted(found)], total, manifest)
