"""serve.py's page and API: a sentence translated in headless Chromium with its n-best list and heatmap,
concurrent requests answered without mixing, bad requests answered with a 4xx and a message."""

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from nmt.inference.translator import Translator
from nmt.training.train import train

from .conftest import NO_FINAL_SCORES, ROOT, compose_train

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
SENTENCES = ["one two three", "seven eight", "four four nine two", "five", "six seven", "two", "nine one", "three"]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("web")
    train(compose_train("trainer.max_epochs=5", *NO_FINAL_SCORES, "threads=1", f"run_dir={run_dir}"))
    return str(run_dir / "checkpoints" / "best.ckpt")


@pytest.fixture(scope="module")
def client(checkpoint):
    from fastapi.testclient import TestClient

    from nmt.inference.web import create_app

    translator = Translator.from_checkpoint(
        checkpoint, beam_size=3, device="cpu", on_long_input="error", max_input_len=40
    )
    return TestClient(create_app(translator, max_chars=200)), translator


def test_a_translation_with_its_nbest_list_and_attention(client):
    app, translator = client
    answer = app.post("/api/translate", json={"text": "one two three", "n_best": 3})
    assert answer.status_code == 200
    data = answer.json()
    (expected,) = translator.translate_nbest(["one two three"], n_best=3)
    assert data["translation"] == expected[0].text and [h["text"] for h in data["nbest"]] == [h.text for h in expected]
    heads = data["attention"]["layer0"]
    assert (
        len(heads) == 4
        and len(heads[0]) == len(data["target_tokens"])
        and len(heads[0][0]) == len(data["source_tokens"])
    )
    assert all(abs(sum(row) - 1) < 1e-4 for row in heads[0])  # each target piece's attention sums to one
    # asked without the weights (most of an answer's bytes): the same translation, no attention field
    lean = app.post("/api/translate", json={"text": "one two three", "n_best": 3, "attention": False}).json()
    assert "attention" not in lean and lean["nbest"] == data["nbest"] and lean["target_tokens"] == data["target_tokens"]
    said = app.post("/api/translate", json={"text": "one", "attention": "no"})
    assert said.status_code == 422 and "attention" in said.json()["error"]
    # each hypothesis's score (log-probability over the length penalty) and log-probability, in their own fields
    (scored,) = translator.translate_nbest(["one two three"], n_best=3, scores=True)
    assert [(h["score"], h["log_prob"]) for h in data["nbest"]] == [
        (round(h.score, 4), round(h.log_prob, 4)) for h in scored
    ]
    assert any(abs(h.score - h.log_prob) > 1e-3 for h in scored)  # a swap would show
    edge = app.post("/api/translate", json={"text": "one" + " " * 194 + "two"})  # 200 characters: the limit
    assert edge.status_code == 200, edge.text
    queried = app.post("/api/translate?n_best=3", json={"text": "one"})  # answered with one output, unsaid
    assert queried.status_code == 422 and "query parameters are not read (n_best)" in queried.json()["error"]
    # a row pasted from a spreadsheet: its tabs and line breaks are spaces of the one text in the box
    pasted = app.post("/api/translate", json={"text": "one\ttwo\nthree", "n_best": 3, "attention": False}).json()
    assert pasted["nbest"] == lean["nbest"]


def test_the_pages_title_is_shown_as_text_not_read_as_markup(client):
    """The title (a run folder's name, or title=) was pasted into the page: a folder named a<i>b italicised it,
    and a name holding a script tag would have run it in every visitor's browser."""
    from fastapi.testclient import TestClient

    from nmt.inference.web import create_app

    _, translator = client
    page = TestClient(create_app(translator, title='runs/a<i>b & "c"<script>x()</script>')).get("/").text
    shown = "runs/a&lt;i&gt;b &amp; &quot;c&quot;&lt;script&gt;x()&lt;/script&gt;"
    assert f"<title>{shown}</title>" in page and f"<h1>{shown}</h1>" in page
    assert "<i>" not in page and "x()</script>" not in page


def test_a_title_written_as_a_number_is_its_digits_and_none_is_the_run_folder(client):
    """title=2026 reached the page as a number, which html.escape could not read: the first visitor got a 500."""
    from nmt.inference.serve import page_title

    _, translator = client
    assert page_title(2026, translator) == "2026"
    assert page_title(None, translator) == page_title("", translator) == translator.loaded[0].run_dir.name


