"""Tests of realm_tf.tokenization against a tiny inline vocabulary with exact ids."""
import numpy as np
import pytest
import tensorflow as tf
import tensorflow_text as tf_text

from realm_tf.keras import keras
from realm_tf.tokenization import BertPacker
from realm_tf.tokenization import BlockFeaturizer
from realm_tf.tokenization import Featurizer
from realm_tf.tokenization import QueryFeaturizer
from realm_tf.tokenization import ReaderFeaturizer
from realm_tf.tokenization import WordpieceTokenizer
from realm_tf.tokenization import block_body_ids
from realm_tf.tokenization import random_span_mask
from realm_tf.tokenization import random_token_mask
from realm_tf.tokenization import salient_span_mask
from realm_tf.tokenization import span_lengths
from realm_tf.tokenization import spanbert_mask
from realm_tf.tokenization import wordpiece_span
from realm_tf.tokenization.bert_packer import pack_segments

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "##s", "on", "mat",
         ".", "a", "dog", "john", "paris", "##ian", "in"]
PAD, UNK, CLS, SEP, MASK = 0, 1, 2, 3, 4
THE, CAT, SAT, S, ON, MAT, DOT, A, DOG, JOHN, PARIS, IAN, IN = range(5, 18)
SPECIALS = (PAD, CLS, SEP)


@pytest.fixture(scope="module")
def tokenizer():
  return WordpieceTokenizer(VOCAB)


def _np(features):
  return {name: value.numpy().tolist() for name, value in features.items()}


def _roundtrip(layer):
  return keras.layers.deserialize(keras.layers.serialize(layer))


