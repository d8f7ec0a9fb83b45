"""Bad input to the pipelines and data readers: one line naming the path (and record / byte
offset) and the fix, no misleading empty output, nothing valid lost. Damaged and missing
shards are in `shard_manifest_test.py`."""
import bz2
import dataclasses
import glob
import json
import os
import subprocess
import sys

import apache_beam as beam
from apache_beam.io import filesystems
import numpy as np
import pytest

from pipelines import build_index_lib
from pipelines import pipeline_io
from pipelines import pretraining_examples_lib
from pipelines import wikipedia_to_blocks_lib
from realm_tf import errors
from realm_tf.data import shards
from realm_tf.mips import index_publisher
from realm_tf.mips.brute_force_index import BruteForceIndex
from realm_tf.retrieval.corpus import Corpus
from realm_tf.retrieval.index_refresh import SynchronousRefresher
from shard_manifest_test import write_shards
from wiki_dump_xml import dump_xml
from wiki_dump_xml import page_xml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", ".",
         "paris", "is", "in", "france"]
ARTICLE = "\n\n".join(["The cat sat on the mat."] * 3)


def _blocks_config(tmp_path, inputs, input_format="wikipedia"):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  return wikipedia_to_blocks_lib.BlocksConfig(inputs, str(tmp_path / "out"),
                                              input_format=input_format, vocab_file=str(vocab))


def _dump(tmp_path, *pages):
  path = tmp_path / "dump.xml"
  path.write_bytes(dump_xml(*(pages or [page_xml("Paris", ARTICLE)])))
  return str(path)


def _unreadable(tmp_path, monkeypatch):
  path = _dump(tmp_path)

  def refuse(*args, **kwargs):
    raise PermissionError(13, "Permission denied", path)

  monkeypatch.setattr(filesystems.FileSystems, "open", refuse)  # root may read any file
  return [path], {}


def _output_is_a_file(tmp_path, monkeypatch):
  del monkeypatch
  (tmp_path / "out").write_text("a file")
  return [_dump(tmp_path)], {}


BLOCKS_INPUT_CASES = {
    "nonexistent": (lambda t, m: (["/does/not/exist.xml.bz2"], {}), FileNotFoundError,
                    r"^/does/not/exist\.xml\.bz2: no such file \(--input matches nothing\)\. "
                    r"Check the path or pattern\.$"),
    "pattern_matches_nothing": (lambda t, m: ([str(t / "*.bz2")], {}), FileNotFoundError,
                                r"/\*\.bz2: no such file \(--input matches nothing\)"),
    "directory_as_input": (lambda t, m: ([str(t)], {}), errors.InputError,
                           r": is a directory, not a file \(--input\)\. Pass the files inside "
                           r"it, e\.g\. .*/\*\.$"),
    "empty_file": (lambda t, m: ([_empty(t)], {}), errors.InputError,
                   r"/empty\.xml: is empty \(--input\)\. Pass a non-empty file\.$"),
    "unreadable_file": (_unreadable, errors.InputError,
                        r"/dump\.xml: cannot be read \(PermissionError: .*\)\. Check its "
                        r"permissions\.$"),
    "output_dir_is_a_file": (_output_is_a_file, errors.InputError,
                             r"/out: is a file, not a directory \(--output_dir\)\. Pass a "
                             r"directory\.$"),
    "block_length_without_body_room": (
        lambda t, m: ([_dump(t)], {"block_length": 40}), errors.InputError,
        r"^--block_length=40: leaves no room for a body after a title of up to "
        r"--max_title_wordpieces=64 wordpieces and \[CLS\], \[SEP\], \[SEP\]\. Pass "
        r"--block_length above 67 \(REALM: 288\), or a --max_title_wordpieces below 37\.$"),
    "missing_vocab_file": (lambda t, m: ([_dump(t)], {"vocab_file": str(t / "nope.txt")}),
                           FileNotFoundError, r"/nope\.txt: no such vocabulary file\. Pass the "
                           r"path of a BERT vocab\.txt \(--vocab_file\)\.$"),
}


def _empty(tmp_path):
  path = tmp_path / "empty.xml"
  path.write_bytes(b"")
  return str(path)


@pytest.mark.parametrize("case", sorted(BLOCKS_INPUT_CASES))
def test_blocks_pipeline_rejects_bad_input_before_it_starts(tmp_path, monkeypatch, case):
  make, error_type, message = BLOCKS_INPUT_CASES[case]
  inputs, settings = make(tmp_path, monkeypatch)
  config = dataclasses.replace(_blocks_config(tmp_path, inputs), **settings)
  with pytest.raises(error_type, match=message) as error:
    wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), config)
  assert "\n" not in str(error.value)
  assert not glob.glob(os.path.join(config.output_dir, "*")) or case == "output_dir_is_a_file"


