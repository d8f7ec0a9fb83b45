"""Tokenization and input featurization: Keras layers over tensorflow-text that run inside
`tf.data.Dataset.map`, masked-LM masking as graph ops, and rule-based sentence splitting
(`sentence_splitter`, shared by the corpus pipelines and ICT)."""
from realm_tf.tokenization.bert_packer import BertPacker
from realm_tf.tokenization.featurizers import BlockFeaturizer
from realm_tf.tokenization.featurizers import Featurizer
from realm_tf.tokenization.featurizers import QueryFeaturizer
from realm_tf.tokenization.featurizers import ReaderFeaturizer
from realm_tf.tokenization.featurizers import block_body_ids
from realm_tf.tokenization.masking import random_span_mask
from realm_tf.tokenization.masking import random_token_mask
from realm_tf.tokenization.masking import salient_span_mask
from realm_tf.tokenization.masking import span_lengths
from realm_tf.tokenization.masking import spanbert_mask
from realm_tf.tokenization.masking import wordpiece_span
from realm_tf.tokenization.wordpiece_tokenizer import WordpieceTokenizer

__all__ = [
    "BertPacker",
    "BlockFeaturizer",
    "Featurizer",
    "QueryFeaturizer",
    "ReaderFeaturizer",
    "WordpieceTokenizer",
    "block_body_ids",
    "random_span_mask",
    "random_token_mask",
    "salient_span_mask",
    "span_lengths",
    "spanbert_mask",
    "wordpiece_span",
]