class TestWordpieceTokenizer:

  def test_exact_ids_with_merged_wordpieces(self, tokenizer):
    ids = tokenizer(tf.constant(["The cats sat on the mat.", "Parisian dogs"]))
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    assert ids.to_list() == [[THE, CAT, S, SAT, ON, THE, MAT, DOT], [PARIS, IAN, DOG, S]]

  def test_lower_case(self, tokenizer):
    assert tokenizer(tf.constant(["THE CaT"])).to_list() == [[THE, CAT]]
    cased = WordpieceTokenizer(VOCAB, lower_case=False)
    assert cased(tf.constant(["THE cat"])).to_list() == [[UNK, CAT]]

  def test_unknown_words(self, tokenizer):
    assert tokenizer(tf.constant(["zebra cat xs"])).to_list() == [[UNK, CAT, UNK]]

  def test_invalid_utf8_does_not_crash(self, tokenizer):
    ids = tokenizer(tf.constant([b"the \xff\xfe cat", b"\xc3", b"cat\x80s"]))
    assert ids.to_list() == [[THE, UNK, CAT], [UNK], [UNK]]

  def test_empty_strings_give_empty_rows(self, tokenizer):
    assert tokenizer(tf.constant(["", "cat", "   "])).to_list() == [[], [CAT], []]

  def test_scalar_input_gives_dense_row(self, tokenizer):
    ids = tokenizer(tf.constant("the cat"))
    assert not isinstance(ids, tf.RaggedTensor)
    assert ids.numpy().tolist() == [THE, CAT]

  def test_special_ids_and_lookup(self, tokenizer):
    assert (tokenizer.pad_id, tokenizer.unk_id, tokenizer.cls_id, tokenizer.sep_id,
            tokenizer.mask_id) == (PAD, UNK, CLS, SEP, MASK)
    assert tokenizer.vocab_size == len(VOCAB)
    assert tokenizer.token_to_id("##ian") == IAN
    assert tokenizer.id_to_token(MAT) == "mat"
    with pytest.raises(IndexError):
      tokenizer.id_to_token(len(VOCAB))
    with pytest.raises(ValueError, match="MASK"):
      WordpieceTokenizer([t for t in VOCAB if t != "[MASK]"])

  def test_literal_special_tokens_in_text_are_not_special(self, tokenizer):
    assert CLS not in tokenizer(tf.constant(["[CLS] the"])).flat_values.numpy()

  def test_detokenize(self, tokenizer):
    text = tokenizer.detokenize(tf.ragged.constant([[THE, CAT, S, SAT, DOT], []]))
    assert text.numpy().tolist() == [b"the cats sat .", b""]
    assert tokenizer.detokenize(tf.constant([PARIS, IAN])).numpy() == b"parisian"

  def test_tokenize_with_offsets(self, tokenizer):
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["Caf\u00e9 cats."]))
    assert ids.to_list() == [[UNK, CAT, S, DOT]]
    assert starts.to_list() == [[0, 6, 9, 10]]
    assert ends.to_list() == [[5, 9, 10, 11]]

  def test_from_vocab_file(self, tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("\n".join(VOCAB) + "\n")
    tokenizer = WordpieceTokenizer.from_vocab_file(str(path))
    assert tokenizer.vocabulary == VOCAB
    assert tokenizer(tf.constant(["cats"])).to_list() == [[CAT, S]]

  def test_config_roundtrip(self, tokenizer):
    restored = _roundtrip(tokenizer)
    assert isinstance(restored, WordpieceTokenizer)
    assert restored.get_config() == tokenizer.get_config()
    text = tf.constant(["The cats sat."])
    assert restored(text).to_list() == tokenizer(text).to_list()

  def test_the_vocabulary_is_not_a_structure_each_eager_call_walks(self, tokenizer):
    # Keras walks every tracked list and dict of a layer on each eager call: a tracked
    # vocabulary cost ~90 ms a call at 30,522 wordpieces.
    tracked = tokenizer._self_tracked_trackables  # pylint: disable=protected-access
    assert not any(isinstance(t, tf.__internal__.tracking.TrackableDataStructure)
                   for t in tracked), tracked
    assert tokenizer.vocabulary == VOCAB and tokenizer.token_to_id("mat") == VOCAB.index("mat")


class TestBertPacker:

  def test_single_segment(self):
    packer = BertPacker(seq_length=6, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    features = _np(packer(tf.ragged.constant([[5, 6, 7, 8, 9], [5], []])))
    assert features["input_word_ids"] == [[CLS, 5, 6, 7, 8, SEP], [CLS, 5, SEP, 0, 0, 0],
                                          [CLS, SEP, 0, 0, 0, 0]]
    assert features["input_mask"] == [[1] * 6, [1, 1, 1, 0, 0, 0], [1, 1, 0, 0, 0, 0]]
    assert features["input_type_ids"] == [[0] * 6] * 3

  def test_waterfall_gives_first_segment_priority(self):
    packer = BertPacker(seq_length=8, cls_id=CLS, sep_id=SEP, pad_id=PAD)
    first = tf.ragged.constant([[10, 11, 12, 13, 14, 15], [10, 11], []])
    second = tf.ragged.constant([[20, 21, 22], [20, 21, 22, 23, 24], [20]])
    features = _np(packer((first, second)))
    assert features["input_word_ids"] == [[CLS, 10, 11, 12, 13, 14, SEP, SEP],
                                          [CLS, 10, 11, SEP, 20, 21, 22, SEP],
                                          [CLS, SEP, 20, SEP, 0, 0, 0, 0]]
    assert features["input_type_ids"] == [[0, 0, 0, 0, 0, 0, 0, 1],
                                          [0, 0, 0, 0, 1, 1, 1, 1],
                                          [0, 0, 1, 1, 0, 0, 0, 0]]
    assert features["input_mask"] == [[1] * 8, [1] * 8, [1, 1, 1, 1, 0, 0, 0, 0]]

  def test_round_robin_deals_the_budget_in_turns(self):
    packer = BertPacker(seq_length=8, cls_id=CLS, sep_id=SEP, truncation="round_robin")
    first = tf.ragged.constant([[10, 11, 12, 13, 14, 15], [10]])
    second = tf.ragged.constant([[20, 21, 22, 23], [20, 21, 22, 23, 24, 25]])
    features = _np(packer((first, second)))
    assert features["input_word_ids"] == [[CLS, 10, 11, 12, SEP, 20, 21, SEP],
                                          [CLS, 10, SEP, 20, 21, 22, 23, SEP]]

  def test_truncation_is_deterministic(self):
    packer = BertPacker(seq_length=5, cls_id=CLS, sep_id=SEP)
    segments = (tf.ragged.constant([[10, 11, 12]]), tf.ragged.constant([[20, 21, 22]]))
    assert _np(packer(segments)) == _np(packer(segments))

  def test_single_example_and_tf_function(self):
    packer = BertPacker(seq_length=5, cls_id=CLS, sep_id=SEP)
    pack = tf.function(lambda a, b: packer((a, b)))
    features = _np(pack(tf.constant([10, 11]), tf.constant([20, 21])))
    assert features["input_word_ids"] == [CLS, 10, 11, SEP, SEP]
    assert features["input_type_ids"] == [0, 0, 0, 0, 1]

  @pytest.mark.parametrize("truncation", ["waterfall", "round_robin"])
  def test_matches_tensorflow_text_on_random_segments(self, truncation):
    """The oracle: tensorflow-text's trimmer, `combine_segments` and `pad_model_inputs`."""
    trimmer = {"waterfall": tf_text.WaterfallTrimmer,
               "round_robin": tf_text.RoundRobinTrimmer}[truncation]
    rng = np.random.default_rng(0)
    for _ in range(150):
      batch, length, count = rng.integers(0, 5), int(rng.integers(3, 12)), rng.integers(1, 3)
      segments = [tf.RaggedTensor.from_row_lengths(
          rng.integers(5, 50, int(lengths.sum())), lengths)
                  for lengths in rng.integers(0, 14, [count, batch])]
      word_ids, type_ids = tf_text.combine_segments(
          trimmer(length - 1 - count).trim(segments), start_of_sequence_id=CLS,
          end_of_segment_id=SEP)
      expected_ids, expected_mask = tf_text.pad_model_inputs(word_ids, length, pad_value=PAD)
      expected_types, _ = tf_text.pad_model_inputs(type_ids, length)
      features = pack_segments(segments, tf.constant(length), CLS, SEP, PAD, truncation)
      for name, expected in [("input_word_ids", expected_ids), ("input_mask", expected_mask),
                             ("input_type_ids", expected_types)]:
        np.testing.assert_array_equal(features[name].numpy().reshape(batch, length),
                                      expected.numpy().reshape(batch, length),
                                      err_msg=f"{name} of {segments}")

  def test_rejects_bad_arguments(self):
    with pytest.raises(ValueError, match="truncation"):
      BertPacker(seq_length=8, cls_id=CLS, sep_id=SEP, truncation="longest_first")
    with pytest.raises(ValueError, match="two segments"):
      BertPacker(8, CLS, SEP)([tf.ragged.constant([[1]])] * 3)

  def test_config_roundtrip(self):
    packer = BertPacker(seq_length=7, cls_id=CLS, sep_id=SEP, pad_id=PAD,
                        truncation="round_robin")
    restored = _roundtrip(packer)
    assert isinstance(restored, BertPacker)
    assert restored.get_config() == packer.get_config()


class TestFeaturizers:

  def test_block_title_priority_and_segments(self, tokenizer):
    block = BlockFeaturizer(tokenizer, seq_length=8)
    features = _np(block((tf.constant(["Paris", "the cat the cat the cat"]),
                          tf.constant(["The cat sat on the mat.", "dogs"]))))
    assert features["input_word_ids"] == [[CLS, PARIS, SEP, THE, CAT, SAT, ON, SEP],
                                          [CLS, THE, CAT, THE, CAT, THE, SEP, SEP]]
    assert features["input_type_ids"] == [[0, 0, 0, 1, 1, 1, 1, 1],
                                          [0, 0, 0, 0, 0, 0, 0, 1]]

  def test_query_in_dataset_map(self, tokenizer):
    query = QueryFeaturizer(tokenizer, seq_length=5)
    strings = ["the cat", "", "a dog sat on the mat"]
    expected = [[CLS, THE, CAT, SEP, PAD], [CLS, SEP, PAD, PAD, PAD], [CLS, A, DOG, SAT, SEP]]
    batched = tf.data.Dataset.from_tensor_slices(strings).batch(3).map(query)
    assert batched.element_spec["input_word_ids"].shape.as_list() == [None, 5]
    assert next(iter(batched))["input_word_ids"].numpy().tolist() == expected
    unbatched = tf.data.Dataset.from_tensor_slices(strings).map(query)
    assert [f["input_word_ids"].numpy().tolist() for f in unbatched] == expected

  def test_reader_input_and_block_mask(self):
    reader = ReaderFeaturizer(cls_id=CLS, sep_id=SEP, pad_id=PAD, seq_length=9)
    query = tf.ragged.constant([[THE, MASK, SAT], [DOG]])
    body = tf.ragged.constant([[ON, THE, MAT, DOT], [CAT]])
    features = _np(reader((query, body)))
    assert features["input_word_ids"] == [[CLS, THE, MASK, SAT, SEP, ON, THE, MAT, SEP],
                                          [CLS, DOG, SEP, CAT, SEP, PAD, PAD, PAD, PAD]]
    assert features["input_type_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1, 1],
                                          [0, 0, 0, 1, 1, 0, 0, 0, 0]]
    assert features["block_mask"] == [[0, 0, 0, 0, 0, 1, 1, 1, 0],
                                      [0, 0, 0, 1, 0, 0, 0, 0, 0]]
    assert features["input_mask"] == [[1] * 9, [1, 1, 1, 1, 1, 0, 0, 0, 0]]

  def test_reader_single_example(self):
    reader = ReaderFeaturizer(cls_id=CLS, sep_id=SEP, seq_length=6)
    features = _np(reader((tf.constant([DOG]), tf.constant([CAT]))))
    assert features["block_mask"] == [0, 0, 0, 1, 0, 0]

  def test_block_body_ids_feed_the_reader(self, tokenizer):
    blocks = BlockFeaturizer(tokenizer, seq_length=8)((tf.constant(["Paris", "", "john"]),
                                                       tf.constant(["cat sat.", "", "dog"])))
    bodies = block_body_ids(blocks["input_word_ids"], blocks["input_type_ids"],
                            blocks["input_mask"])
    assert bodies.to_list() == [[CAT, SAT, DOT], [], [DOG]]

  def test_config_roundtrip(self, tokenizer):
    layers = [BlockFeaturizer(tokenizer, seq_length=12), QueryFeaturizer(tokenizer),
              ReaderFeaturizer.from_tokenizer(tokenizer, seq_length=320)]
    for layer in layers:
      restored = _roundtrip(layer)
      assert type(restored) is type(layer)
      assert restored.get_config() == layer.get_config()
    titles, bodies = tf.constant(["Paris"]), tf.constant(["The cat sat."])
    assert _np(_roundtrip(layers[0])((titles, bodies))) == _np(layers[0]((titles, bodies)))

  def test_span_text_reads_orqas_answer_string(self, tokenizer):
    featurizer = Featurizer(tokenizer, query_length=4, block_length=12, reader_length=12)
    _, query_ids = featurizer.questions(tf.constant(["the"]))
    text = "Parisian cats sat."  # paris ##ian cat ##s sat .
    inputs = featurizer.reader_inputs(query_ids, tf.constant([["x"]]), tf.constant([[text]]))
    assert inputs["input_word_ids"].numpy()[0, :9].tolist() == [
        CLS, THE, SEP, PARIS, IAN, CAT, S, SAT, DOT]
    spans = [(3, 3), (4, 4), (5, 5), (6, 6), (4, 5), (7, 7), (8, 8), (7, 8), (3, 8)]
    cut = featurizer.span_text(
        tf.constant([text] * len(spans)), tf.repeat(inputs["input_word_ids"], len(spans), 0),
        tf.repeat(inputs["block_mask"], len(spans), 0), [s for s, _ in spans],
        [e for _, e in spans])
    # As ORQA: a word's first wordpieces read that prefix, a span holding a "##" piece reads
    # the whole original tokens, and original tokens (punctuation is one) are joined by spaces.
    assert [t.decode() for t in cut.numpy()] == [
        "Paris", "Parisian", "cat", "cats", "Parisian cats", "sat", ".", "sat .",
        "Parisian cats sat ."]


class TestMasking:
  IDS = [[CLS, JOHN, SAT, IN, PARIS, IAN, DOT, SEP, PAD, PAD],
         [CLS, THE, CAT, SAT, SEP, PAD, PAD, PAD, PAD, PAD]]

  def _salient(self, start, end, ids=None, max_predictions=4):
    return _np(salient_span_mask(tf.constant(ids or self.IDS), tf.constant(start),
                                 tf.constant(end), mask_id=MASK, special_ids=SPECIALS,
                                 max_predictions=max_predictions))

  def test_salient_span_exact(self):
    features = self._salient([4, 1], [5, 1])
    assert features["input_word_ids"] == [
        [CLS, JOHN, SAT, IN, MASK, MASK, DOT, SEP, PAD, PAD],
        [CLS, MASK, CAT, SAT, SEP, PAD, PAD, PAD, PAD, PAD]]
    assert features["masked_lm_positions"] == [[4, 5, 0, 0], [1, 0, 0, 0]]
    assert features["masked_lm_ids"] == [[PARIS, IAN, 0, 0], [THE, 0, 0, 0]]
    assert features["masked_lm_weights"] == [[1, 1, 0, 0], [1, 0, 0, 0]]

  @pytest.mark.parametrize("start, end", [
      (1, 5),    # 5 wordpieces > max_predictions=4: rejected, not truncated
      (6, 7),    # covers [SEP]
      (0, 1),    # covers [CLS]
      (9, 10),   # reaches past L
      (-1, 0),   # starts before 0
      (3, 2),    # empty
  ])
  def test_invalid_salient_spans_get_zero_weight(self, start, end):
    features = self._salient([start, 2], [end, 3])
    assert features["input_word_ids"][0] == self.IDS[0]
    assert features["masked_lm_weights"][0] == [0, 0, 0, 0]
    assert features["masked_lm_positions"][0] == [0, 0, 0, 0]
    assert features["masked_lm_weights"][1] == [1, 1, 0, 0]

  def test_salient_span_single_example_pads_to_m(self):
    features = _np(salient_span_mask(tf.constant([CLS, CAT, SEP]), 1, 1, mask_id=MASK,
                                     special_ids=SPECIALS, max_predictions=10))
    assert features["input_word_ids"] == [CLS, MASK, SEP]
    assert features["masked_lm_positions"] == [1] + [0] * 9
    assert features["masked_lm_weights"] == [1] + [0] * 9

  def test_random_token_mask(self):
    ids = tf.constant([[CLS] + [CAT] * 20 + [SEP] + [PAD] * 8, [CLS, SEP] + [PAD] * 28])
    mask = lambda seed: _np(random_token_mask(ids, mask_id=MASK, special_ids=SPECIALS,
                                              seed=seed, max_predictions=10))
    features = mask(7)
    assert features == mask(7)
    assert features != mask(8)
    assert sum(features["masked_lm_weights"][0]) == 3  # round(0.15 * 20)
    assert features["masked_lm_weights"][1] == [0] * 10
    positions = features["masked_lm_positions"][0][:3]
    assert positions == sorted(positions) and all(1 <= p <= 20 for p in positions)
    masked = [i for i, t in enumerate(features["input_word_ids"][0]) if t == MASK]
    assert masked == positions
    assert features["masked_lm_ids"][0][:3] == [CAT] * 3

  def test_random_span_mask(self):
    ids = tf.constant([[CLS] + [CAT] * 12 + [SEP] + [DOG] * 3 + [SEP]] * 64)
    mask = lambda seed: _np(random_span_mask(ids, mask_id=MASK, special_ids=SPECIALS,
                                             seed=seed, max_predictions=10))
    features = mask([1, 2])
    assert features == mask([1, 2])
    widths = set()
    for row, weights, positions in zip(features["input_word_ids"],
                                       features["masked_lm_weights"],
                                       features["masked_lm_positions"]):
      width = int(sum(weights))
      assert 1 <= width <= 10
      span = positions[:width]
      assert span == list(range(span[0], span[0] + width))
      assert all(t not in SPECIALS for p, t in enumerate(ids.numpy()[0]) if p in span)
      assert [p for p, t in enumerate(row) if t == MASK] == span
      widths.add(width)
    assert len(widths) > 3

  def test_random_span_width_is_cut_to_the_maskable_run(self):
    ids = tf.constant([[CLS, CAT, DOG, SEP, PAD], [CLS, SEP, PAD, PAD, PAD]])
    features = _np(random_span_mask(ids, mask_id=MASK, special_ids=SPECIALS, seed=3,
                                    max_predictions=10))
    assert 1 <= sum(features["masked_lm_weights"][0]) <= 2
    assert sum(features["masked_lm_weights"][1]) == 0

  def test_wordpiece_span_from_byte_offsets(self, tokenizer):
    text = tf.constant(["John sat in Parisian cats", "the cat"])
    _, starts, ends = tokenizer.tokenize_with_offsets(text)
    # "Parisian" is bytes [12, 20) = wordpieces 3..4; "cat" [4, 7) = wordpiece 1; no overlap.
    start, end = wordpiece_span(starts, ends, tf.constant([12, 4]), tf.constant([20, 7]))
    assert start.numpy().tolist() == [4, 2] and end.numpy().tolist() == [5, 2]
    start, end = wordpiece_span(starts[1], ends[1], 100, 105)
    assert (int(start), int(end)) == (-1, -2)

  def test_masking_in_dataset_map(self, tokenizer):
    query = QueryFeaturizer(tokenizer, seq_length=8)

    def featurize(text, start, end):
      features = query(text)
      features.update(salient_span_mask(features["input_word_ids"], start, end, mask_id=MASK,
                                        special_ids=SPECIALS, max_predictions=3))
      return features

    dataset = tf.data.Dataset.from_tensor_slices((["John sat in Parisian"], [4], [5]))
    features = next(iter(dataset.map(featurize)))
    assert features["input_word_ids"].numpy().tolist() == [CLS, JOHN, SAT, IN, MASK, MASK,
                                                           SEP, PAD]
    assert features["masked_lm_ids"].numpy().tolist() == [PARIS, IAN, 0]


class TestSpanbertMasking:
  # Multi-wordpiece words, accents (stripped by the lower-casing tokenizer) and punctuation.
  VOCAB = VOCAB + ["love", "##lace", "caf", "##e", "re", "##sum", "##es", "na", "##ive", ",",
                   "'", "-", "well", "known", "owner"]
  CHI2_9_999 = 27.877  # the 99.9% quantile of chi-square with 9 degrees of freedom

  @staticmethod
  def _chi_square(lengths):
    """Pearson's chi-square of a length sample against Geo(0.2) clipped to 1..10."""
    pmf = 0.2 * 0.8 ** np.arange(10)
    expected = len(lengths) * pmf / pmf.sum()
    counts = np.bincount(lengths, minlength=11)
    assert counts[0] == 0 and len(counts) == 11  # every length in 1..10
    return float(((counts[1:] - expected) ** 2 / expected).sum())

  def test_span_lengths_follow_the_clipped_geometric(self):
    lengths = span_lengths([4, 25_000], seed=[7, 1]).numpy().ravel()
    assert self._chi_square(lengths) < self.CHI2_9_999
    assert abs(lengths.mean() - 3.797) < 0.03  # sum l p(l) of the renormalised pmf
    # The bound tells the old sampler apart: uniform 1..10 lengths score about 48,000.
    uniform = np.random.default_rng(0).integers(1, 11, lengths.size)
    assert self._chi_square(uniform) > 100 * self.CHI2_9_999
    with pytest.raises(ValueError, match="0 < p < 1"):
      span_lengths([1, 4], seed=0, p=1.0)

  def _random_rows(self, num_rows, seed):
    """Rows `[CLS] words [SEP] [PAD]...` of 3..60 words of 1..3 wordpieces."""
    words = [[CAT], [CAT, S], [PARIS, IAN], [DOT], [THE], [17, 18], [19, 20, 21]]  # re ##sum ##es
    rng = np.random.default_rng(seed)
    rows = [sum((words[k] for k in rng.integers(0, len(words), n)), [])
            for n in rng.integers(3, 61, num_rows)]
    width = max(map(len, rows)) + 2
    return np.array([[CLS] + r + [SEP] + [PAD] * (width - len(r) - 2) for r in rows])

  def _mask(self, ids, seed=0, max_predictions=10, vocab=None):
    continuation = [t.startswith("##") for t in (vocab or self.VOCAB)]
    return _np(spanbert_mask(tf.constant(ids), mask_id=MASK, special_ids=SPECIALS,
                             continuation=continuation, seed=seed,
                             max_predictions=max_predictions))

  @pytest.mark.parametrize("max_predictions", [10, 64])
  def test_masks_the_budget_in_whole_word_spans(self, max_predictions):
    ids = self._random_rows(300, seed=max_predictions)
    features = self._mask(ids, seed=5, max_predictions=max_predictions)
    total = runs = words = 0
    for row, masked_row, weights in zip(ids, features["input_word_ids"],
                                        features["masked_lm_weights"]):
      maskable = int(np.isin(row, SPECIALS, invert=True).sum())
      budget = min(max_predictions, max(1, round(0.15 * maskable)))
      count = int(sum(weights))
      # Whole words of <= 3 wordpieces: the last word passes the budget by <= 2, never M.
      assert min(budget, max_predictions - 2) <= count <= min(budget + 2, max_predictions)
      assert count == sum(t == MASK for t in masked_row)
      masked = np.array(masked_row) == MASK
      starts = masked & ~np.isin(row, [S, IAN, 18, 20, 21])
      words += int(starts.sum())
      runs += int((masked[1:] & ~masked[:-1]).sum())
      total += maskable
    share = sum(sum(w) for w in features["masked_lm_weights"]) / total
    assert (0.13 if max_predictions == 64 else 0.08) < share < 0.17
    # Spans, not tokens: a run of masks holds ~2-3 words here (single words would give ~1.1).
    assert words / runs > 1.8

  def test_spans_never_split_a_word(self):
    tokenizer = WordpieceTokenizer(self.VOCAB)
    text = ("The naïve café owner, Ada Lovelace, sat on the well-known mat in Paris; "
            "John's résumés - the Parisian cat's résumé.")
    pieces = tokenizer(tf.constant([text])).to_list()[0]
    assert pieces.count(self.VOCAB.index("##sum")) == 2 and UNK in pieces  # ";" is unknown
    ids = [[CLS] + pieces + [SEP]] * 400
    features = self._mask(ids, seed=11, max_predictions=10)
    continuation = np.array([self.VOCAB[t].startswith("##") for t in ids[0]])
    split_words = 0
    for masked_row in features["input_word_ids"]:
      masked = np.array(masked_row) == MASK
      split_words += int((continuation[1:] & (masked[1:] != masked[:-1])).sum())
    assert split_words == 0
    # ... and multi-wordpiece words are masked (the check is not vacuous).
    assert sum(np.array(r)[continuation].tolist().count(MASK) for r in
               features["input_word_ids"]) > 100

  def test_deterministic_in_the_seed(self):
    ids = self._random_rows(8, seed=0)
    assert self._mask(ids, seed=[3, 4]) == self._mask(ids, seed=[3, 4])
    assert self._mask(ids, seed=[3, 4]) != self._mask(ids, seed=[3, 5])
    single = self._mask(ids[0], seed=9)
    assert single == self._mask(ids[0], seed=9) and sum(single["masked_lm_weights"]) > 0

  def test_a_row_with_nothing_maskable_gets_zero_weights(self):
    features = self._mask([[CLS, SEP, PAD, PAD], [CLS, CAT, S, SEP]])
    assert features["masked_lm_weights"][0] == [0] * 10
    assert features["input_word_ids"] == [[CLS, SEP, PAD, PAD], [CLS, MASK, MASK, SEP]]
