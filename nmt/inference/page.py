"""The web page of ``serve.py``: one HTML document with its script and styles inline (nothing is fetched
from the network). It posts each line of the text to /api/translate as a sentence of its own (the API takes
one sentence a request) and shows the translations line by line, and the n-best list and the heatmap of the
chosen line, layer and head (drawn on a canvas; ``data-heatmap`` on the canvas says when it is drawn, for
tests and scripts). A text of several lines can be stopped: the line under way is finished (the server would
decode it anyway), the rest not asked for, and those done are shown."""

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{{title}}</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
textarea { width: 100%; font-size: 1rem; padding: 0.4rem; box-sizing: border-box; }
button { font-size: 1rem; padding: 0.3rem 1rem; margin: 0.5rem 0.5rem 0.5rem 0; }
#translation { font-size: 1.3rem; margin: 1rem 0; min-height: 1.6rem; white-space: pre-line; }
#error { color: #b00020; } #note { color: #8a5a00; } table { border-collapse: collapse; margin: 0.5rem 0; }
th, td { border: 1px solid #ccc; padding: 0.2rem 0.5rem; text-align: left; } th { background: #f3f3f3; }
canvas { border: 1px solid #eee; margin-top: 0.5rem; } label { margin-right: 1rem; }
</style></head>
<body>
<h1>{{title}}</h1>
<form id="form">
  <textarea id="source" rows="3" placeholder="Type a sentence (several: one a line)"></textarea><br>
  <label>n-best <select id="nbest"></select></label>
  <button id="go" type="submit">Translate</button>
  <button id="stop" type="button" hidden>Stop</button>
</form>
<div id="error" role="alert"></div>
<div id="note"></div>
<div id="translation" aria-live="polite"></div>
<table id="nbest-table" hidden><thead><tr><th>#</th><th>score</th><th>output</th></tr></thead><tbody></tbody></table>
<div id="choose" hidden>
  <label id="line-label" hidden>line <select id="line"></select></label>
  <label>layer <select id="layer"></select></label><label>head <select id="head"></select></label>
</div>
<canvas id="heatmap" width="10" height="10" hidden></canvas>
<script>
"use strict";
let results = [], result = null, stopping = null;  // stopping: {asked: bool} of a text under way
const $ = (id) => document.getElementById(id);

async function info() {
  const response = await fetch("/api/info");
  const data = await response.json();
  for (let n = 1; n <= data.max_n_best; n++) $("nbest").add(new Option(String(n), String(n)));
  // no maxLength on the box: the server's max_chars is each line's (a request's), and a box cut at it cut a
  // text of several lines mid-line, silently; a line over it is refused by the server, naming the line
}

function fill(select, values) {
  select.innerHTML = "";
  values.forEach((v, i) => select.add(new Option(String(v), String(i))));
}

function fillHeads() {
  // the chosen layer's heads: an ensemble's members may have other numbers of heads (an RNN's attention: one)
  const layers = Object.keys(result.attention), chosen = $("head").value;
  const heads = layers.length ? result.attention[layers[$("layer").value]].map((_, h) => h) : [];
  fill($("head"), heads);
  if (chosen !== "" && Number(chosen) < heads.length) $("head").value = chosen;
}

function draw() {
  const canvas = $("heatmap");
  const layers = Object.keys(result.attention);
  if (!layers.length) { canvas.hidden = true; return; }
  const weights = result.attention[layers[$("layer").value]][$("head").value];
  const src = result.source_tokens, tgt = result.target_tokens;
  const cell = 28, left = 110, top = 90;
  canvas.width = left + cell * src.length + 10;
  canvas.height = top + cell * tgt.length + 10;
  const ctx = canvas.getContext("2d");
  ctx.fillStyle = "#fff"; ctx.fillRect(0, 0, canvas.width, canvas.height);
  ctx.font = "12px sans-serif"; ctx.fillStyle = "#222";
  src.forEach((token, j) => {
    ctx.save(); ctx.translate(left + cell * j + cell / 2, top - 6); ctx.rotate(-Math.PI / 3);
    ctx.fillText(token, 0, 0); ctx.restore();
  });
  tgt.forEach((token, i) => {
    ctx.fillStyle = "#222"; ctx.fillText(token, 4, top + cell * i + cell * 0.65);
    weights[i].forEach((w, j) => {
      const shade = Math.round(255 * (1 - w));
      ctx.fillStyle = `rgb(${shade}, ${shade}, 255)`;
      ctx.fillRect(left + cell * j, top + cell * i, cell - 1, cell - 1);
    });
  });
  canvas.hidden = false;
  canvas.dataset.heatmap = `${tgt.length}x${src.length}`;
}

function show() {
  // the chosen line's n-best list and heatmap
  result = results[Number($("line").value || 0)];
  const body = $("nbest-table").tBodies[0]; body.innerHTML = "";
  result.nbest.forEach((h, i) => {
    const row = body.insertRow();
    [String(i + 1), h.score.toFixed(3), h.text].forEach((text) => { row.insertCell().textContent = text; });
  });
  $("nbest-table").hidden = false;
  const layers = Object.keys(result.attention), chosen = $("layer").value;
  fill($("layer"), layers);
  $("layer").value = chosen !== "" && Number(chosen) < layers.length ? chosen : String(layers.length - 1);
  fillHeads();
  $("choose").hidden = !layers.length && $("line-label").hidden;
  draw();
}

async function translate(event) {
  event.preventDefault();
  // nothing of the last translation stays on the page beside this one's error: it read as this text's
  $("error").textContent = ""; $("note").textContent = ""; $("translation").textContent = "";
  $("nbest-table").hidden = true; $("choose").hidden = true; $("heatmap").hidden = true;
  $("go").disabled = true;
  $("heatmap").removeAttribute("data-heatmap");
  try {
    // each line a sentence of its own, as translate.py reads a file: a blank line gives a blank output line,
    // so that output line N is input line N's translation (blank lines at the end are none)
    const lines = $("source").value.trimEnd().split(/\\r?\\n/).map((line) => line.trim());
    const asked = lines.map((_, i) => i).filter((i) => lines[i]);
    if (!asked.length) { $("error").textContent = "text is empty"; return; }
    const named = (i) => lines.length > 1 ? `line ${i + 1}: ` : "";
    // read once: a choice changed while the lines are translated applies to the next translation, not to
    // the lines left of this one (a text's lines came back with unlike n-best lists)
    const nBest = Number($("nbest").value || 1);
    const answers = new Map(), errors = [];
    const stop = {asked: false};
    stopping = stop; $("stop").hidden = asked.length < 2; $("stop").disabled = false;
    let left = [];  // the lines a stop left untranslated
    for (const [k, i] of asked.entries()) {  // a line refused, or unanswered, does not lose the others'
      if (stop.asked) { left = asked.slice(k); break; }
      if (asked.length > 1) $("note").textContent = `translating line ${i + 1} (${k + 1} of ${asked.length})`;
      try {
        const response = await fetch("/api/translate", {
          method: "POST", headers: {"Content-Type": "application/json"},
          body: JSON.stringify({text: lines[i], n_best: nBest}),
        });
        // a reply that is not JSON (a proxy's error page) is said by its status
        const data = await response.json().catch(() => ({}));
        if (response.ok && data.translation !== undefined) answers.set(i, data);
        else errors.push(named(i) + (data.error || `${response.status} ${response.statusText}`));
      } catch (err) {  // the server out of reach
        errors.push(named(i) + String(err));
      }
    }
    const stopped = left.length ? `stopped: ${left.length === 1 ? "line" : "lines"} ${left.map((i) => i + 1)
      .join(", ")} not translated (output left empty)` : "";
    $("note").textContent = stopped;
    if (errors.length) {
      const left = errors.length > 1 ? "their output lines are left empty" : "its output line is left empty";
      $("error").textContent = errors.join("; ") + (answers.size ? `; ${left}` : "");
    }
    if (!answers.size) return;
    const done = [...answers.keys()];
    results = done.map((i) => answers.get(i));
    // a text over the server's max_input_len, read cut (on_long_input=truncate): said, never silent
    $("note").textContent = [stopped, ...done.map((i) => { const r = answers.get(i); return !r.truncated ? "" :
      `${named(i)}read cut to its ${r.truncated.end} ${r.truncated.kept} of ${r.truncated.tokens} subword tokens`; })]
      .filter((text) => text).join("; ");
    $("translation").textContent = lines.map((_, i) => answers.has(i) ? answers.get(i).translation : "").join("\\n");
    fill($("line"), done.map((i) => i + 1));  // labelled by the input's line numbers
    $("line-label").hidden = lines.length < 2;  // a text of several lines: which line is shown, always
    $("head").innerHTML = "";
    show();
  } catch (err) {
    $("error").textContent = String(err);
  } finally {
    $("go").disabled = false; $("stop").hidden = true; stopping = null;
  }
}

$("form").addEventListener("submit", translate);
$("stop").addEventListener("click", () => { if (stopping) { stopping.asked = true; $("stop").disabled = true; } });
$("line").addEventListener("change", show);
$("layer").addEventListener("change", () => { fillHeads(); draw(); });
$("head").addEventListener("change", draw);
info();
</script>
</body></html>
"""
