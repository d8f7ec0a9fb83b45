"""`realm-demo`: REALM end to end on real data, from Wikipedia text to answers with evidence.

Modules: `wikipedia` (the lead extracts and the subset indexed), `questions` (NQ-open dev
questions the corpus answers, train/dev by hash), `stages` (the chain, resumable stage by
stage), `progress` (progress bars), `report` (the summary), `main` (the absl binary).
"""


def run():
  """The `realm-demo` console script (`realm_tf.demo.main`)."""
  from realm_tf.demo import main  # pylint: disable=g-import-not-at-top
  main.run()