def test_jsonl_without_one_valid_line_fails_and_writes_no_blocks(tmp_path):
  path = tmp_path / "docs.jsonl"
  path.write_text('{not json\n{"title": "NoText"}\n')
  config = _blocks_config(tmp_path, [str(path)], "jsonl")
  with pytest.raises(errors.InputError, match=r"docs\.jsonl: no blocks came out \(2 dead "
                     r"letters\)\. See why in .*/out/dead_letter-\*\.jsonl\.$"):
    wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), config)
  assert sorted(os.listdir(config.output_dir)) == ["dead_letter-00000-of-00001.jsonl"]


def test_a_dump_of_redirects_only_is_refused_naming_the_dropped_pages(tmp_path):
  path = _dump(tmp_path, page_xml("Lutetia", "#REDIRECT [[Paris]]", page_id=2, redirect="Paris"),
               page_xml("Talk:Paris", "Chat.", ns=1, page_id=3))
  with pytest.raises(errors.InputError, match=r"dump\.xml: no blocks came out \(0 dead letters; "
                     r"dropped: 1 namespace, 1 redirect\)\. Pass a dump "
                     r"with article pages \(redirects, other namespaces and disambiguation "
                     r"pages are dropped\)\.$"):
    wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), _blocks_config(tmp_path, [path]))
  assert not glob.glob(str(tmp_path / "out" / "blocks*"))


def test_malformed_jsonl_lines_are_dead_letters_and_valid_lines_are_kept(tmp_path):
  path = tmp_path / "docs.jsonl"
  path.write_text("\n".join([json.dumps({"title": "Paris", "text": "Paris is in France."}),
                             "{not json", json.dumps({"title": "Cat", "text": ARTICLE}),
                             json.dumps({"text": "no title"})]) + "\n")
  config = _blocks_config(tmp_path, [str(path)], "jsonl")
  counters = wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), config)
  assert sorted(Corpus.load(config.output_dir).titles) == ["Cat", "Paris"]
  assert shards.check_shards(config.output_dir, "blocks").manifest["num_records"] == 2
  with open(glob.glob(os.path.join(config.output_dir, "dead_letter-*.jsonl"))[0]) as f:
    dead = sorted((r["source"], r["offset"], r["reason"].split(":")[0])
                  for r in map(json.loads, f))
  assert dead == [(str(path), 2, "not JSON"), (str(path), 4, "no string field 'title'")]
  assert counters["dead_letters"] == 2


def test_a_bz2_dump_cut_mid_way_keeps_complete_pages(tmp_path):
  text = "\n\n".join(["The cat sat on the mat. Paris is in France."] * 100)
  pages = [page_xml(f"Page {i}", text, page_id=i) for i in range(40)]  # ~180 kB: 2 bz2 blocks
  data = bz2.compress(dump_xml(*pages), compresslevel=1)
  path = tmp_path / "cut.xml.bz2"
  path.write_bytes(data[:int(len(data) * 0.7)])
  config = _blocks_config(tmp_path, [str(path)])
  counters = wikipedia_to_blocks_lib.run_pipeline(beam.Pipeline(), config)
  store = Corpus.load(config.output_dir)
  assert 0 < counters["pages_read"] < 40 and counters["dumps_truncated"] == 1
  assert len(store) == counters["blocks"]
  with open(glob.glob(os.path.join(config.output_dir, "dead_letter-*.jsonl"))[0]) as f:
    (dead,) = [json.loads(line) for line in f]
  assert dead["stage"] == "read_dump" and dead["title"].startswith("Page ")
  assert dead["reason"].startswith(f"dump truncated at decompressed byte {dead['offset']}")


# case -> (make it, (error, message) of the examples pipeline, which reads any corpus input
# `Corpus.load` takes, and of the index builder, which reads block shards or a corpus form).
EXAMPLES_INPUT_CASES = {
    "corpus_dir_missing": (
        lambda t: str(t / "nope"),
        (FileNotFoundError, r"/nope: no corpus at this path\. Pass a corpus directory, a "
                            r"blocks-\*\.tfrecord directory"),
        (FileNotFoundError, r"/nope: no such directory \(expected a directory of "
                            r"blocks-\*\.tfrecord shards\)\. Pass the directory that "
                            r"python -m pipelines\.wikipedia_to_blocks wrote\.$")),
    "corpus_dir_is_a_file": (
        lambda t: str((t / "f").write_text("x") and t / "f"),
        (errors.MalformedRecordError, r"/f:1: not valid JSON"),  # read as a JSONL corpus
        (errors.InputError, r"/f: is a file, not a directory of blocks-\*\.tfrecord shards\.")),
    "corpus_dir_without_shards": (
        lambda t: str(t),
        (FileNotFoundError, r": no blocks-\*\.tfrecord shards\. Pass the directory"),
        (FileNotFoundError, r": no blocks-\*\.tfrecord shards\. Pass the directory")),
}


