"""`realm-serve`'s library: an HTTP API and a web page over one loaded QA model.

    validation.py  request body (bytes) -> `AskRequest(question, top_k)` or a 4xx `BadRequest`
    batcher.py     concurrent questions -> batches answered by one worker thread
    service.py     the loaded `Asker`: answers a batch, names the model/corpus/index
    responses.py   `Answer` -> JSON (evidence blocks with the answer's character span)
    page.py        the self-contained HTML page served at `/`
    app.py         the Starlette application (routes, error replies)
    server.py      running the application on uvicorn (foreground or a background thread)
"""
