"""The default runner downloads nothing: pipeline 1 runs with every connection to an address
off this machine blocked and recorded (Beam 2.77's DirectRunner would fetch Prism first)."""
import ipaddress
import socket
import urllib.error
import urllib.request

import apache_beam as beam
import pytest

from pipelines import beam_runner
from pipelines import wikipedia_to_blocks_lib
from realm_tf.retrieval.corpus import Corpus

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "ada", "wrote", "the", "first",
         "program", "."]


def _is_loopback(host) -> bool:
  if host in ("localhost", "", None):
    return True
  try:
    return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
  except ValueError:  # a name other than localhost: resolving it is a network call
    return False


@pytest.fixture()
def attempts(monkeypatch):
  """Blocks name lookups and connections off this machine; returns the list they go to."""
  tried = []
  getaddrinfo, connect = socket.getaddrinfo, socket.socket.connect

  def blocked_getaddrinfo(host, *args, **kwargs):
    if not _is_loopback(host):
      tried.append(f"getaddrinfo {host}")
      raise socket.gaierror(f"network blocked by the test: {host}")
    return getaddrinfo(host, *args, **kwargs)

  def blocked_connect(sock, address):
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
      tried.append(f"connect {address[0]}")
      raise OSError(f"network blocked by the test: {address[0]}")
    return connect(sock, address)

  monkeypatch.setattr(socket, "getaddrinfo", blocked_getaddrinfo)
  monkeypatch.setattr(socket.socket, "connect", blocked_connect)
  return tried


def test_the_blocker_sees_a_download(attempts):
  with pytest.raises(urllib.error.URLError):
    urllib.request.urlopen("https://github.com/apache/beam/releases", timeout=5)
  assert attempts == ["getaddrinfo github.com"]


def test_pipeline_1_on_the_default_runner_attempts_no_network(attempts, tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(VOCAB) + "\n")
  docs = tmp_path / "docs.jsonl"
  docs.write_text('{"title": "Ada", "text": "Ada wrote the first program."}\n')
  out = str(tmp_path / "corpus")
  counters = wikipedia_to_blocks_lib.run_pipeline(
      beam.Pipeline(options=beam_runner.pipeline_options()),
      wikipedia_to_blocks_lib.BlocksConfig([str(docs)], out, input_format="jsonl",
                                           vocab_file=str(vocab), num_shards=1))
  assert attempts == []
  assert counters["blocks"] == len(Corpus.load(out)) == 1
