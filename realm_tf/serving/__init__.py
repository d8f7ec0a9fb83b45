"""`realm-serve`'s library: an HTTP API over one loaded model, a QA model (with a web page) or a
classification run.

    validation.py  request body (bytes) -> `AskRequest(question, top_k)`,
                   `ClassifyRequest(texts, top_k)` or a 4xx `BadRequest`
    batcher.py     concurrent texts -> batches answered by one worker thread
    service.py     the loaded `Asker` or `ClassificationModel`: answers a batch, names the model
    responses.py   `Answer` -> JSON (evidence blocks with the answer's character span),
                   `Classification`s -> JSON (labels, probabilities, evidence blocks)
    page.py        the self-contained HTML page served at `/` (QA models)
    app.py         the Starlette application (routes, error replies)
    server.py      running the application on uvicorn (foreground or a background thread)
"""
