"""Reading and writing TF1 name-based checkpoints into variable maps, with strict checking.

Every expected name must be present with a compatible size, and every checkpoint variable must
be consumed or deliberately ignored (optimizer slots, `global_step`, heads the layout does not
use); otherwise `CheckpointMismatchError` lists all the offenders at once. An optional part (a
pre-training head that some checkpoints lack) is loaded with `if_present=True`: a checkpoint
with none of its names leaves it as it is.
"""
import os
import re
from typing import Callable, Dict, Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from realm_tf.checkpoints.variable_maps import VariableMap

# Optimizer state in the released checkpoints: never model weights.
OPTIMIZER_STATE = (r"(^|/)adam_[mv]$", r"(^|/)Adam(WeightDecayOptimizer)?(_\d+)?$",
                   r"^global_step$")


class CheckpointMismatchError(ValueError):
  """The checkpoint does not fit the model; the message lists every problem."""


def _check_and_assign(source: str, shapes: Mapping[str, Sequence[int]],
                      get_value: Callable[[str], np.ndarray], variable_map: VariableMap,
                      ignore: Iterable[str], if_present: bool = False) -> bool:
  if if_present and not any(n in shapes for n in variable_map):
    return False
  ignore = tuple(OPTIMIZER_STATE) + tuple(ignore)
  missing = sorted(n for n in variable_map if n not in shapes)
  mismatched = []
  for name, variables in sorted(variable_map.items()):
    if name not in shapes:
      continue
    for variable in variables:
      if int(np.prod(shapes[name])) != int(np.prod(variable.shape)):
        mismatched.append(f"{name}: checkpoint {list(shapes[name])} vs model "
                          f"{variable.shape.as_list()} ({variable.name})")
  unexpected = sorted(n for n in shapes if n not in variable_map and
                      not any(re.search(p, n) for p in ignore))
  if missing or mismatched or unexpected:
    lines = [f"Checkpoint {source} does not fit the model:"]
    for title, names in (("missing from the checkpoint", missing),
                         ("shape mismatch", mismatched),
                         ("unexpected in the checkpoint", unexpected)):
      if names:
        lines.append(f"  {title} ({len(names)}):")
        lines.extend(f"    {n}" for n in names)
    raise CheckpointMismatchError("\n".join(lines))
  for name, variables in variable_map.items():
    value = np.asarray(get_value(name))
    for variable in variables:
      variable.assign(value.reshape(variable.shape).astype(variable.dtype.as_numpy_dtype))
  return True


def load_tf1_checkpoint(path: str, variable_map: VariableMap, ignore: Iterable[str] = (),
                        if_present: bool = False) -> bool:
  """Assigns the variables of `variable_map` from the TF1 checkpoint at `path`.

  Args:
    path: checkpoint prefix (e.g. `.../model.ckpt-100000`) or a directory holding one.
    variable_map: {tf1_name: [variables]} from `variable_maps`.
    ignore: regular expressions of checkpoint names that may stay unused.
    if_present: when the checkpoint holds none of `variable_map`'s names, assign nothing and
      return False instead of listing them all as missing.

  Returns:
    Whether the variables were assigned (always True unless `if_present`).

  Raises:
    CheckpointMismatchError: missing, mis-shaped or unexpected variables (all listed).
    FileNotFoundError: no checkpoint at `path`.
  """
  resolved = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
  try:
    reader = tf.train.load_checkpoint(resolved or path)
  except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
    raise FileNotFoundError(f"No readable TF checkpoint at {path}: {e}") from e
  return _check_and_assign(path, reader.get_variable_to_shape_map(), reader.get_tensor,
                           variable_map, ignore, if_present)


def load_arrays(source: str, arrays: Mapping[str, np.ndarray], variable_map: VariableMap,
                ignore: Iterable[str] = (), if_present: bool = False) -> bool:
  """Like `load_tf1_checkpoint` for in-memory arrays keyed by TF1 names (`source` names them
  in errors)."""
  return _check_and_assign(source, {n: a.shape for n, a in arrays.items()}, arrays.__getitem__,
                           variable_map, ignore, if_present)


def tf1_arrays(variable_map: VariableMap,
               tf1_shapes: Mapping[str, Sequence[int]] = None) -> Dict[str, np.ndarray]:
  """Current values under their TF1 names, in TF1 shapes (attention kernels as [H, H]).

  `tf1_shapes` overrides the default rule: 2-D for kernels and 1-D for everything else of
  an attention projection; other variables keep their shape.
  """
  arrays = {}
  for name, variables in variable_map.items():
    value = variables[0].numpy()
    if tf1_shapes and name in tf1_shapes:
      value = value.reshape(tf1_shapes[name])
    elif re.search(r"attention/self/(query|key|value)/kernel$", name):
      value = value.reshape(value.shape[0], -1)
    elif re.search(r"attention/output/dense/kernel$", name):
      value = value.reshape(-1, value.shape[-1])
    elif re.search(r"attention/self/(query|key|value)/bias$", name):
      value = value.reshape(-1)
    arrays[name] = value
  return arrays


def write_tf1_checkpoint(arrays: Mapping[str, np.ndarray], path: str) -> str:
  """Writes `arrays` as a TF1 name-based checkpoint at prefix `path`; returns the prefix."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with tf.Graph().as_default():
    variables = {name: tf.compat.v1.Variable(value, name=name.replace(":", "_"))
                 for name, value in arrays.items()}
    saver = tf.compat.v1.train.Saver(var_list=variables, write_version=tf.compat.v1.train.SaverDef.V2)
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      return saver.save(session, path, write_meta_graph=False, write_state=True)
