"""The binaries' command line: self-explaining `--help` without TensorFlow, one vocabulary, the
README table in sync, Beam's own flags accepted by the pipelines."""
import os
import re
import subprocess
import sys

import pytest

from realm_tf import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import cli_table  # pylint: disable=g-import-not-at-top,wrong-import-position

BINARIES = cli_table.binaries()


@pytest.mark.parametrize("command,module", BINARIES, ids=[c for c, _ in BINARIES])
def test_help_shows_the_docstring_and_own_flags_without_importing_tensorflow(command, module):
  del command
  result = subprocess.run([sys.executable, "-X", "importtime", "-m", module, "--help"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
  assert "Traceback" not in result.stderr, result.stderr[-2000:]  # absl's --help exits 1
  info = cli_table.describe(module)
  assert result.stdout.startswith(str(info["summary"]))
  for name in info["flags"]:
    assert f"--{name}:" in result.stdout or f"--[no]{name}:" in result.stdout, name
  imported = {line.rsplit("|", 1)[-1].strip().split(".")[0]
              for line in result.stderr.splitlines() if line.startswith("import time:")}
  assert "tensorflow" not in imported and "apache_beam" not in imported


# What may come just before a flag of another program that a help text names: that program.
_OTHER_PROGRAM = re.compile(r"realm-[a-z]|pipelines\.|pipeline_options|index builder")


@pytest.mark.parametrize("command,module", BINARIES, ids=[c for c, _ in BINARIES])
def test_every_flag_a_help_text_names_is_a_flag_of_that_binary(command, module):
  """`--help` names only flags the binary has (`--helpfull`), unless the text says whose
  they are (another binary's, the index builder's, Beam's options)."""
  del command
  run = lambda arg: subprocess.run([sys.executable, "-m", module, arg], capture_output=True,
                                   text=True, cwd=ROOT, timeout=600).stdout
  defined = set(re.findall(r"^\s+--(?:\[no\])?(\w+):", run("--helpfull"), re.M))
  text = " ".join(run("--help").split())
  missing = [text[max(0, m.start() - 80):m.end()]
             for m in re.finditer(r"--(?:\[no\])?([a-z]\w*)", text)
             if m.group(1) not in defined and
             not _OTHER_PROGRAM.search(text[max(0, m.start() - 80):m.start()])]
  assert not missing, missing


def test_console_script_help_lists_the_binary_flags():
  script = os.path.join(os.path.dirname(sys.executable), "realm-ict")  # make install made it
  assert os.path.exists(script), "pip install -e . registers the console scripts"
  result = subprocess.run([script, "--help"], capture_output=True, text=True, timeout=600)
  assert "Traceback" not in result.stderr
  assert result.stdout.startswith("`realm-ict`: ICT warm-start")
  assert "--corpus:" in result.stdout and "--num_steps:" in result.stdout


def test_readme_command_line_table_is_generated_from_the_flags():
  assert cli_table.main(["--check"]) == 0, "run: python tools/cli_table.py"


def test_shared_choices_are_the_libraries_choices():
  from pipelines import pretraining_examples_lib  # pylint: disable=g-import-not-at-top
  from realm_tf import presets  # pylint: disable=g-import-not-at-top
  from realm_tf.tokenization import doc_input  # pylint: disable=g-import-not-at-top
  from realm_tf.demo.config import DemoConfig  # pylint: disable=g-import-not-at-top
  from realm_tf.mips import index_builder  # pylint: disable=g-import-not-at-top
  from realm_tf.models import precision  # pylint: disable=g-import-not-at-top
  from realm_tf import distribute  # pylint: disable=g-import-not-at-top
  from realm_tf.training import pretraining_data  # pylint: disable=g-import-not-at-top
  assert cli.ENCODERS == presets.ENCODERS
  assert presets.DEFAULT_ENCODER == DemoConfig().encoder
  assert set(cli.RETRIEVER_HEADS) == set(presets.HEAD_CHOICES)
  assert cli.DOC_INPUTS == doc_input.DOC_INPUTS
  assert cli.STRATEGIES == distribute.STRATEGIES
  assert set(cli.INDEX_KINDS) == set(index_builder.KINDS)
  assert set(cli.MASKINGS) == set(pretraining_examples_lib.MASKINGS) == set(
      pretraining_data.MASKING)
  assert cli.COMPUTE_DTYPES == precision.COMPUTE_DTYPES


@pytest.mark.parametrize("argv,verbose", [
    ([], False), (["--verbosity=1"], True), (["--verbosity", "2"], True),
    (["-v=0"], False), (["--verbosity=x"], False)])
def test_native_logging_is_quiet_unless_asked(monkeypatch, argv, verbose):
  monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
  cli.quiet_native_logging(["prog"] + argv)
  assert ("TF_CPP_MIN_LOG_LEVEL" in os.environ) is not verbose
  monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "0")
  cli.quiet_native_logging(["prog"] + argv)
  assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "0"


def test_pipelines_pass_unknown_flags_to_beam():
  # pylint: disable=g-import-not-at-top
  from apache_beam.options.pipeline_options import DirectOptions
  from apache_beam.options.pipeline_options import StandardOptions
  from pipelines import beam_runner  # pylint: disable=g-import-not-at-top
  options = beam_runner.pipeline_options("--direct_running_mode=in_memory",
                                         ["--runner=DirectRunner", "--direct_num_workers=1"])
  assert options.view_as(StandardOptions).runner == beam_runner.LOCAL_RUNNER  # no Prism download
  assert options.view_as(DirectOptions).direct_num_workers == 1
  assert options.view_as(DirectOptions).direct_running_mode == "in_memory"


def test_a_misspelled_flag_is_an_error_not_dropped_by_beam():
  from pipelines import beam_runner  # pylint: disable=g-import-not-at-top
  from realm_tf import errors  # pylint: disable=g-import-not-at-top
  with pytest.raises(errors.InputError, match="--runer: not a flag of this pipeline"):
    beam_runner.pipeline_options("", ["--runer=DataflowRunner"])


@pytest.mark.slow
def test_a_pipeline_binary_runs_with_beams_own_runner_flag(tmp_path):
  corpus = tmp_path / "docs.jsonl"
  corpus.write_text('{"title": "Ada Lovelace", "text": "Ada Lovelace wrote the first '
                    'program. She worked with Charles Babbage."}\n', encoding="utf-8")
  result = subprocess.run(
      [sys.executable, "-m", "pipelines.wikipedia_to_blocks", f"--input={corpus}",
       "--input_format=jsonl", f"--output_dir={tmp_path / 'out'}", "--runner=DirectRunner",
       "--direct_num_workers=1"], capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  assert any(name.startswith("blocks-") for name in os.listdir(tmp_path / "out"))


@pytest.mark.slow
def test_setup_py_builds_the_source_distribution_beam_ships_to_workers(tmp_path):
  result = subprocess.run([sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=900)
  assert result.returncode == 0, result.stderr[-3000:]
  import tarfile  # pylint: disable=g-import-not-at-top
  (archive,) = [p for p in os.listdir(tmp_path) if p.endswith(".tar.gz")]
  with tarfile.open(tmp_path / archive) as tar:
    names = tar.getnames()
  for module in ("pipelines/build_index_lib.py", "realm_tf/cli.py", "realm_tf/mips/manifest.py"):
    assert any(name.endswith(module) for name in names), module


def test_the_gcp_extra_pins_beams_gcp_extra_at_the_installed_beam_version():
  import configparser  # pylint: disable=g-import-not-at-top
  config = configparser.ConfigParser()
  config.read(os.path.join(ROOT, "setup.cfg"))
  requires = config["options"]["install_requires"].split()
  beam = next(r for r in requires if r.startswith("apache-beam=="))
  gcp = config["options.extras_require"]["gcp"].split()
  assert gcp == [beam.replace("apache-beam==", "apache-beam[gcp]==")]


FLAG_DOMAINS = [  # (module, required flags, a flag outside its domain, the named reason)
    ("realm_tf.ict", "--corpus=c --model_dir=m", "--remove_prob=2", "not a number in the range"),
    ("realm_tf.pretrain", "--corpus=c --examples_dir=e --model_dir=m", "--refresh_every=0",
     "not a positive integer"),
    ("realm_tf.pretrain", "--corpus=c --examples_dir=e --model_dir=m", "--num_candidates=0",
     "not a positive integer"),
    ("realm_tf.finetune", "--model_dir=m --corpus=c --train_data=t", "--learning_rate=-1",
     "not a non-negative number"),
    ("realm_tf.evaluate", "--model_dir=m --data=d", "--batch_size=0", "not a positive integer"),
    ("realm_tf.evaluate", "--model_dir=m --data=d", "--max_examples=-1",
     "not a non-negative integer"),
    ("realm_tf.plot_ru", "--run=a:b", "--smoothing=0", "not a positive integer"),
    ("realm_tf.demo.main", "", "--num_docs=-5", "not a non-negative integer"),
    ("pipelines.wikipedia_to_blocks", "--input=i --output_dir=o", "--num_shards=-1",
     "not a non-negative integer"),
    ("realm_tf.knowledge_world.generate", "--output_dir=o", "--dev_fraction=0.5",
     "--dev_fraction \\+ --test_fraction < 1"),
    ("realm_tf.ask", "", "--embeddings_dir=emb", "--embeddings_dir needs the --corpus"),
]


@pytest.mark.parametrize("module,required,bad,reason", FLAG_DOMAINS,
                         ids=[f"{m}{b}" for m, _, b, _ in FLAG_DOMAINS])
def test_a_flag_outside_its_domain_is_one_line_naming_it(module, required, bad, reason):
  # Flags are parsed before TensorFlow is imported: each run takes about a second.
  extra = ["--test_fraction=0.6"] if "dev_fraction" in bad else []
  result = subprocess.run([sys.executable, "-m", module, *required.split(), bad, *extra],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
  assert result.returncode == 2, result.stderr
  assert "Traceback" not in result.stderr
  last = result.stderr.strip().splitlines()[-1]
  assert re.search(reason, last) and bad.split("=")[0] in last, last
