"""all-MiniLM-L6-v2 as sentence-transformers runs it, in torch: the raw dense baseline.

HF `transformers.BertModel` with the weights of `realm_tf.pretrained.minilm_dir()`, mean
pooling of the last hidden state over the attention mask, then L2 normalisation (the model's
`1_Pooling` and `2_Normalize` modules); scores are dot products (cosines).

Questions are tokenized by HF `BertTokenizer` from the same vocab.txt, `[CLS] x [SEP]`, at
most `query_length` wordpieces. Blocks are not re-tokenized: the wordpiece ids of the
`Corpus` are packed `[CLS] title [SEP] body [SEP]` by `realm_tf`'s `BertPacker` (waterfall,
the title first), so the towers of realm_tf read exactly the same inputs. With
`segment_ids=True` (realm_tf's packing) the type ids are 0 on `[CLS] title [SEP]` and 1 on
`body [SEP]`; with False they are all 0, as sentence-transformers encodes a single string.
Legend: Q questions, N blocks, L packed length, H = 384.
"""
import os
from typing import Sequence

import numpy as np
import torch
import transformers

from realm_tf import pretrained
from realm_tf.retrieval.corpus import Corpus
from realm_tf.tokenization.bert_packer import BertPacker

MODEL_NAME = "all-MiniLM-L6-v2"


class SentenceMiniLM:
  """The sentence-transformers model all-MiniLM-L6-v2 (BERT + mean pooling + L2 norm).

  Args:
    model_dir: holds config.json, model.safetensors and vocab.txt (default: `minilm_dir()`).
    num_threads: torch intra-op threads (a process-wide setting).
    batch_size: sequences per forward pass.
  """

  def __init__(self, model_dir: str = "", num_threads: int = 2, batch_size: int = 64):
    model_dir = model_dir or pretrained.minilm_dir()
    torch.set_num_threads(num_threads)
    self.batch_size = batch_size
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the unused pooler weights are expected
    try:
      self.model = transformers.BertModel.from_pretrained(model_dir, add_pooling_layer=False)
    finally:
      transformers.logging.set_verbosity(verbosity)
    self.model.eval()
    self.tokenizer = transformers.BertTokenizer(os.path.join(model_dir, "vocab.txt"),
                                                do_lower_case=True)

  @torch.inference_mode()
  def encode(self, input_ids: np.ndarray, attention_mask: np.ndarray,
             token_type_ids: np.ndarray) -> np.ndarray:
    """int [B, L] each -> float32 [B, H]: masked mean of the last hidden states, L2-normalised."""
    mask = torch.as_tensor(np.asarray(attention_mask), dtype=torch.long)
    hidden = self.model(input_ids=torch.as_tensor(np.asarray(input_ids), dtype=torch.long),
                        attention_mask=mask,
                        token_type_ids=torch.as_tensor(np.asarray(token_type_ids),
                                                       dtype=torch.long)).last_hidden_state
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * weights).sum(1) / weights.sum(1).clamp(min=1e-9)
    return torch.nn.functional.normalize(pooled, p=2, dim=1).numpy().astype(np.float32)

  def embed_queries(self, questions: Sequence[str], query_length: int = 64) -> np.ndarray:
    """Q questions -> float32 [Q, H]."""
    out = []
    for begin in range(0, len(questions), self.batch_size):
      batch = self.tokenizer(list(questions[begin:begin + self.batch_size]),
                             max_length=query_length, truncation=True, padding=True,
                             return_tensors="np")
      out.append(self.encode(batch["input_ids"], batch["attention_mask"],
                             batch["token_type_ids"]))
    return np.concatenate(out) if out else np.zeros([0, self.model.config.hidden_size],
                                                    np.float32)

  def embed_store(self, store: Corpus, block_length: int = 128,
                  segment_ids: bool = True) -> np.ndarray:
    """The N blocks of `store`, shortest first in batches padded to their longest block ->
    float32 [N, H] in store order."""
    packer = BertPacker(block_length, self.tokenizer.cls_token_id, self.tokenizer.sep_token_id,
                        self.tokenizer.pad_token_id)
    lengths = store.title_ids.row_lengths() + store.body_ids.row_lengths() + 3
    order = np.argsort(lengths, kind="stable")
    embeddings = np.zeros([len(store), self.model.config.hidden_size], np.float32)
    for begin in range(0, len(store), self.batch_size):
      rows = order[begin:begin + self.batch_size]
      features = packer((store.title_ids.gather(rows), store.body_ids.gather(rows)))
      length = int(min(block_length, lengths[rows].max()))
      features = {name: value[:, :length].numpy() for name, value in features.items()}
      types = features["input_type_ids"] if segment_ids else np.zeros_like(
          features["input_type_ids"])
      embeddings[rows] = self.encode(features["input_word_ids"], features["input_mask"], types)
    return embeddings