@pytest.mark.parametrize("case", sorted(EXAMPLES_INPUT_CASES))
def test_examples_pipeline_and_index_builder_reject_a_bad_corpus_dir(tmp_path, case):
  make, (examples_error, examples_message), (builder_error, builder_message) = (
      EXAMPLES_INPUT_CASES[case])
  corpus_dir = make(tmp_path)
  config = pretraining_examples_lib.ExamplesConfig(corpus_dir, str(tmp_path / "out"),
                                                   tagger="dates")
  with pytest.raises(examples_error, match=examples_message):
    pretraining_examples_lib.run_pipeline(beam.Pipeline(), config)
  with pytest.raises(builder_error, match=builder_message):
    build_index_lib.build_index(corpus_dir, str(tmp_path), str(tmp_path / "index"))
  assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "index")


def test_examples_output_dir_is_a_file(tmp_path):
  corpus_dir = write_shards(str(tmp_path / "corpus"), "blocks")
  (tmp_path / "out").write_text("x")
  with pytest.raises(errors.InputError, match=r"/out: is a file, not a directory"):
    pretraining_examples_lib.run_pipeline(beam.Pipeline(), pretraining_examples_lib.ExamplesConfig(
        corpus_dir, str(tmp_path / "out"), tagger="dates"))


def test_index_builder_without_an_embedder_export(tmp_path):
  corpus_dir = write_shards(str(tmp_path / "corpus"), "blocks")
  with pytest.raises(FileNotFoundError, match=r"/nope: no such directory \(expected a "
                     r"doc-embedder export \(--embedder_dir\)\)"):
    build_index_lib.build_index(corpus_dir, str(tmp_path / "nope"), str(tmp_path / "index"))


def test_an_error_inside_a_running_pipeline_surfaces_in_one_line():
  def fail(_):
    raise errors.InputError(errors.describe("/data/x.jsonl", "bad record", "Fix it", where=3))

  pipeline = beam.Pipeline()
  _ = pipeline | beam.Create([1]) | "Fail" >> beam.Map(fail)
  with pytest.raises(errors.InputError) as error:
    pipeline_io.run(pipeline)
  assert str(error.value) == "/data/x.jsonl:3: bad record. Fix it."


def _published_index(tmp_path, store_fingerprint):
  root = str(tmp_path / "index")
  embeddings = np.random.default_rng(0).standard_normal([3, 4]).astype(np.float32)
  index_publisher.publish(BruteForceIndex(embeddings), root, "step-00000001",
                          {"corpus_fingerprint": store_fingerprint})
  return root


def _store(ids):
  return Corpus.from_blocks(ids, ["t"] * len(ids), ["x"] * len(ids), [[5]] * len(ids),
                                [[6]] * len(ids))


@pytest.mark.parametrize("corpus_ids", [[1, 2, 4], [1, 2]], ids=["same_size", "other_size"])
def test_an_index_of_another_corpus_is_rejected(tmp_path, corpus_ids):
  root = _published_index(tmp_path, _store([1, 2, 3]).fingerprint)
  refresher = SynchronousRefresher(root, 10, _store(corpus_ids), (2, 3, 0), kind="brute_force")
  with pytest.raises(errors.InputError, match=r"/index/step-00000001: index built from another "
                     r"corpus: 3 blocks, corpus fingerprint \w{12}; the corpus has \d blocks, "
                     r"fingerprint \w{12}\. Pass the --corpus it was built from, or a new "
                     r"--index_root for this corpus\.$"):
    refresher.start(1, None)


def test_an_index_whose_files_do_not_match_its_manifest(tmp_path):
  root = _published_index(tmp_path, "f")
  path = glob.glob(os.path.join(root, "step-00000001", "*.npy"))[0]
  with open(path, "r+b") as f:
    f.seek(-4, 2)
    f.write(b"\x00\x01\x02\x03")
  with pytest.raises(errors.InputError, match=r"/step-00000001/\w+\.npy: MIPS index is "
                     r"corrupted: sha256 \w+ differs from \w+ in manifest\.json\. Rebuild it"):
    index_publisher.load_latest(root)


