"""Which GPUs a realm_tf process takes, and how it takes their memory.

TensorFlow maps nearly all of a GPU's memory at the first op, so a second process on the same
host (the asynchronous index builder beside the trainer) would find none left: every realm_tf
binary (`cli.run`, before `main`) sets `TF_FORCE_GPU_ALLOW_GROWTH` (`grow_gpu_memory`), which
TensorFlow's GPU allocator reads, so the process and the processes it starts grow their GPU
memory as they need it. A process may also be placed on the CPU alone or on one GPU
(`use_gpus`: the index builder's `--device`, passed by the trainer's `--builder_args`).
"""
import os
from typing import List, MutableMapping, Optional

from absl import logging

from realm_tf import errors

DEVICE_HELP = ("Where this process computes: '' every GPU it sees (memory grown as needed), "
               "'cpu' no GPU, 'gpu:N' the N-th GPU alone.")


GROWTH_VARIABLE = "TF_FORCE_GPU_ALLOW_GROWTH"


def grow_gpu_memory(environ: Optional[MutableMapping[str, str]] = None) -> None:
  """Sets `TF_FORCE_GPU_ALLOW_GROWTH=true` in `environ` (default `os.environ`) unless the user
  set it: read by TensorFlow when it starts its GPUs, so set before any op runs."""
  environ = os.environ if environ is None else environ
  environ.setdefault(GROWTH_VARIABLE, "true")


def check_device(device: str) -> Optional[int]:
  """`device` ('', 'cpu' or 'gpu:N') as the GPU index it names (-1: none, None: all).

  Raises:
    ValueError: any other value.
  """
  if not device:
    return None
  if device == "cpu":
    return -1
  name, _, number = device.partition(":")
  if name != "gpu" or not number.isdigit():
    raise ValueError(f"device must be '', 'cpu' or 'gpu:N', got {device!r}")
  return int(number)


def valid_device(device: str) -> bool:
  """Whether `check_device` takes `device` (the `--device` flag's validator)."""
  try:
    check_device(device)
  except ValueError:
    return False
  return True


def use_gpus(device: str = "", config=None) -> List[str]:
  """Makes the GPUs `device` names visible (all, none or one; see `check_device`) with memory
  growth on each; returns their names. A no-op (logged) where TensorFlow has started its GPUs
  already. `config`: `tf.config` (tests pass a fake).

  Raises:
    errors.InputError: a GPU this host does not have.
    ValueError: `device` not of the form `check_device` takes.
  """
  chosen = check_device(device)
  if config is None:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top  (after flag parsing)
    config = tf.config
  gpus = config.list_physical_devices("GPU")
  if chosen is not None and chosen >= len(gpus):
    raise errors.InputError(errors.describe(
        f"--device={device}", f"this host has {len(gpus)} GPUs",
        "Pass --device=cpu, or gpu:N with N below the number of GPUs"))
  visible = gpus if chosen is None else gpus[chosen:chosen + 1] if chosen >= 0 else []
  try:
    if chosen is not None:
      config.set_visible_devices(visible, "GPU")
    for gpu in visible:
      config.experimental.set_memory_growth(gpu, True)
  except RuntimeError as e:  # GPUs initialised already (a library caller ran an op first)
    logging.warning("GPU settings not applied: %s", e)
  return [gpu.name for gpu in visible]
