"""Shared by the TF Hub export tests: a script run in a fresh interpreter that cannot import
realm_tf, so that an export must load with TensorFlow, tensorflow_hub and tensorflow_text
alone. The body reads its arguments and fills `out` {name: array}; the script saves `out` to
`out_path` (.npz, strings as bytes)."""
import textwrap

_OPENING = textwrap.dedent("""
    import json, sys
    import numpy as np

    class NoRealm:
      def find_spec(self, name, path=None, target=None):
        if name == "realm_tf" or name.startswith("realm_tf."):
          raise ImportError("realm_tf must not be needed to load the exports")
        return None

    sys.meta_path.insert(0, NoRealm())
    import tensorflow as tf
    import tensorflow_hub as hub
    import tensorflow_text  # registers the tokenizer ops
""")
_CLOSING = textwrap.dedent("""
    assert not any(name.startswith("realm_tf") for name in sys.modules)
    arrays = {k: np.asarray(v) for k, v in out.items()}
    np.savez(out_path, **{k: a.astype(bytes) if a.dtype == object else a
                          for k, a in arrays.items()})
""")


def script(body: str) -> str:
  """The fresh process's script around `body` (indented source, dedented here)."""
  return _OPENING + textwrap.dedent(body) + _CLOSING
