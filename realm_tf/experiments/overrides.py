"""Settings applied to a config tree: `--params_override` strings, JSON config files, flags.

    override(config, "trainer.num_steps=10,task.model.encoder=tiny")
    override(config, {"task.init.bert_weights": ""})
    override(config, read_file("experiment.json"))
    from_flags(config, {"num_steps": "trainer.num_steps"})  # a binary's absl flags

A key is a dotted path of dataclass fields; a string is parsed for the field's type (true/false,
numbers, none/null, `[a,b]` lists, JSON or bare words); a nested config given a string is a
preset (`task.model.encoder=tiny`), given a config of its type is that config. Each changed
dataclass is rebuilt once with `dataclasses.replace`, so its own checks see all its changes; an
unknown key, an ill-typed value or a refused value raises `errors.InputError` naming the key.
"""
import dataclasses
import json
import typing
from typing import Any, Dict, List, Mapping, Tuple, Union

from absl import flags
import tensorflow as tf

from realm_tf import configs
from realm_tf import errors
from realm_tf import presets
from realm_tf.training.run_config import flatten

_NONE = ("none", "null")
_BOOLS = {"true": True, "false": False, "1": True, "0": False}
_PRESETS = {configs.EncoderConfig: lambda name, current: presets.encoder_config(
    name, current.vocab_size)}


def _fail(key: str, problem: str, fix: str = "") -> errors.InputError:
  return errors.InputError(errors.describe(key, problem, fix))


def split(text: str) -> List[str]:
  """"a=1,b=[x,y],c='p,q'" -> ["a=1", "b=[x,y]", "c='p,q'"]: commas inside brackets or quotes
  do not split."""
  parts, depth, quote, start = [], 0, "", 0
  for i, char in enumerate(text):
    if quote:
      quote = "" if char == quote else quote
    elif char in "'\"":
      quote = char
    elif char == "[":
      depth += 1
    elif char == "]":
      depth -= 1
    elif char == "," and depth == 0:
      parts.append(text[start:i])
      start = i + 1
  parts.append(text[start:])
  return [part.strip() for part in parts if part.strip()]


def parse(text: str) -> Dict[str, str]:
  """`"k1=v1,k2=v2"` -> {key: raw value}, in order (quotes around a value are dropped)."""
  values = {}
  for part in split(text):
    key, sep, value = part.partition("=")
    if not sep or not key.strip():
      raise _fail(part, "not a key=value setting",
                  'Write overrides as "trainer.num_steps=10,task.model.encoder=tiny"')
    value = value.strip()
    if len(value) > 1 and value[0] == value[-1] and value[0] in "'\"":
      value = value[1:-1]
    values[key.strip()] = value
  return values


def _list(text: str) -> List[Any]:
  """"[a, b]" (JSON, or bare words) or "a" -> a list; "" -> []."""
  if not text.startswith("["):
    return [text] if text else []
  try:
    return json.loads(text)
  except json.JSONDecodeError:
    return [item.strip() for item in text.strip("[]").split(",") if item.strip()]


def _type_name(kind) -> str:
  return getattr(kind, "__name__", str(kind).replace("typing.", ""))


def _convert(key: str, kind, value: Any, current: Any) -> Any:
  """`value` as a value of type `kind` (a string is parsed), else InputError."""
  origin, args = typing.get_origin(kind), typing.get_args(kind)
  if origin is Union:
    options = [a for a in args if a is not type(None)]
    if len(options) > 1:  # `ExperimentConfig.task`: one of the task configs
      raise _fail(key, f"is a group of settings, got {value!r}",
                  f"Set its fields ({key}.<field>=...)")
    if value is None or (isinstance(value, str) and value.lower() in _NONE):
      return None  # Optional[x]
    return _convert(key, options[0], value, current)
  if origin in (tuple, list):
    if isinstance(value, str):
      value = _list(value)
    if not isinstance(value, (list, tuple)):
      raise _fail(key, f"expects a list, got {value!r}")
    return tuple(_convert(key, args[0], v, None) for v in value)
  if dataclasses.is_dataclass(kind):
    if isinstance(value, kind):  # a whole config (`task.model`: a `ModelConfig`)
      return value
    if isinstance(value, str) and kind in _PRESETS:
      try:
        return _PRESETS[kind](value, current)
      except ValueError as e:
        raise _fail(key, str(e)) from e
    raise _fail(key, f"is a group of settings, got {value!r}",
                f"Set its fields ({key}.<field>=...)")
  if kind is bool:
    if isinstance(value, str) and value.lower() in _BOOLS:
      return _BOOLS[value.lower()]
    if isinstance(value, bool):
      return value
  elif kind in (int, float):
    if isinstance(value, str):
      try:
        return kind(value)
      except ValueError:
        pass
    elif isinstance(value, (int, float)) and not isinstance(value, bool) and (
        kind is float or float(value).is_integer()):
      return kind(value)
  elif kind is str and isinstance(value, str):
    return value
  raise _fail(key, f"expects {_type_name(kind)}, got {value!r}")


