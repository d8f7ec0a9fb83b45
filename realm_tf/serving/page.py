"""The page served at `GET /`: one self-contained HTML document (inline CSS and script, no
external assets, works offline) that posts the question to `/v1/ask` and shows the answer
highlighted inside its block, the other retrieved blocks with titles and scores, and the
latency. Element ids the browser test reads: question, ask, answer, score, latency, error,
evidence (one `li.block` per block, its title in `.title`, the answer in `mark`)."""

PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>REALM question answering</title>
<style>
  body { font: 15px/1.45 system-ui, sans-serif; max-width: 52rem; margin: 2rem auto;
         padding: 0 1rem; color: #1d1d1f; }
  h1 { font-size: 1.3rem; margin-bottom: .2rem; }
  .sub { color: #666; font-size: .85rem; margin-top: 0; }
  form { display: flex; gap: .5rem; margin: 1rem 0; }
  #question { flex: 1; font-size: 1rem; padding: .45rem .6rem; border: 1px solid #aaa;
              border-radius: 6px; }
  #top_k { width: 4rem; padding: .45rem; border: 1px solid #aaa; border-radius: 6px; }
  button { font-size: 1rem; padding: .45rem 1rem; border: 0; border-radius: 6px;
           background: #2456c7; color: #fff; cursor: pointer; }
  button:disabled { background: #8aa0d0; }
  #result[hidden], #error[hidden] { display: none; }
  .answer-line { font-size: 1.15rem; margin: .4rem 0; }
  #answer { font-weight: 600; }
  .meta { color: #555; font-size: .85rem; }
  #error { color: #a40000; background: #fdecea; padding: .5rem .7rem; border-radius: 6px; }
  ol { padding-left: 1.3rem; }
  li.block { margin: .6rem 0; padding: .5rem .7rem; border: 1px solid #ddd; border-radius: 6px; }
  li.block.best { border-color: #e0b400; background: #fffbea; }
  .title { font-weight: 600; }
  .bscore { float: right; color: #555; font-variant-numeric: tabular-nums; }
  mark { background: #ffd84d; padding: 0 .1rem; border-radius: 3px; }
</style>
</head>
<body>
<h1>REALM: ask a question</h1>
<p class="sub" id="model"></p>
<form id="form">
  <input id="question" name="question" autocomplete="off" autofocus
         placeholder="who wrote hamlet?" aria-label="question">
  <input id="top_k" name="top_k" type="number" min="1" aria-label="blocks to read">
  <button id="ask" type="submit">Ask</button>
</form>
<p id="error" role="alert" hidden></p>
<section id="result" hidden>
  <p class="answer-line">Answer: <span id="answer"></span></p>
  <p class="meta">score <span id="score"></span> &middot; latency <span id="latency"></span>
     ms (server <span id="server_latency"></span> ms)</p>
  <h2 class="meta">Retrieved blocks</h2>
  <ol id="evidence"></ol>
</section>
<script>
"use strict";
const $ = (id) => document.getElementById(id);

function blockItem(block, isBest) {
  const li = document.createElement("li");
  li.className = isBest ? "block best" : "block";
  const score = document.createElement("span");
  score.className = "bscore";
  score.textContent = block.score.toFixed(3);
  const title = document.createElement("div");
  title.className = "title";
  title.textContent = block.title || "(untitled)";
  const text = document.createElement("div");
  text.className = "text";
  if (isBest && block.answer_start !== null) {
    const mark = document.createElement("mark");
    mark.textContent = block.text.slice(block.answer_start, block.answer_end);
    text.append(block.text.slice(0, block.answer_start), mark,
                block.text.slice(block.answer_end));
  } else {
    text.textContent = block.text;
  }
  li.append(score, title, text);
  return li;
}

function show(reply, millis) {
  $("answer").textContent = reply.answer || "(no answer span found)";
  $("score").textContent = reply.score.toFixed(3);
  $("latency").textContent = millis.toFixed(1);
  $("server_latency").textContent = reply.latency_ms.toFixed(1);
  const list = $("evidence");
  list.replaceChildren(...reply.evidence.map(
      (block, i) => blockItem(block, i === reply.answer_block)));
  $("result").hidden = false;
}

$("form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = { question: $("question").value };
  if ($("top_k").value) body.top_k = Number($("top_k").value);
  $("ask").disabled = true;
  $("error").hidden = true;
  const start = performance.now();
  try {
    const response = await fetch("v1/ask", { method: "POST",
        headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
    const reply = await response.json();
    if (!response.ok) throw new Error(reply.error || response.statusText);
    show(reply, performance.now() - start);
  } catch (error) {
    $("error").textContent = String(error.message || error);
    $("error").hidden = false;
    $("result").hidden = true;
  } finally {
    $("ask").disabled = false;
  }
});

fetch("v1/info").then((r) => r.json()).then((info) => {
  $("model").textContent = `${info.model_dir} \\u00b7 ${info.corpus.num_blocks} blocks \\u00b7 ` +
      `index ${info.index.version}`;
  $("top_k").value = info.default_top_k;
  $("top_k").max = info.corpus.num_blocks;
});
</script>
</body>
</html>
"""
