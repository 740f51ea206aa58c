"""A small web page for a trained model (``python serve.py ckpt_path=...``): type a sentence, read its
translation, the n-best list with scores, and the cross-attention heatmap of a chosen layer and head.

The page is one self-contained HTML document (inline script and styles, the heatmap drawn on a canvas):
it works offline. The server answers JSON at ``POST /api/translate``; requests are decoded one at a time
(the model is shared and its attention capture is not reentrant), so concurrent requests never mix.
A request carries text only (no path, no checkpoint: the model is fixed at start), is limited in size,
and a bad one gets a 4xx with a message, never a stack trace. A text longer than ``max_input_len`` subword
tokens is refused, or (``on_long_input=truncate``) read cut, and the answer says so in ``truncated``.
"""

import html
import threading

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StrictStr
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from nmt.inference.page import PAGE
from nmt.inference.translator import InputError, Translator

MAX_BODY_BYTES = 16_384


def body_limit(max_chars: int) -> int:
    """Bytes a request may have: 16 KB, or room for ``max_chars`` characters each written as JSON's longest
    escape, a surrogate pair of 12 bytes (a summariser's document raised past 16 KB was refused as too large
    before its length was read)."""
    return max(MAX_BODY_BYTES, 12 * max_chars + 1024)


class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")  # anything else (a path, a checkpoint) is refused

    # strict: "3", 2.0 or true are not a number of outputs, nor 5 a text
    text: StrictStr  # empty, or blank: "text is empty" below, the same words for both
    n_best: StrictInt = Field(default=1, ge=1)
    # the attention weights are most of an answer's bytes (layers x heads x target x source): a client that
    # draws no heatmap asks without them. Not given: the weights, where the model has cross-attention (a
    # language model's answer holds none: {}); true asks them of a model that must have them
    attention: StrictBool | None = None


DRAWS = 5  # the most outputs a request may ask of a sampling search


