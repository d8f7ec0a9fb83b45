r"""Seconds to clean, split and pack one very large page: the blocks pipeline is linear in it.

    .venv/bin/python bench/large_page_bench.py                 # 1 and 4 MB, ~2 min on 1 core
    .venv/bin/python bench/large_page_bench.py --megabytes=0.5,1,2,4

One process, one core, the stages of `_CleanPageFn` and `_PackBlocksFn` on generated pages:
- `article`: paragraphs of prose with links, templates, `<ref>`s, headings and lists;
- `one_line`: the same without a line break (one 4 MB paragraph);
- `jsonl_sentence`: a JSONL record's text of one sentence with no terminator (packing only);
- `unclosed_*`: thousands of `{{`, `<div>`, `<a` (no `>`), `[http://` (no `]`) and `'''`
  that nothing closes, the inputs the parser used to retry against the rest of the page.
Prints a markdown table (BENCHMARKS.md §4) under the machine line and writes
`bench/results/<--name>.{json,md}`, each row with the 1-minute load average before it. Not a
test: timings depend on the machine.
"""
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from absl import app  # pylint: disable=g-import-not-at-top,wrong-import-position
from absl import flags  # pylint: disable=g-import-not-at-top,wrong-import-position

from bench import bench_utils  # pylint: disable=wrong-import-position
from pipelines import block_packer  # pylint: disable=wrong-import-position
from pipelines import wikipedia_to_blocks_lib  # pylint: disable=wrong-import-position
from pipelines import wikitext_cleaner  # pylint: disable=wrong-import-position

_MEGABYTES = flags.DEFINE_list("megabytes", ["1", "4"], "Page sizes, in MB of wikitext.")
_CASES = flags.DEFINE_list("cases", ["article", "one_line", "jsonl_sentence", "unclosed_template",
                                     "unclosed_div", "unclosed_tag_start", "unclosed_link",
                                     "unclosed_bold"], "Which pages.")
_NAME = flags.DEFINE_string("name", "large_page", "Result file name under bench/results/ "
                            "(empty: print only).")
_PROSE = "The river flows north past the old city, where the empire built its first bridge."


def article(n_bytes: int, line_breaks: bool = True) -> str:
  """Wikitext of about `n_bytes`: prose paragraphs with the usual markup."""
  rng, parts, size, i = random.Random(0), [], 0, 0
  words = "alpha beta gamma delta river city empire king war music science north".split()
  while size < n_bytes:
    i += 1
    words_i = " ".join(rng.choice(words) for _ in range(12))
    part = (f"The '''{words[i % 12]} {i}''' was [[Place {i}|a place]] of {{{{convert|{i}|km}}}} "
            f"and {words_i}.<ref>{{{{cite web|title=Source {i}}}}}</ref> Dr. Smith wrote "
            f"\"{words_i}!\" It is [[Topic {i}]] ({{{{lang|fr|texte {i}}}}}). ")
    if line_breaks:
      part += "\n\n" + (f"== Section {i} ==\n* a list item {i}\n" if i % 50 == 0 else "")
    parts.append(part)
    size += len(part)
  return "".join(parts)


def page(case: str, n_bytes: int) -> str:
  repeated = {"unclosed_template": "{{Infobox x|a=", "unclosed_div": "<div>",
              "unclosed_tag_start": "<abc ", "unclosed_link": "[http://example.org ",
              "unclosed_bold": "''' "}
  if case == "article":
    return article(n_bytes)
  if case == "one_line":
    return article(n_bytes, line_breaks=False)
  if case == "jsonl_sentence":
    return ("word " * (n_bytes // 5)).strip()
  unit = repeated[case] + _PROSE + " "
  return unit * (n_bytes // len(unit))


def time_page(packer, case: str, megabytes: str) -> dict:
  """Seconds to clean, and to split + tokenize + pack, one generated page."""
  wikitext = page(case, int(float(megabytes) * 1e6))
  load = os.getloadavg()[0]
  start = time.perf_counter()
  try:
    text = wikitext if case == "jsonl_sentence" else wikitext_cleaner.clean_wikitext(wikitext)
  except wikitext_cleaner.MalformedWikitextError:
    text = ""  # a dead letter
  cleaned = time.perf_counter()
  blocks = packer.pack([("Page", text)])[0] if text else []
  packed = time.perf_counter()
  row = {"page": case, "MB": len(wikitext) / 1e6, "blocks": len(blocks),
         "MB/s": len(wikitext) / 1e6 / (packed - start), "load": load}
  if case != "jsonl_sentence":
    row["clean s"] = cleaned - start
  if text:  # not a dead letter
    row["split + tokenize + pack s"] = packed - cleaned
  return row


def main(argv):
  del argv
  machine = bench_utils.machine_line()
  print(machine, flush=True)
  packer = block_packer.BlockPacker(wikipedia_to_blocks_lib.load_tokenizer(""))
  packer.pack([("warm", "up.")])
  rows = [time_page(packer, case, megabytes)
          for megabytes in _MEGABYTES.value for case in _CASES.value]
  columns = ["page", "MB", "clean s", "split + tokenize + pack s", "blocks", "MB/s", "load"]
  markdown = (f"{machine}\n\nOne process; load: the 1-minute load average before the page.\n\n"
              + bench_utils.markdown_table(rows, columns))
  print(markdown)
  if _NAME.value:
    print("wrote", bench_utils.write_results(_NAME.value, rows, markdown))


if __name__ == "__main__":
  app.run(main)
