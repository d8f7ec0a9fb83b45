"""Numerical parity with the reference REALM in `transformers==4.57.6` (PyTorch).

Our random-initialised models are written as TF1 checkpoints under the released REALM/ORQA
names; the reference loads them with its own `load_tf_weights_in_realm` (an independent name
mapping), and every output must agree within 1e-4.
"""
import numpy as np
import pytest
import tensorflow as tf

from realm_tf import checkpoints
from realm_tf import configs
from realm_tf import losses
from realm_tf.checkpoints import variable_maps

torch = pytest.importorskip("torch")
realm_ref = pytest.importorskip("transformers.models.deprecated.realm.modeling_realm")
RealmConfig = pytest.importorskip(
    "transformers.models.deprecated.realm.configuration_realm").RealmConfig

VOCAB, HIDDEN, LAYERS, HEADS, INTER, PROJ, SPAN_HIDDEN = 97, 32, 2, 4, 64, 16, 24
TOL = 1e-4

ENCODER = configs.EncoderConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_layers=LAYERS,
                                num_attention_heads=HEADS, intermediate_size=INTER,
                                hidden_act="gelu_approximate")


def _ref_config(reader_beam_size=3, searcher_beam_size=6):
  return RealmConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                     num_attention_heads=HEADS, intermediate_size=INTER, hidden_act="gelu_new",
                     retriever_proj_size=PROJ, span_hidden_size=SPAN_HIDDEN, max_span_width=10,
                     reader_beam_size=reader_beam_size, searcher_beam_size=searcher_beam_size,
                     num_candidates=4)


def _perturb(model, seed):
  """Random non-default values everywhere (LayerNorm gains and biases included)."""
  rng = np.random.default_rng(seed)
  for v in model.weights:
    v.assign(rng.normal(0.0, 0.2, v.shape).astype(np.float32) +
             (1.0 if "gamma" in v.name else 0.0))


