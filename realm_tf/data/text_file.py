"""A user's text file read whole as UTF-8, with one-line errors that name the file and the fix.

A byte-order mark (editors on Windows) is skipped; a byte that is not UTF-8 is named by its line
and its offset in the file.
"""
import tensorflow as tf

from realm_tf import errors


def read_text_file(path: str, what: str, fix: str) -> str:
  """The text of `path` (any `tf.io.gfile` path).

  Raises:
    errors.InputError: `path` is a directory ("is a directory, not `what`", then `fix`).
    errors.MalformedRecordError: the file is not UTF-8 (its line and byte).
  """
  if tf.io.gfile.isdir(path):
    raise errors.InputError(errors.describe(path, f"is a directory, not {what}", fix))
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  try:
    return data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise errors.MalformedRecordError(
        path, line, f"not UTF-8 (byte {e.start} of the file, {data[e.start:e.start + 1]!r}). "
        "Save the file as UTF-8") from e
