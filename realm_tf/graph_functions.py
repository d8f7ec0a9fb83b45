"""`tf.function` and `tf.data` functions without AutoGraph: how realm_tf traces its code.

realm_tf's traced code branches and loops only on Python values (tensor-dependent control flow is
written as `tf.where`, `tf.cond` or `tf.while_loop`), so AutoGraph's source conversion changes
nothing in the graphs. It is not free: the first trace of a Keras BERT in a process converts
every layer's source, and each later trace runs the converted code; each binary, worker and
test process paid it again (docs/decisions.md).
"""
from typing import Callable, Optional

import tensorflow as tf


def function(func: Optional[Callable] = None, **kwargs):
  """`tf.function(func, autograph=False, **kwargs)`; also a decorator, with or without
  arguments."""
  return tf.function(func, autograph=False, **kwargs)


def dataset_fn(func: Callable) -> Callable:
  """`func` marked for `tf.data.Dataset.map`/`flat_map`/`filter` not to convert."""
  return tf.autograph.experimental.do_not_convert(func)