@pytest.mark.parametrize("content,error_type,message", [
    ("../elsewhere/step-00000001", errors.InputError, "not the name of a version directory"),
    ("/abs/step-00000001", errors.InputError, "not the name of a version directory"),
    ("step-00000009", FileNotFoundError, "names version 'step-00000009', which does not exist"),
])
def test_latest_is_confined_and_checked_in_every_reader(tmp_path, content, error_type, message):
  root = _published_index(tmp_path, _store([1, 2, 3]).fingerprint)
  with open(os.path.join(root, index_publisher.LATEST), "w") as f:
    f.write(content + "\n")
  refresher = SynchronousRefresher(root, 10, _store([1, 2, 3]), (2, 3, 0), kind="brute_force")
  for read in (index_publisher.latest_version, index_publisher.load_latest,
               lambda root: refresher.start(1, None),
               lambda root: refresher.start(1, None, resume_version="step-00000001")):
    with pytest.raises(error_type, match=message) as error:
      read(root)
    assert "write 'step-00000001' into" in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("name,content,message", [
    ("corpus.jsonl", '{"id": 1, "text": "a"}\n{not json\n', r"corpus\.jsonl:2: not valid JSON"),
    ("corpus.tsv", "id\ttext\ttitle\n1\ta\tA\n2\tb\n",
     r"corpus\.tsv:3: expected id<TAB>text<TAB>title, got 2 fields"),
    ("empty.jsonl", "\n", r"empty\.jsonl: the corpus has no blocks\. Pass a corpus with at "
     r"least one block\.$"),
    ("twice.jsonl", '{"id": 1, "text": "a"}\n{"id": 1, "text": "b"}\n',
     r"twice\.jsonl: duplicate block ids \[1\]\. Give each block its own id"),
    ("missing.jsonl", None, r"missing\.jsonl: no corpus at this path\. Pass a corpus directory, a "
     r"blocks-\*\.tfrecord directory"),
])
def test_ask_corpus_files_are_named_with_line_and_fix(tmp_path, name, content, message):
  path = tmp_path / name
  if content is not None:
    path.write_text(content)
  with pytest.raises((errors.InputError, FileNotFoundError), match=message) as error:
    Corpus.load(str(path))
  assert "\n" not in str(error.value)


def _run(module, *flags):
  return subprocess.run([sys.executable, "-m", module, *flags], cwd=ROOT, capture_output=True,
                        text=True, timeout=900)


def _flipped_corpus(tmp_path):
  corpus_dir = write_shards(str(tmp_path / "corpus"), "blocks")
  path = os.path.join(corpus_dir, "blocks-00000-of-00002.tfrecord")
  data = bytearray(open(path, "rb").read())
  data[300:310] = bytes(b ^ 0xFF for b in data[300:310])
  open(path, "wb").write(bytes(data))
  return corpus_dir


BINARY_CASES = {
    "blocks_from_a_missing_dump": (
        "pipelines.wikipedia_to_blocks",
        lambda t: ["--input=/does/not/exist", f"--output_dir={t / 'out'}"],
        "pipelines.wikipedia_to_blocks: /does/not/exist: no such file (--input matches "
        "nothing). Check the path or pattern."),
    "examples_from_a_corrupted_shard": (
        "pipelines.pretraining_examples",
        lambda t: [f"--corpus_dir={_flipped_corpus(t)}", f"--output_dir={t / 'out'}",
                   "--tagger=dates"],
        "blocks-00000-of-00002.tfrecord:record "),
    "index_from_a_corpus_missing_a_shard": (
        "pipelines.build_index",
        lambda t: [f"--corpus_dir={write_shards(str(t / 'c'), 'blocks') and _rm(t / 'c')}",
                   f"--embedder_dir={t}", f"--index_root={t / 'index'}"],
        "blocks-00001-of-00002.tfrecord: missing: shard 2 of 2"),
}


def _rm(corpus_dir):
  os.remove(os.path.join(corpus_dir, "blocks-00001-of-00002.tfrecord"))
  return str(corpus_dir)


@pytest.mark.parametrize("case", sorted(BINARY_CASES))
def test_binaries_exit_2_with_one_line(tmp_path, case):
  module, make_flags, message = BINARY_CASES[case]
  result = _run(module, *make_flags(tmp_path))
  assert result.returncode == errors.EXIT_BAD_INPUT, result.stderr[-3000:]
  last = result.stderr.strip().splitlines()[-1]
  assert last.startswith(f"{module}: ") and message in last, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "out") and not os.path.exists(tmp_path / "index")