def test_concurrent_requests_are_answered_without_mixing(client):
    app, translator = client
    expected = dict(zip(SENTENCES, translator.translate(SENTENCES), strict=True))
    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(lambda s: app.post("/api/translate", json={"text": s}).json(), SENTENCES * 2))
    assert [a["translation"] for a in answers] == [expected[s] for s in SENTENCES * 2]


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"text": ""}, 422, "text is empty"),  # it was pydantic's "String should have at least 1 character"
        ({"text": " \n "}, 422, "text is empty"),
        ({"text": "x" * 201}, 422, "text longer than 200 characters"),
        ({"text": "one", "ckpt_path": "/etc/passwd"}, 422, "ckpt_path: Extra inputs are not permitted"),
        ({"text": "one", "n_best": 9}, 422, "n_best must be at most the beam size (3)"),
        ({"text": "one", "n_best": 0}, 422, "n_best: Input should be greater than or equal to 1"),
        ({"text": " ".join(["seven"] * 30)}, 422, "subword tokens, more than this server takes (40); send a shorter"),
        (b"{not json", 422, "the body is not valid JSON"),
        (b"x" * 20_000, 413, "request larger than 16384 bytes"),
        ({"text": "one", "n_best": "2"}, 422, "n_best: Input should be a valid integer"),
        ({"text": "one", "n_best": True}, 422, "n_best: Input should be a valid integer"),
        ({"text": 5}, 422, "text: Input should be a valid string"),
        (b'{"text": "\xff\xfe"}', 400, "the body could not be read: send UTF-8 JSON"),
        # JSON's escape of a lone surrogate: a str SentencePiece cannot encode (the server failed: TypeError, 500)
        (b'{"text": "six \\ud800 two"}', 422, "line 1: not valid Unicode (a lone surrogate"),
    ],
)
def test_bad_requests_get_a_4xx_and_a_message(client, body, status, message):
    app, _ = client
    if isinstance(body, bytes):
        answer = app.post("/api/translate", content=body, headers={"content-type": "application/json"})
    else:
        answer = app.post("/api/translate", json=body)
    assert answer.status_code == status and message in answer.json()["error"]
    assert "Traceback" not in answer.text


@pytest.mark.parametrize(
    "search, most, beam, refusal",
    [
        ({"beam_size": 3}, 3, 3, "the beam size (3)"),
        ({"strategy": "sample"}, 5, None, "the draws a request may ask (5)"),
        ({"strategy": "greedy"}, 1, None, "1 (greedy search)"),
    ],
)
def test_info_names_the_largest_n_best_and_a_beam_only_under_beam_search(checkpoint, search, most, beam, refusal):
    """/api/info said "beam_size": 5 of a sampling server, which has no beam (5 was the draws a request may ask)."""
    from fastapi.testclient import TestClient

    from nmt.inference.web import create_app

    app = TestClient(create_app(Translator.from_checkpoint(checkpoint, device="cpu", **search)))
    info = app.get("/api/info").json()
    assert (info["max_n_best"], info["beam_size"], info["strategy"]) == (most, beam, search.get("strategy", "beam"))
    assert app.post("/api/translate", json={"text": "one two", "n_best": most}).status_code == 200
    over = app.post("/api/translate", json={"text": "one two", "n_best": most + 1})
    assert over.status_code == 422 and over.json()["error"] == f"n_best must be at most {refusal}"