def _features(rng, shape, pad_from=None):
  ids = rng.integers(5, VOCAB, shape).astype(np.int32)
  mask = np.ones(shape, np.int32)
  if pad_from is not None:
    mask[..., pad_from:] = 0
    ids[..., pad_from:] = 0
  types = np.zeros(shape, np.int32)
  types[..., shape[-1] // 2:] = 1
  return dict(input_word_ids=ids, input_mask=mask, input_type_ids=types)


def _torch(features):
  return dict(input_ids=torch.tensor(features["input_word_ids"], dtype=torch.long),
              attention_mask=torch.tensor(features["input_mask"], dtype=torch.long),
              token_type_ids=torch.tensor(features["input_type_ids"], dtype=torch.long))


def _reference(cls, config, arrays, tmp_path, name):
  path = checkpoints.write_tf1_checkpoint(arrays, str(tmp_path / name / "model.ckpt"))
  model = cls(config)
  before = {k: v.clone() for k, v in model.state_dict().items()}
  realm_ref.load_tf_weights_in_realm(model, config, path)
  changed = [k for k, v in model.state_dict().items() if not torch.equal(before[k], v)]
  assert len(changed) > 10, "the reference loaded (almost) nothing: name mapping broken"
  return model.eval()


@pytest.fixture(scope="module")
def retriever():
  model = configs.build_retriever(configs.RetrieverConfig(encoder=ENCODER, projection_size=PROJ))
  rng = np.random.default_rng(0)
  model(dict(query=_features(rng, (1, 5)), candidates=_features(rng, (1, 2, 5))))
  _perturb(model, 1)
  return model


@pytest.fixture(scope="module")
def reader():
  model = configs.build_reader(configs.ReaderConfig(encoder=ENCODER,
                                                    span_hidden_size=SPAN_HIDDEN))
  rng = np.random.default_rng(0)
  model(dict(_features(rng, (1, 5)), masked_lm_positions=np.zeros((1, 1), np.int32),
             block_mask=np.ones((1, 5), np.int32)))
  _perturb(model, 2)
  return model


def test_query_and_document_embeddings_and_relevance(retriever, tmp_path):
  config = _ref_config()
  arrays = checkpoints.tf1_arrays(variable_maps.realm_embedder_map(retriever))
  embedder = _reference(realm_ref.RealmEmbedder, config, arrays, tmp_path, "embedder")
  scorer = _reference(realm_ref.RealmScorer, config, arrays, tmp_path, "scorer")
  rng = np.random.default_rng(3)
  query = _features(rng, (2, 9), pad_from=7)
  candidates = _features(rng, (2, 4, 12), pad_from=10)
  with torch.no_grad():
    ref_query = embedder(**_torch(query)).projected_score.numpy()
    flat = {k: v.reshape(8, 12) for k, v in candidates.items()}
    ref_docs = embedder(**_torch(flat)).projected_score.numpy().reshape(2, 4, PROJ)
    ref_scores = scorer(**_torch(query), **{"candidate_" + k: v for k, v in
                                            _torch(flat).items()}).relevance_score.numpy()
  np.testing.assert_allclose(retriever.embed_query(query).numpy(), ref_query, atol=TOL)
  np.testing.assert_allclose(retriever.embed_candidates(candidates).numpy(), ref_docs, atol=TOL)
  ours = retriever(dict(query=query, candidates=candidates)).numpy()
  np.testing.assert_allclose(ours, ref_scores, atol=TOL, rtol=TOL)


def test_mlm_marginal_loss(reader, tmp_path):
  config = _ref_config()
  arrays = checkpoints.tf1_arrays(variable_maps.realm_encoder_map(reader))
  ref = _reference(realm_ref.RealmKnowledgeAugEncoder, config, arrays, tmp_path, "encoder")
  rng = np.random.default_rng(4)
  batch, k, length = 2, 4, 14
  inputs = _features(rng, (batch, k, length), pad_from=12)
  relevance = rng.normal(0, 2, (batch, k)).astype(np.float32)
  positions = np.array([[1, 2, 3, 0], [4, 6, 0, 0]], np.int32)
  weights = np.array([[1, 1, 1, 0], [1, 1, 0, 0]], np.float32)
  gold = rng.integers(5, VOCAB, positions.shape).astype(np.int32)
  labels = np.zeros((batch, length), np.int64)
  mlm_mask = np.zeros((batch, length), np.float32)
  for b in range(batch):
    for m in range(positions.shape[1]):
      if weights[b, m]:
        labels[b, positions[b, m]] = gold[b, m]
        mlm_mask[b, positions[b, m]] = 1
  flat = {key: v.reshape(batch * k, length) for key, v in inputs.items()}
  with torch.no_grad():
    out = ref(**_torch(flat), relevance_score=torch.tensor(relevance),
              labels=torch.tensor(labels), mlm_mask=torch.tensor(mlm_mask))
  logits = reader.mlm_logits(flat, np.repeat(positions, k, axis=0)).numpy()
  ref_logits = out.logits.numpy()
  for row in range(batch * k):
    np.testing.assert_allclose(logits[row], ref_logits[row, positions[row // k]], atol=TOL)
  loss, _ = losses.marginal_mlm_loss(relevance, logits.reshape(batch, k, 4, VOCAB), gold, weights)
  np.testing.assert_allclose(loss.numpy(), out.loss.numpy(), atol=TOL, rtol=TOL)


def test_span_logits_and_open_qa_loss(retriever, reader, tmp_path):
  k, searcher, length = 3, 6, 16
  config = _ref_config(reader_beam_size=k, searcher_beam_size=searcher)
  arrays = checkpoints.tf1_arrays(variable_maps.orqa_map(retriever, reader))
  ref = _reference(realm_ref.RealmReader, config, arrays, tmp_path, "orqa")
  rng = np.random.default_rng(5)
  inputs = _features(rng, (k, length), pad_from=14)
  block_mask = np.zeros((k, length), bool)
  block_mask[:, 5:13] = True
  relevance = rng.normal(0, 2, (searcher,)).astype(np.float32)
  has_answers = np.array([False, True, False, True, False, False])
  gold_starts = np.array([[6, 8], [-1, -1], [7, -1]], np.int64)
  gold_ends = np.array([[6, 10], [-1, -1], [9, -1]], np.int64)
  with torch.no_grad():
    out = ref(**_torch(inputs), relevance_score=torch.tensor(relevance),
              block_mask=torch.tensor(block_mask), start_positions=torch.tensor(gold_starts),
              end_positions=torch.tensor(gold_ends), has_answers=torch.tensor(has_answers))
    sequence = ref.realm(**_torch(inputs))[0]
    ref_span, ref_starts, ref_ends = ref.qa_outputs(sequence, torch.tensor(block_mask))
  span_logits, starts, ends = reader.span_logits(inputs, block_mask.astype(np.int32))
  np.testing.assert_array_equal(starts.numpy(), ref_starts.numpy())
  np.testing.assert_array_equal(ends.numpy(), ref_ends.numpy())
  valid = np.isin(np.arange(starts.shape[0]), np.nonzero(
      block_mask[0][starts.numpy()] & block_mask[0][ends.numpy()])[0])
  np.testing.assert_allclose(span_logits.numpy()[:, valid], ref_span.numpy()[:, valid], atol=TOL)
  correct = losses.correct_spans(starts, ends, gold_starts[None].astype(np.int32),
                                 gold_ends[None].astype(np.int32))
  loss, parts = losses.open_qa_loss(relevance[None], has_answers[None], span_logits[None],
                                    correct)
  np.testing.assert_allclose(parts["retriever_loss"].numpy()[0], out.retriever_loss.numpy(),
                             atol=TOL, rtol=TOL)
  np.testing.assert_allclose(parts["reader_loss"].numpy()[0], out.reader_loss.numpy(),
                             atol=TOL, rtol=TOL)
  np.testing.assert_allclose(loss.numpy(), out.loss.numpy(), atol=TOL, rtol=TOL)


def test_orqa_retriever_names(retriever, tmp_path):
  """The fine-tuned (one module deeper) retriever names load into the reference embedder."""
  config = _ref_config()
  arrays = {n: a for n, a in checkpoints.tf1_arrays(
      variable_maps.orqa_map(retriever, configs.build_reader(
          configs.ReaderConfig(encoder=ENCODER, span_hidden_size=SPAN_HIDDEN)))).items()
            if n.startswith("module/")}
  embedder = _reference(realm_ref.RealmEmbedder, config, arrays, tmp_path, "orqa_embedder")
  query = _features(np.random.default_rng(6), (2, 7))
  with torch.no_grad():
    ref_query = embedder(**_torch(query)).projected_score.numpy()
  np.testing.assert_allclose(retriever.embed_query(query).numpy(), ref_query, atol=TOL)