_UNSET = object()
# Settings that moved, under their older keys (experiment.json files of earlier runs use them).
_MOVED = {"task.scann.shard_size": "task.sharding.shard_size"}


@dataclasses.dataclass
class _Node:
  """The settings of one config: its own value (a preset) and its fields' settings."""
  value: Any = _UNSET
  children: Dict[str, "_Node"] = dataclasses.field(default_factory=dict)


def _apply(config: Any, node: _Node, prefix: str) -> Any:
  """`config` with `node`'s settings, rebuilt once (its checks see every change together)."""
  fields = [f.name for f in dataclasses.fields(config)]
  changes = {}
  for name, child in node.children.items():
    key = prefix + name
    if name not in fields:
      raise _fail(key, f"not a setting of {type(config).__name__}",
                  f"Known: {', '.join(prefix + f for f in fields)}")
    value = getattr(config, name)
    if child.value is not _UNSET:
      value = _convert(key, typing.get_type_hints(type(config))[name], child.value, value)
    if child.children:
      if not dataclasses.is_dataclass(value):
        raise _fail(key + "." + next(iter(child.children)),
                    f"{name} is a setting, not a group of settings")
      value = _apply(value, child, key + ".")
    changes[name] = value
  try:
    return dataclasses.replace(config, **changes)
  except ValueError as e:  # the config's own checks
    raise _fail(", ".join(prefix + name for name in changes), errors.one_line(e)) from e


def override(config: Any, values: Union[str, Mapping[str, Any]]) -> Any:
  """`config` with `values` ({dotted key: value} or a "k1=v1,k2=v2" string) applied; a preset
  (`task.model.encoder=tiny`) comes before its fields' settings. A key of `_MOVED` sets the
  setting it moved to."""
  if isinstance(values, str):
    values = parse(values)
  root = _Node()
  for key, value in values.items():
    key = _MOVED.get(key, key)
    node = root
    for part in key.split("."):
      node = node.children.setdefault(part, _Node())
    node.value = value
  return _apply(config, root, "")


def from_flags(config: Any, settings: Mapping[str, Union[str, Tuple[str, ...]]]) -> Any:
  """`config` with each absl flag of `settings` ({flag: setting or settings}) applied, in
  order; a flag left at None keeps the config's value (a binary's flags onto its experiment)."""
  values = {}
  for flag, keys in settings.items():
    value = flags.FLAGS[flag].value
    if value is not None:
      values.update({key: value for key in (keys if isinstance(keys, tuple) else (keys,))})
  return override(config, values)


def to_dict(config: Any) -> Dict[str, Any]:
  """The config tree as JSON-ready nested dicts."""
  return json.loads(json.dumps(dataclasses.asdict(config)))


def read_file(path: str) -> Dict[str, Any]:
  """The JSON object of settings in `path` (nested or dotted keys), flattened."""
  try:
    with tf.io.gfile.GFile(path, "r") as f:
      values = json.load(f)
  except json.JSONDecodeError as e:
    raise errors.InputError(errors.describe(path, f"not JSON ({e.msg})", where=e.lineno)) from e
  if not isinstance(values, dict):
    raise errors.InputError(errors.describe(path, "is not a JSON object of settings"))
  return flatten(values)


def write_file(config: Any, path: str, **extra: Any) -> None:
  """Writes `config` (and `extra` top-level keys) to `path` as indented JSON."""
  with tf.io.gfile.GFile(path, "w") as f:
    json.dump(dict(extra, **to_dict(config)), f, indent=2)
    f.write("\n")