def test_a_long_text_read_cut_says_so_and_a_document_may_exceed_16_kb(checkpoint):
    """serve.py refused every text over max_input_len: a summariser's documents, which translate.py and
    evaluation read cut as in training, could not be served at all. With on_long_input=truncate the answer is
    the cut text's, and says it was cut; max_chars raised past 16 KB of body is no longer refused as too large."""
    from fastapi.testclient import TestClient

    from nmt.inference.web import create_app

    translator = Translator.from_checkpoint(checkpoint, beam_size=3, device="cpu", max_input_len=4)
    app = TestClient(create_app(translator, max_chars=5000))
    long = "one two three four five six"
    data = app.post("/api/translate", json={"text": long}).json()
    tokens = len(translator.src_tokenizer.encode_batch([long])[0])
    assert tokens > 4 and data["truncated"] == {"tokens": tokens, "kept": 4, "end": "first"}
    assert data["translation"] == translator.translate(long) == translator.translate("one two three four")
    assert len(translator.src_tokenizer.encode_batch(["one"])[0]) <= 4
    assert "truncated" not in app.post("/api/translate", json={"text": "one"}).json()
    # the boundary: a text of exactly max_input_len tokens is read whole, one more token is cut
    exact = "two six"
    assert len(translator.src_tokenizer.encode_batch([exact])[0]) == 4
    assert "truncated" not in app.post("/api/translate", json={"text": exact}).json()
    document = " ".join(["seven"] * 800)  # 4,799 characters, then 4,000 written in a body over 16 KB
    assert app.post("/api/translate", json={"text": document}).json()["truncated"]["kept"] == 4
    wide = app.post("/api/translate", json={"text": "\u00e9" * 4000})  # 4,000 characters, 24 KB as JSON escapes
    assert wide.status_code == 200, wide.text
    # a character beyond the BMP, escaped as a surrogate pair as Python's json and requests write it: 12 bytes
    emoji = json.dumps({"text": "\U0001f600" * 4000}).encode()
    assert len(emoji) > 48_000
    answer = app.post("/api/translate", content=emoji, headers={"content-type": "application/json"})
    assert answer.status_code == 200, answer.text
    info = app.get("/api/info").json()
    assert info["on_long_input"] == "truncate" and info["max_input_len"] == 4


def test_json_sent_without_its_content_type_is_named_as_the_cause(client):
    app, _ = client
    # curl -d '{"text": "one"}' without -H: sent as a form
    answer = app.post(
        "/api/translate", content=b'{"text": "one"}', headers={"content-type": "application/x-www-form-urlencoded"}
    )
    assert answer.status_code == 415 and "Content-Type: application/json" in answer.json()["error"]
    assert "application/x-www-form-urlencoded" in answer.json()["error"]
    answer = app.post("/api/translate", content=b'{"text": "one"}')  # no type at all
    assert answer.status_code == 415 and "this request's: none" in answer.json()["error"]
    # a JSON body of the right type with a wrong field: that field is named, not the type
    answer = app.post("/api/translate", json={"txt": "one"})
    assert answer.status_code == 422 and "text: Field required" in answer.json()["error"]


def test_every_error_has_the_error_shape_and_a_taken_port_is_named_before_loading(client):
    from nmt.inference.serve import check_port

    app, _ = client
    for answer, status in ((app.get("/nowhere"), 404), (app.get("/api/translate"), 405)):
        assert answer.status_code == status and answer.json() == {"error": answer.json()["error"]}
    # a POST without a Content-Length (a chunked body; curl -X POST with no data) to a path that takes none
    # was 411, "a request body needs a Content-Length", not the 404 or 405 of the path
    for path, status in (("/nowhere", 404), ("/api/info", 405), ("/", 405)):
        answer = app.post(path, content=iter([b""]))
        assert answer.status_code == status and "error" in answer.json(), (path, answer.status_code)
    # a chunked body (a client streaming it) is read up to the limit: it was refused with 411 whatever its size
    json_type = {"content-type": "application/json"}
    chunked = app.post("/api/translate", content=iter([b'{"text": "one', b' two", "n_best": 1}']), headers=json_type)
    whole = app.post("/api/translate", json={"text": "one two", "n_best": 1})
    assert chunked.status_code == 200 and chunked.json() == whole.json()
    empty = app.post("/api/translate", content=iter([b""]), headers=json_type)
    assert empty.status_code == 422 and empty.json() == {"error": "body: Field required"}  # as an empty body is
    endless = app.post("/api/translate", content=iter([b'{"text": "' + b"one " * 4096] * 8), headers=json_type)
    assert endless.status_code == 413 and endless.json()["error"].startswith("request larger than")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValueError, match=rf"^host=127.0.0.1 port={port}: cannot be served there"):
            check_port("127.0.0.1", port)
    check_port("127.0.0.1", free_port())


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"port": 70000}, r"^port=70000: must be an integer from 1 to 65535$"),  # was OverflowError's traceback
        ({"port": "abc"}, r"^port='abc': must be an integer from 1 to 65535$"),  # named no key
        ({"max_chars": 0}, r"^max_chars=0: must be an integer >= 1$"),  # a server that refused every request
        (
            {"title": [1, 2]},
            r"^title=\[1, 2\]: must be text or a whole number; quote it",
        ),  # the page failed at its first request
        (
            {"title": 1.5},
            r"^title=1.5: must be text or a whole number; quote it",
        ),  # shown as Hydra's float, not as written
        ({"title": True}, r"^title=True: must be text or a whole number; quote it"),
        ({"on_long_input": "cut"}, r"^on_long_input='cut': must be one of truncate, error$"),
    ],
)
def test_a_port_or_a_length_limit_out_of_range_is_refused_before_loading(given, message):
    from omegaconf import OmegaConf

    from nmt.inference.serve import serve

    with pytest.raises(ValueError, match=message):
        serve(
            OmegaConf.create(
                {
                    "ckpt_path": "nowhere.ckpt",
                    "host": "127.0.0.1",
                    "port": 8000,
                    "max_chars": 9,
                    "on_long_input": "error",
                    **given,
                }
            )
        )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def browser() -> str | None:
    return next((path for name in BROWSERS if (path := shutil.which(name))), None)


