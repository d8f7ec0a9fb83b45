"""REALM losses: pre-training marginal likelihood, retrieval utility, Open-QA loss."""
from realm_tf.losses.mlm_marginal_likelihood import marginal_mlm_loss
from realm_tf.losses.mlm_marginal_likelihood import marginal_token_log_probs
from realm_tf.losses.mlm_marginal_likelihood import masked_token_log_probs
from realm_tf.losses.mlm_marginal_likelihood import sequence_marginal_log_probs
from realm_tf.losses.open_qa_loss import correct_spans
from realm_tf.losses.open_qa_loss import marginal_log_loss
from realm_tf.losses.open_qa_loss import open_qa_loss
from realm_tf.losses.open_qa_loss import per_document_reader_loss
from realm_tf.losses.retrieval_utility import document_retrieval_utility
from realm_tf.losses.retrieval_utility import retrieval_utility
