"""Reading and writing TF1 name-based checkpoints into variable maps, with strict checking.

Every expected name must be present with exactly the model's shape, and every checkpoint
variable must be consumed or deliberately ignored (optimizer slots, `global_step`, heads the layout does not
use); otherwise `CheckpointMismatchError` lists all the offenders at once. An optional part (a
pre-training head that some checkpoints lack) is loaded with `if_present=True`: a checkpoint
with none of its names leaves it as it is.

Shapes are compared exactly. The one reshape allowed is the released layout of the attention
projections: TF1 BERT stores the query/key/value kernels as [H, heads * head_dim] and their
biases as [heads * head_dim], the output kernel as [heads * head_dim, H], where Model Garden has
[H, heads, head_dim], [heads, head_dim] and [heads, head_dim, H] (same element order). A kernel
stored transposed ([intermediate, H] for [H, intermediate]) is a mismatch, not a reshape.
"""
import os
import re
from typing import Callable, Dict, Iterable, List, Mapping, Sequence, Tuple

import numpy as np
import tensorflow as tf

from realm_tf import errors
from realm_tf.checkpoints import tf2_checkpoint
from realm_tf.checkpoints.variable_maps import VariableMap

# Optimizer state in the released checkpoints: never model weights.
OPTIMIZER_STATE = (r"(^|/)adam_[mv]$", r"(^|/)Adam(WeightDecayOptimizer)?(_\d+)?$",
                   r"^global_step$")


class CheckpointMismatchError(errors.InputError):
  """The checkpoint does not fit the model: a one-line summary naming the checkpoint and the
  first problem, then every problem on its own line."""


def allowed_shapes(name: str, model_shape: Sequence[int]) -> List[Tuple[int, ...]]:
  """The checkpoint shapes that load into a model variable of `model_shape` under TF1 `name`:
  the model's own, and for attention projections the TF1 layout (see the module docstring)."""
  shape = tuple(int(d) for d in model_shape)
  allowed = [shape]
  if re.search(r"attention/self/(query|key|value)/kernel$", name) and len(shape) == 3:
    allowed.append((shape[0], shape[1] * shape[2]))
  elif re.search(r"attention/self/(query|key|value)/bias$", name) and len(shape) == 2:
    allowed.append((shape[0] * shape[1],))
  elif re.search(r"attention/output/dense/kernel$", name) and len(shape) == 3:
    allowed.append((shape[0] * shape[1], shape[2]))
  return allowed


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
    found = tuple(int(d) for d in shapes[name])
    for variable in variables:
      if found not in allowed_shapes(name, variable.shape.as_list()):
        mismatched.append(f"{name}: checkpoint {list(found)} vs model "
                          f"{variable.shape.as_list()} ({variable.name})")
  unexpected = sorted(n for n in shapes if n not in variable_map and
                      not any(re.search(p, n) for p in ignore))
  if missing or mismatched or unexpected:
    problems = (("missing from the checkpoint", missing), ("shape mismatch", mismatched),
                ("unexpected in the checkpoint", unexpected))
    title, names = next(p for p in problems if p[1])
    count = len(missing) + len(mismatched) + len(unexpected)
    lines = [errors.describe(
        source, f"checkpoint does not fit the model ({title}: {names[0]}; {count} problem"
        f"{'s' if count > 1 else ''} in all, listed below)",
        "Load it into a model of the checkpoint's own configuration (encoder size, vocabulary, "
        "heads) with the loader of its layout, or convert it to the model's layout")]
    for title, names in problems:
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
    CheckpointMismatchError: missing, mis-shaped (any shape but the model's or its allowed
      TF1 attention layout) or unexpected variables (all listed).
    FileNotFoundError: no checkpoint at `path`.
  """
  resolved = tf.train.latest_checkpoint(path) if os.path.isdir(path) else path
  try:
    reader = tf.train.load_checkpoint(resolved or path)
  except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as e:
    raise FileNotFoundError(
        f"No readable TF checkpoint at {path} ({errors.one_line(e)}). Pass the prefix of a "
        "complete checkpoint (e.g. .../model.ckpt-N); copy or download it again if it was cut "
        "short.") from e
  return _check_and_assign(path, reader.get_variable_to_shape_map(),
                           tf2_checkpoint.tensor_getter(reader, resolved or path), variable_map,
                           ignore, if_present)


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