_SERVERS: list[subprocess.Popen] = []  # each serving()'s process, for a test that signals it


@contextlib.contextmanager
def serving(ckpt_path: str, *options: str):
    """serve.py on a free port, answering; its port."""
    port = free_port()
    command = [
        sys.executable,
        str(ROOT / "serve.py"),
        f"ckpt_path={ckpt_path}",
        f"port={port}",
        "device=cpu",
        "threads=1",
        *options,
    ]
    env = {k: v for k, v in os.environ.items() if k != "NMT_DEBUG"}  # its tracebacks, and Ctrl-C's other status
    server = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env={**env, "PYTHONPATH": str(ROOT)})
    _SERVERS.append(server)
    try:
        deadline = time.time() + 120
        while True:  # until the server answers (it binds to 127.0.0.1 by default)
            try:
                info = json.load(urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=2))
                break
            except OSError:
                assert server.poll() is None and time.time() < deadline, server.stderr.read()
                time.sleep(0.3)
        assert info["beam_size"] == info["max_n_best"] == 5
        yield port
    finally:
        _SERVERS.remove(server)
        if server.poll() is None:
            server.terminate()
            server.wait(timeout=30)


def test_ctrl_c_stops_the_server_with_the_status_of_an_interrupted_command(checkpoint):
    """serve.py ended 0 on Ctrl-C (uvicorn handles the signal and returns), where translate.py says "interrupted"
    and ends 130, as a shell's scripts expect of a command stopped so."""
    import signal

    with serving(checkpoint) as port:
        server = next(p for p in _SERVERS if p.args[3] == f"port={port}")
        server.send_signal(signal.SIGINT)
        assert server.wait(timeout=60) == 130
        assert "interrupted" in server.stderr.read()


def test_a_second_ctrl_c_abandons_the_request_being_decoded_without_a_traceback(checkpoint):
    """The second Ctrl-C, while a request was decoded, printed about 70 lines of uvicorn's tracebacks (its
    cancelled tasks) before "interrupted"."""
    import signal
    import threading

    with serving(checkpoint, "decode.min_len=1000", "decode.max_len_b=1100") as port:  # a slow request
        server = next(p for p in _SERVERS if p.args[3] == f"port={port}")
        body = json.dumps({"text": "one two three four five six seven eight nine", "attention": False}).encode()
        asked = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/translate", data=body, headers={"content-type": "application/json"}
        )
        answered = []

        def ask():
            try:
                answered.append(urllib.request.urlopen(asked, timeout=120).status)
            except OSError as err:  # the 500 of the abandoned request, or the connection closed
                answered.append(err)

        client = threading.Thread(target=ask, daemon=True)
        client.start()
        time.sleep(1.0)
        server.send_signal(signal.SIGINT)
        time.sleep(0.3)
        server.send_signal(signal.SIGINT)
        status = server.wait(timeout=60)
        stderr = server.stderr.read()
        client.join(timeout=60)
    assert status == 130, stderr[-3000:]
    assert "Traceback" not in stderr and "ERROR" not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == "interrupted"


@contextlib.contextmanager
def browsing(port: int):
    """A headless Chromium page on the served page, and the errors its script raised."""
    playwright = pytest.importorskip("playwright.sync_api", reason="playwright is a dev dependency (make install)")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser(), args=["--no-sandbox"])
        page = chromium.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda err: errors.append(str(err)))
        page.goto(f"http://127.0.0.1:{port}/")
        try:
            yield page, errors
        finally:
            chromium.close()


