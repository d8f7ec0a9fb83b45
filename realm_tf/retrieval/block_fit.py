"""Where a corpus meets a model: blocks longer than the model reads are refused, not cut.

A doc tower and a reader read at most the model's `block_length` wordpieces of a block
(`[CLS] title [SEP] body [SEP]`); the rest of a longer block would never be embedded nor read,
without a word (an answer in its last sentence lost). So every path that embeds, indexes or
reads a corpus with a model (`realm-ask`, `realm-serve`, `realm-evaluate`, the index builder,
fine-tuning, probing) compares the corpus's longest block (`Corpus.block_length`, recorded in
its manifest) with the model's first.
"""
from typing import Optional

from realm_tf import errors
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer


def check_blocks_fit(corpus: Corpus, tokenizer: Optional[WordpieceTokenizer],
                     block_length: int, model: str) -> int:
  """Returns the corpus's longest block in `tokenizer`'s wordpieces (None: its stored ones).

  Raises:
    errors.InputError: a block longer than `block_length`, naming both lengths and the remedy.
  """
  longest = corpus.block_length(tokenizer)
  if longest > block_length:
    raise errors.InputError(errors.describe(
        corpus.source or "corpus", f"blocks of up to {longest} wordpieces, but the model "
        f"{model} reads blocks of {block_length} (the rest would be cut unread)",
        f"Re-block the corpus for it (python -m pipelines.wikipedia_to_blocks "
        f"--block_length={block_length}), or use a model of block_length {longest} or more"))
  return longest
