"""Object-based (TF2) checkpoints of this package's runs, restored with a check that every
model variable took a value (a tower the checkpoint never held would stay at its random
initialisation): every trainer's resume (`realm_tf.training.train_loop`), a pre-training
checkpoint as Open-QA's initialisation (`realm_tf.presets.initialize`) and QA model
directories (`realm_tf.qa.model`)."""
from typing import Callable

import numpy as np
import tensorflow as tf

from realm_tf import errors

# What reading a truncated or damaged checkpoint raises (a cut .data-* file: IndexError).
_DAMAGE = (IndexError, tf.errors.DataLossError, tf.errors.OutOfRangeError)


def damaged(path: str, error: BaseException) -> errors.InputError:
  """The error of checkpoint `path`, whose files are truncated or damaged."""
  return errors.InputError(errors.describe(
      path, f"truncated or damaged checkpoint ({errors.one_line(error)[:200]})",
      "Restore its files (.index, .data-*) from a good copy, or resume from an earlier "
      "checkpoint"))


def tensor_getter(reader, path: str) -> Callable[[str], np.ndarray]:
  """`reader.get_tensor` of `tf.train.load_checkpoint(path)`, raising `damaged(path)` where
  the checkpoint's data is truncated or damaged (any checkpoint, TF1 ones included)."""

  def get(name: str) -> np.ndarray:
    try:
      return reader.get_tensor(name)
    except _DAMAGE as e:
      raise damaged(path, e) from e

  return get


def restore_checked(checkpoint: tf.train.Checkpoint, path: str, read: bool = False):
  """Restores (or, with `read`, reads) `path` into `checkpoint` and verifies that every
  existing model variable took a value; values the program does not use may stay unread.

  Raises:
    errors.InputError: a variable of the program is not in the checkpoint or has another
      shape there (another vocabulary), or the checkpoint is truncated or damaged.
  """
  try:
    status = (checkpoint.read(path) if read else checkpoint.restore(path)).expect_partial()
  except _DAMAGE as e:
    raise damaged(path, e) from e
  except ValueError as e:  # a variable of another shape: another vocabulary or encoder size
    raise errors.InputError(errors.describe(
        path, f"the checkpoint does not fit the model ({errors.one_line(e)[:300]})",
        "Restore it into a model of the configuration it was trained with (vocabulary, "
        "encoder size)")) from e
  try:
    status.assert_existing_objects_matched()
  except AssertionError as e:
    detail = " ".join(str(e).split())
    raise errors.InputError(errors.describe(
        path, f"the checkpoint does not hold every variable of the model, which would stay "
        f"at its random initialisation ({detail[:400]}{'...' if len(detail) > 400 else ''})",
        "Restore it into a model of the configuration it was trained with")) from e
  return status