HEADLESS = pytest.mark.skipif(
    browser() is None, reason="no headless Chromium (make test installs chromium-headless-shell)"
)


@HEADLESS
def test_the_page_translates_a_sentence_in_headless_chromium(checkpoint):
    with serving(checkpoint) as port, browsing(port) as (page, errors):
        page.fill("#source", "one two three")
        page.select_option("#nbest", "3")
        page.click("#go")
        page.wait_for_selector("#heatmap[data-heatmap]", timeout=60_000)
        translation = page.inner_text("#translation")
        rows = page.locator("#nbest-table tbody tr").count()
        drawn = page.evaluate(
            """() => { const c = document.getElementById('heatmap');
            const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
            let coloured = 0; for (let i = 0; i < d.length; i += 4) if (d[i] !== d[i + 2]) coloured++;
            return coloured; }"""
        )
        page.select_option("#head", "1")  # another head redraws
    expected = Translator.from_checkpoint(checkpoint, beam_size=5, device="cpu").translate(["one two three"])[0]
    assert translation == expected and rows == 3 and drawn > 100 and not errors


@HEADLESS
def test_the_page_translates_each_line_as_a_sentence_of_its_own(checkpoint):
    """Lines were joined into one sentence (the API's newline is a space): two sentences came back as one.
    A blank line was dropped, so that output line N was no longer input line N's translation."""
    with serving(checkpoint) as port, browsing(port) as (page, errors):
        page.fill("#source", "one two three\n\n  four five  \n")
        page.click("#go")
        page.wait_for_selector("#heatmap[data-heatmap]", timeout=60_000)
        translation = page.inner_text("#translation")
        lines = page.locator("#line option").all_inner_texts()
        first = page.get_attribute("#heatmap", "data-heatmap")
        page.select_option("#line", label="3")  # the third line's n-best list and heatmap
        second = page.get_attribute("#heatmap", "data-heatmap")
        nbest = page.locator("#nbest-table tbody tr td").nth(2).inner_text()
    expected = Translator.from_checkpoint(checkpoint, beam_size=5, device="cpu").translate(
        ["one two three", "four five"]
    )
    # the blank line kept (the trailing newline is none), and the menu named by the input's line numbers
    assert translation.split("\n") == [expected[0], "", expected[1]] and lines == ["1", "3"]
    assert nbest == expected[1]
    # a heatmap is target pieces (and the end token) by source pieces (and the end token)
    assert first.split("x")[1] != second.split("x")[1] and not errors


@HEADLESS
def test_max_chars_is_each_lines_and_a_refused_line_keeps_the_others_and_no_old_output(checkpoint):
    """The text box was cut at max_chars, a request's limit, so a text of several lines lost its end mid-line
    without a word; one refused line threw the others' translations away; an error was shown beside the
    last text's translation, which read as this one's."""
    long = "one two three four five six seven"  # 33 characters, over max_chars=30
    short = ["one two", "three four five", "six", "seven eight nine", "two one"]
    with serving(checkpoint, "max_chars=30") as port, browsing(port) as (page, errors):
        page.fill("#source", "\n".join(short))  # 43 characters in all, each line under 30
        page.click("#go")
        page.wait_for_selector("#heatmap[data-heatmap]", timeout=60_000)
        whole = page.inner_text("#translation").split("\n")
        unlimited = page.evaluate("document.getElementById('source').maxLength")  # -1: none set
        page.fill("#source", "\n".join([short[0], long, short[2]]))
        page.click("#go")
        page.wait_for_function("document.getElementById('error').textContent !== ''", timeout=60_000)
        page.wait_for_selector("#go:not([disabled])", timeout=60_000)
        refused = page.inner_text("#error")
        kept = page.inner_text("#translation").split("\n")
        page.fill("#source", "   ")
        page.click("#go")
        page.wait_for_selector("#go:not([disabled])", timeout=60_000)
        empty = (page.inner_text("#error"), page.inner_text("#translation"), page.is_hidden("#nbest-table"))
        page.fill("#source", "\n\nsix")  # one sentence after blank lines: its line number shown
        page.click("#go")
        page.wait_for_selector("#heatmap[data-heatmap]", timeout=60_000)
        third = (page.inner_text("#translation").split("\n"), page.locator("#line option").all_inner_texts())
        third_shown = page.is_visible("#line-label")
    expected = Translator.from_checkpoint(checkpoint, beam_size=5, device="cpu").translate(short)
    assert whole == expected and unlimited == -1
    assert refused == "line 2: text longer than 30 characters; its output line is left empty"
    assert kept == [expected[0], "", expected[2]]
    assert empty == ("text is empty", "", True) and not errors
    assert third == (["", "", expected[2]], ["3"]) and third_shown


