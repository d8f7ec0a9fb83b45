"""One error style for bad input and faults, in every binary and pipeline.

A user-fixable problem raises an `InputError` (or a subclass) whose message is one line:

    <path>[:<line|record|byte offset>]: <what is wrong>. <what to do>.

built with `describe`. Binaries wrap their `main` with `run_main`: an `InputError` (and the
file-system and TFRecord errors a bad path or a damaged shard raises, and an absl flag check
made in `main`) is printed as
`<binary>: <message>` on stderr and exits with status 2, without a traceback unless
`--verbosity=1` (or higher) asks for one. Anything else is a bug and keeps its traceback.
"""
import sys
import traceback
from typing import Callable, Optional, Sequence, Union

EXIT_BAD_INPUT = 2


class InputError(ValueError):
  """Bad input or a fault the user can fix; the message names the file and the fix."""


class MalformedRecordError(InputError):
  """A record of a text file (a question set, a JSONL or TSV corpus) cannot be read; the
  message names the file and line.

  Attributes:
    path: the file.
    line: the 1-based line number.
  """

  def __init__(self, path: str, line: int, reason: str):
    super().__init__(f"{path}:{line}: {reason}")
    self.path = path
    self.line = line


class EmbeddingMismatchError(InputError):
  """Block embeddings do not belong to the corpus or were not made by the doc embedder."""


def describe(path: str, problem: str, fix: str = "",
             where: Optional[Union[int, str]] = None) -> str:
  """`<path>[:<where>]: <problem>. <fix>.` on one line (newlines in the parts are flattened)."""
  location = f"{path}:{where}" if where is not None else str(path)
  text = f"{location}: {problem.rstrip('.')}."
  if fix:
    text += f" {fix.rstrip('.')}."
  return " ".join(text.split())


def one_line(error: BaseException) -> str:
  """The first line of an error's message (TensorFlow errors carry long op contexts)."""
  message = getattr(error, "message", None) or str(error) or type(error).__name__
  return message.strip().splitlines()[0] if message.strip() else type(error).__name__


def _user_error_types() -> tuple:
  types = [InputError, FileNotFoundError, FileExistsError, IsADirectoryError,
           NotADirectoryError, PermissionError]
  absl_flags = sys.modules.get("absl.flags")
  if absl_flags is not None:  # a flag check made in `main` (flags.ValidationError)
    types.append(absl_flags.Error)
  tf = sys.modules.get("tensorflow")
  if tf is not None:  # only when the binary imported it: `--help` must not import TensorFlow
    types += [tf.errors.NotFoundError, tf.errors.DataLossError, tf.errors.PermissionDeniedError]
  return tuple(types)


def run_main(name: str, main: Callable[[Sequence[str]], None],
             wording: Callable[[str], str] = lambda message: message
             ) -> Callable[[Sequence[str]], None]:
  """`main` for `absl.app.run`, turning user-fixable errors into `<name>: <message>`, exit 2;
  `wording` rewrites the message (the binaries name settings by their flags, `cli.run`)."""

  def wrapped(argv: Sequence[str]) -> None:
    try:
      main(argv)
    except Exception as e:  # pylint: disable=broad-except
      if not isinstance(e, _user_error_types()):
        raise
      from absl import logging  # pylint: disable=g-import-not-at-top
      if logging.get_verbosity() >= 1:
        traceback.print_exc()
      print(f"{name}: {wording(one_line(e))}", file=sys.stderr, flush=True)
      sys.exit(EXIT_BAD_INPUT)

  return wrapped