def create_app(translator: Translator, max_chars: int = 1000, title: str = "nmt") -> FastAPI:
    """The page at ``/``, ``/api/info`` and ``/api/translate``, serving ``translator`` one request at a time;
    requests larger than ``max_chars`` characters' worth of body are refused, and every error is a JSON
    ``{"error": ...}`` of one line, never a stack trace."""
    app = FastAPI(title=title, docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()
    # the most outputs a request may ask: a beam's hypotheses; sampling, a few draws (any number would let one
    # request hold the server)
    beams = translator.most_outputs or DRAWS
    _limit_body_size(app, body_limit(max_chars))
    _answer_errors_in_json(app)

    @app.get("/", response_class=HTMLResponse)
    def page() -> str:
        return PAGE.replace("{{title}}", html.escape(title))  # a run folder's name is text, never markup

    @app.get("/api/info")
    def info() -> dict:
        return {
            "max_n_best": beams,
            # the beam's width under beam search only: greedy search and sampling's draws are no beam (null)
            "beam_size": beams if translator.search.ranks else None,
            "max_chars": max_chars,
            "strategy": translator.search.strategy,
            "max_input_len": translator.max_input_len,
            "on_long_input": translator.on_long_input,
        }

    @app.post("/api/translate")
    def translate(request: TranslateRequest, http: Request):
        # one text from a box: its line breaks and tabs (a row pasted from a spreadsheet) are spaces
        text = request.text.replace("\r", " ").replace("\n", " ").replace("\t", " ").strip()
        problem = _request_problem(translator, request, http, text, max_chars, beams)
        if problem:
            return JSONResponse({"error": problem}, status_code=422)
        attention = request.attention is not False
        try:
            with lock:
                # a language model has no cross-attention to draw (no source): its page shows no heatmap
                (hypotheses,) = translator.translate_nbest(
                    [text], n_best=request.n_best, with_attention=attention and not translator.continues
                )
        except InputError as err:
            if err.too_long:  # the command line's remedies are not the requester's to take
                tokens, limit = err.too_long
                message = (
                    f"the text has {tokens} subword tokens, more than this server takes ({limit}); send a shorter text"
                )
                return JSONResponse({"error": message}, status_code=422)
            return JSONResponse({"error": str(err)}, status_code=422)
        return _answer(translator, text, hypotheses, attention)

    return app


def _request_problem(
    translator: Translator, request: TranslateRequest, http: Request, text: str, max_chars: int, beams: int
) -> str | None:
    """What is wrong with a translation request, in one line, or None."""
    if http.query_params:  # ?n_best=3 was answered with one output, the query unread
        asked = ", ".join(sorted(http.query_params))
        return f"query parameters are not read ({asked}): send every field in the JSON body"
    if len(text) > max_chars:
        return f"text longer than {max_chars} characters"
    if not text:
        return "text is empty"
    if request.n_best > beams:
        most = (
            f"the beam size ({beams})"
            if translator.search.ranks
            else f"the draws a request may ask ({beams})"
            if translator.search.samples
            else "1 (greedy search)"
        )
        return f"n_best must be at most {most}"
    if request.attention and translator.continues:  # asked for, of a model that reads no source
        return "attention: a language model reads no source, so it has no cross-attention; leave it out"
    return None


def _answer(translator: Translator, text: str, hypotheses: list, attention: bool) -> dict:
    """The JSON answer: the best output, the n-best with their scores, the pieces, and (asked for) the best
    output's attention."""
    best = hypotheses[0]
    answer = {}
    if translator.on_long_input == "truncate":  # said to the requester, not only in the server's log
        tokens = len(translator.src_tokenizer.encode_batch([text])[0])
        if tokens > translator.max_input_len:
            # a language model continues a prompt's end (its last tokens are kept), a source is read from its start
            kept = "last" if translator.continues else "first"
            answer["truncated"] = {"tokens": tokens, "kept": translator.max_input_len, "end": kept}
    return {
        **answer,
        "translation": best.text,
        "nbest": [{"text": h.text, "score": round(h.score, 4), "log_prob": round(h.log_prob, 4)} for h in hypotheses],
        "source_tokens": best.src_tokens,
        "target_tokens": [*best.tokens, "</s>"],
        # per decoder layer: heads x target pieces x source pieces (none asked for: left out)
        **(
            {"attention": {name: weights.tolist() for name, weights in (best.attention or {}).items()}}
            if attention
            else {}
        ),
    }


def _limit_body_size(app: FastAPI, largest: int) -> None:
    """Refuse (413) a request whose body is larger than ``largest`` bytes, declared or streamed (a client
    that leaves while its body streams: 400)."""

    @app.middleware("http")
    async def limit_size(request: Request, call_next):
        declared = request.headers.get("content-length")
        # a chunked body could be of any size; a path that takes no body is left to routing (404, 405)
        takes_body = any(
            getattr(route, "path", None) == request.scope.get("path")
            and "POST" in (getattr(route, "methods", None) or ())
            for route in app.routes
        )
        too_large = JSONResponse({"error": f"request larger than {largest} bytes"}, status_code=413)
        if declared is not None and (not declared.isdigit() or int(declared) > largest):
            return too_large
        if request.method == "POST" and declared is None and takes_body:
            # a chunked body (a client streaming it): read up to the limit, no further, and handed on as read
            # (it was refused with 411, whatever its size)
            chunks, size = [], 0
            try:
                async for chunk in request.stream():
                    chunks.append(chunk)
                    size += len(chunk)
                    if size > largest:
                        return too_large
            except ClientDisconnect:  # the client left: nobody reads the answer
                return JSONResponse({"error": "the client disconnected"}, status_code=400)
            request._body = b"".join(chunks)  # what Request.body() keeps, and passes on to the route
        return await call_next(request)


def _answer_errors_in_json(app: FastAPI) -> None:
    """Every error as ``{"error": <one line>}``: a body that is not JSON, a field of the wrong type, a path or
    method the server has not, and a failure of its own (never a stack trace to the client)."""

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        kind = request.headers.get("content-type", "")
        base = kind.split(";")[0].strip().lower()
        # a body FastAPI did not read as JSON (its type is not application/json or application/*+json) fails
        # as "not a dictionary": name the type as the cause, not the fields
        unread = any(e["type"] in ("model_attributes_type", "dict_type") for e in err.errors())
        if unread and base != "application/json" and not base.endswith("+json"):
            # curl's -d sends application/x-www-form-urlencoded: the body is then never read as JSON
            return JSONResponse(
                {
                    "error": f"the body must be JSON sent as Content-Type: application/json (this request's: "
                    f"{kind or 'none'}); with curl: -H 'Content-Type: application/json'"
                },
                status_code=415,
            )
        problems = "; ".join(
            "the body is not valid JSON"
            if e["type"] == "json_invalid"
            else f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}"
            for e in err.errors()
        )
        return JSONResponse({"error": problems}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):  # 404, 405, a body that cannot be parsed
        message = err.detail
        if err.status_code == 400 and "parsing the body" in str(err.detail):
            message = "the body could not be read: send UTF-8 JSON"
        return JSONResponse({"error": str(message)}, status_code=err.status_code, headers=err.headers)

    @app.exception_handler(Exception)
    async def failed(request: Request, err: Exception):  # never a stack trace to the client
        return JSONResponse({"error": f"the server failed: {type(err).__name__}"}, status_code=500)