@HEADLESS
def test_a_text_of_many_lines_can_be_stopped_keeping_the_lines_done(checkpoint):
    """A long text ran to its end, line by line, with no way to stop it but closing the page. Stop ends it
    after the line under way: those done are shown, the others named as not translated."""
    lines = [SENTENCES[n % len(SENTENCES)] for n in range(80)]
    with serving(checkpoint) as port, browsing(port) as (page, errors):
        hidden_before = page.is_hidden("#stop")
        page.fill("#source", "\n".join(lines))
        page.click("#go")
        page.wait_for_function("document.getElementById('note').textContent.includes('(3 of 80)')", timeout=60_000)
        page.click("#stop")
        page.wait_for_selector("#go:not([disabled])", timeout=60_000)
        shown = page.inner_text("#translation").split("\n")
        note, error, hidden_after = page.inner_text("#note"), page.inner_text("#error"), page.is_hidden("#stop")
        menu = page.locator("#line option").all_inner_texts()
    done = len(menu)
    expected = Translator.from_checkpoint(checkpoint, beam_size=5, device="cpu").translate(lines[:done])
    assert 2 <= done < 80 and menu == [str(n + 1) for n in range(done)]
    assert shown[:done] == expected and not any(shown[done:])
    assert note == f"stopped: lines {', '.join(str(n + 1) for n in range(done, 80))} not translated (output left empty)"
    assert hidden_before and hidden_after and error == "" and not errors


def test_the_pages_box_sets_no_length_limit_of_its_own():
    """Where no browser runs the page's tests: the box was given maxLength = max_chars, a request's limit,
    which cut a text of several lines mid-line."""
    from nmt.inference.page import PAGE

    assert "maxLength" not in PAGE.replace("no maxLength on the box", "")


@HEADLESS
def test_the_page_says_which_line_was_read_cut(checkpoint):
    with serving(checkpoint, "on_long_input=truncate", "max_input_len=4") as port, browsing(port) as (page, errors):
        page.fill("#source", "one\none two three four five six")
        page.click("#go")
        page.wait_for_selector("#heatmap[data-heatmap]", timeout=60_000)
        note = page.inner_text("#note")
    translator = Translator.from_checkpoint(checkpoint, device="cpu")
    tokens = len(translator.src_tokenizer.encode_batch(["one two three four five six"])[0])
    assert note == f"line 2: read cut to its first 4 of {tokens} subword tokens" and not errors


@HEADLESS
def test_the_head_menu_follows_the_layer_of_an_ensemble_of_a_transformer_and_an_rnn(checkpoint, tmp_path):
    """The heads were listed from the first layer's: with an RNN's single-head attention chosen, the menu
    offered the Transformer's four heads, and choosing one broke the heatmap."""
    rnn = tmp_path / "rnn"
    train(compose_train("model=rnn", "trainer.max_epochs=2", *NO_FINAL_SCORES, "threads=1", f"run_dir={rnn}"))
    with serving(f"[{checkpoint},{rnn / 'checkpoints' / 'best.ckpt'}]") as port, browsing(port) as (page, errors):
        page.fill("#source", "one two three")
        page.click("#go")
        page.wait_for_selector("#heatmap[data-heatmap]", timeout=60_000)

        def heads(layer: str) -> int:
            page.select_option("#layer", label=layer)
            return page.locator("#head option").count()

        layers = page.locator("#layer option").all_inner_texts()
        assert layers[-1] == "attention" and page.input_value("#layer") == str(len(layers) - 1)  # the RNN's
        assert page.locator("#head option").count() == 1
        assert heads(layers[0]) == 4  # a Transformer layer: the model's 4 heads
        page.select_option("#head", "3")
        assert heads("attention") == 1 and page.input_value("#head") == "0"
        assert page.get_attribute("#heatmap", "data-heatmap") and not errors
