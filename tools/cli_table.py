"""The README's "Command line" table, generated from the binaries' own flags.

    python tools/cli_table.py           # rewrite the table in README.md
    python tools/cli_table.py --check   # exit 1 when README.md's table is out of date

A binary is a `realm-*` console script of setup.cfg or a `pipelines/` module with a `run()`
entry point; each is imported in its own process (binaries define flags of the same name).
"""
import configparser
import json
import os
import subprocess
import sys
from typing import Dict, List, Tuple

import generated_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
BEGIN, END = "<!-- cli-table: begin (tools/cli_table.py) -->", "<!-- cli-table: end -->"
PIPELINES = ("pipelines.wikipedia_to_blocks", "pipelines.pretraining_examples",
             "pipelines.build_index")

_DESCRIBE = """
import json, sys
from absl import flags
module = __import__(sys.argv[1], fromlist=["run"])
names = sorted(f.name for f in flags.FLAGS.get_key_flags_for_module(module.__name__)
               if type(f).__name__ != "_FlagAlias")
summary = (module.__doc__ or "").strip().splitlines()[0]
print(json.dumps({"summary": summary, "flags": names}))
"""


def binaries() -> List[Tuple[str, str]]:
  """(command, module) of every binary."""
  config = configparser.ConfigParser()
  config.read(os.path.join(ROOT, "setup.cfg"))
  scripts = []
  for line in config["options.entry_points"]["console_scripts"].strip().splitlines():
    command, target = (part.strip() for part in line.split("="))
    module = target.split(":")[0]
    scripts.append((command, "realm_tf.demo.main" if module == "realm_tf.demo" else module))
  return scripts + [(f"python -m {module}", module) for module in PIPELINES]


def describe(module: str) -> Dict[str, object]:
  """{"summary": the docstring's first line, "flags": the module's own flags}."""
  result = subprocess.run([sys.executable, "-c", _DESCRIBE, module], capture_output=True,
                          text=True, cwd=ROOT, check=True)
  return json.loads(result.stdout.strip().splitlines()[-1])


def table() -> str:
  rows = ["| command | what it does | its flags (`--help` explains each) |", "|---|---|---|"]
  for command, module in binaries():
    info = describe(module)
    summary = str(info["summary"]).split(": ", 1)[-1].rstrip(".")
    flags = " ".join(f"`--{name}`" for name in info["flags"])
    rows.append(f"| `{command}` | {summary} | {flags} |")
  return "\n".join(rows)


def main(argv: List[str]) -> int:
  with open(README, encoding="utf-8") as f:
    text = f.read()
  start, stop = text.index(BEGIN) + len(BEGIN), text.index(END)
  return generated_file.write_or_check(
      README, text[:start] + "\n" + table() + "\n" + text[stop:], argv,
      "README.md's command-line table is out of date: run python tools/cli_table.py")


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
