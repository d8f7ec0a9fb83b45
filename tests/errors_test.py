"""The one error style: `describe`'s one-line message and `run_main`'s exit 2 without traceback."""
import subprocess
import sys
import textwrap

import pytest

from realm_tf import errors


def test_describe_is_one_line_with_location_problem_and_fix():
  text = errors.describe("/data/blocks-00000-of-00002.tfrecord", "corrupted record\nat 49757",
                         "re-run the blocks pipeline", where="record 12")
  assert text == ("/data/blocks-00000-of-00002.tfrecord:record 12: corrupted record at 49757. "
                  "re-run the blocks pipeline.")
  assert errors.describe("q.jsonl", "empty file.") == "q.jsonl: empty file."


def _run_binary(tmp_path, body, *flags):
  script = tmp_path / "binary.py"
  script.write_text(textwrap.dedent(f"""
      from absl import app
      from realm_tf import errors
      def main(argv):
      {textwrap.indent(textwrap.dedent(body), '    ')}
      app.run(errors.run_main("realm-x", main))
      """))
  return subprocess.run([sys.executable, str(script), *flags], capture_output=True, text=True,
                        timeout=600)


@pytest.mark.parametrize("raise_line", [
    "raise errors.InputError(errors.describe('in.jsonl', 'line 3 is not JSON', 'fix it', 3))",
    "raise FileNotFoundError('in.jsonl: no such file. Check --input.')",
])
def test_user_errors_exit_2_with_one_line_and_no_traceback(tmp_path, raise_line):
  result = _run_binary(tmp_path, raise_line)
  assert result.returncode == errors.EXIT_BAD_INPUT
  assert "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1].startswith("realm-x: in.jsonl")


def test_verbosity_1_adds_the_traceback(tmp_path):
  result = _run_binary(tmp_path, "raise errors.InputError('in.jsonl: bad. fix.')",
                       "--verbosity=1")
  assert result.returncode == errors.EXIT_BAD_INPUT
  assert "Traceback" in result.stderr


def test_bugs_keep_their_traceback(tmp_path):
  result = _run_binary(tmp_path, "raise KeyError('bug')")
  assert result.returncode == 1
  assert "Traceback" in result.stderr and "KeyError" in result.stderr
