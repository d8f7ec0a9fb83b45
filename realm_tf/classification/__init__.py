"""Retrieval-augmented classification: p(y|x) = Σ_z p(z|x) p(y|z,x) over the top-k blocks and
the null document, the reader's [CLS] through `layers.classification_head`, trained end to end
(`realm-train --experiment=classification`; docs/classification.md). Its fact-verification
set is `real_data.fact_verification`.

    data.py               JSONL {"text", "label"} examples and the label set
    retrieval.py          the blocks of a batch: dense (MIPS), BM25 or none, packed for the reader
    step.py               the marginal likelihood (`losses.classification_loss`) and the update
    evaluation.py         accuracy, macro-F1 and each prediction's evidence
    trainer.py            ClassificationTrainer: the run on `training.train_loop.TrainLoop`
    model.py              a trained run loaded for use (`realm-export-hub`, `realm-serve`)
"""
