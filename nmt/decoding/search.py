"""Decoding strategies, written once against the incremental interface every model offers:

    state = model.encode(src)
    logits, state = model.decode_step(prev_tokens, state)
    state = state.reorder(index)

Nothing here knows which architecture it drives.
"""

import hashlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, fields

import torch
from torch.nn import functional as F

from nmt.decoding.graphed import graphed_greedy, supports_graphs

log = logging.getLogger(__name__)

STRATEGIES = ("greedy", "beam", "sample")
# the strategies that keep several hypotheses per sentence and rank them (n-best, a batch's tokens shared out
# among them): ranked_hypotheses dispatches them; a new one goes in both
RANKED = ("beam",)

NEW_TOKENS = 50  # words a language model's continuation adds when max_new_tokens is not given


@dataclass
class SearchConfig:
    """Decoding settings (the ``decode`` block of the configs)."""

    strategy: str = "beam"
    beam_size: int = 5
    length_penalty: float = 1.0  # GNMT alpha: score / ((5 + len) / 6) ** alpha; 0 = raw log-probability
    max_len_a: float = 1.5  # output length limit: a * source length + b
    max_len_b: int = 10
    # beam: True stops a sentence as soon as it has beam_size finished hypotheses, which can be short
    # low-scoring ones while the best beam is still open; False (default) stops only when no open beam
    # can still beat the beam_size-th finished one
    early_stopping: bool = False
    temperature: float = 1.0
    top_k: int = 0  # 0 = no top-k filter
    top_p: float = 1.0  # 1.0 = no nucleus filter
    seed: int | None = None  # sampling seed
    min_len: int = 0  # EOS is not allowed before this many output tokens (summaries need a floor)
    no_repeat_ngram_size: int = 0  # >0: no n-gram of this size occurs twice in an output (0 = off)

    def __post_init__(self) -> None:
        problems = search_problems(self.__dict__)
        if problems:
            raise ValueError(problems[0])

    @property
    def ranks(self) -> bool:
        """Whether the search ranks several hypotheses per sentence (:func:`ranked_hypotheses`)."""
        return self.strategy in RANKED

    @property
    def hypotheses(self) -> int:
        """Hypotheses kept per sentence: the most n-best can return, and the rows each sentence takes."""
        return self.beam_size if self.ranks else 1


def search_problems(values: dict, key: str = "decode") -> list[str]:
    """Every invalid option of a search block ``values`` (absent options take their defaults), one line
    each naming ``key`` (``decode``, or ``validation.search`` for validation's search)."""
    names = [f.name for f in fields(SearchConfig)]
    unknown = [k for k in values if k not in names]
    if unknown:
        return [f"{key}.{unknown[0]}: not a search option; valid: {names}"]
    v = {f.name: f.default for f in fields(SearchConfig)} | dict(values)

    def integer(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    def number(x) -> bool:
        return isinstance(x, int | float) and not isinstance(x, bool)

    checks = [
        ("strategy", v["strategy"] in STRATEGIES, f"is not one of {list(STRATEGIES)}"),
        ("beam_size", integer(v["beam_size"]) and v["beam_size"] >= 1, "must be at least 1"),
        ("length_penalty", number(v["length_penalty"]), "must be a number (0: raw log-probability)"),
        ("max_len_a", number(v["max_len_a"]) and v["max_len_a"] >= 0, "must be a number >= 0"),
        ("max_len_b", integer(v["max_len_b"]) and v["max_len_b"] >= 0, "must be an integer >= 0"),
        ("early_stopping", isinstance(v["early_stopping"], bool), "must be true or false"),
        ("temperature", number(v["temperature"]) and v["temperature"] > 0, "must be positive"),
        ("top_k", integer(v["top_k"]) and v["top_k"] >= 0, "must be >= 0"),
        ("top_p", number(v["top_p"]) and 0 < v["top_p"] <= 1, "must be in (0, 1]"),
        ("seed", v["seed"] is None or integer(v["seed"]), "must be an integer or null"),
        ("min_len", integer(v["min_len"]) and v["min_len"] >= 0, "must be >= 0"),
        (
            "no_repeat_ngram_size",
            integer(v["no_repeat_ngram_size"]) and v["no_repeat_ngram_size"] >= 0,
            "must be >= 0 (0: off)",
        ),
    ]
    return [f"{key}.{name}={v[name]!r} {what}" for name, ok, what in checks if not ok]


SEARCH_TAGS = {  # options and their short names in evaluation folder names (evaluate.py, a decoding grid)
    "length_penalty": "lp",
    "max_len_a": "lena",
    "max_len_b": "lenb",
    "early_stopping": "early",
    "temperature": "temp",
    "top_k": "topk",
    "top_p": "topp",
    "seed": "seed",
    "min_len": "minlen",
    "no_repeat_ngram_size": "norepeat",
}


# the options each strategy reads; every other option of SearchConfig is refused when given with it, so an
# option added to SearchConfig is refused everywhere until a strategy here says it reads it
COMMON = ("max_len_a", "max_len_b", "min_len", "no_repeat_ngram_size")
READS = {
    "greedy": COMMON,
    "beam": (*COMMON, "beam_size", "length_penalty", "early_stopping"),
    "sample": (*COMMON, "temperature", "top_k", "top_p", "seed"),
}
UNREAD = {
    strategy: tuple(f.name for f in fields(SearchConfig) if f.name != "strategy" and f.name not in READS[strategy])
    for strategy in STRATEGIES
}


def readers(name: str, key: str = "decode") -> str:
    """Which strategies read option ``name``, in words."""
    reading = [f"{key}.strategy={s}" for s in STRATEGIES if name in READS[s]]
    return f"it applies with {' or '.join(reading)}" if reading else "no strategy reads it"


def unread_problems(values: dict, key: str = "decode") -> list[str]:
    """The options of a search block ``values`` set away from their defaults that its strategy does not read
    (a run's config: an option that does not apply is an error, not a silent default)."""
    search = SearchConfig(**values)
    defaults = SearchConfig()
    return [
        f"{key}.{name}={getattr(search, name)!r}: {key}.strategy={search.strategy} does not read it "
        f"({readers(name, key)}); remove it, or choose such a strategy"
        for name in UNREAD[search.strategy]
        if name in values and getattr(search, name) != getattr(defaults, name)
    ]


def search_settings(own: dict | None, given: dict | None, refuse_unread: bool = True) -> SearchConfig:
    """The search of an evaluation or a translation: the options ``given`` (the command line's ``decode``
    block, where null means "not given"), else the run's ``own`` (its config's ``decode`` block: a
    summariser keeps its minimum length and trigram blocking), else the defaults. An option given that the
    chosen strategy does not read is refused (a decoding grid, which crosses strategies with options,
    passes ``refuse_unread=False`` and treats settings that differ only in those as one)."""
    fields = SearchConfig.__dataclass_fields__
    given = {k: v for k, v in (given or {}).items() if v is not None}
    unknown = [k for k in given if k not in fields]
    if unknown:  # (+decode.beamsize=5, or a misspelt keyword of the API): a TypeError's traceback
        raise ValueError(f"decode.{unknown[0]}={given[unknown[0]]}: not a search option; valid: {', '.join(fields)}")
    values = {k: v for k, v in (own or {}).items() if k in fields}
    search = SearchConfig(**{**values, **given})
    unread = [k for k in UNREAD[search.strategy] if k in given]
    if refuse_unread and unread:
        raise ValueError(
            f"decode.{unread[0]}={given[unread[0]]}: decode.strategy={search.strategy} does not read it "
            f"({readers(unread[0])}); remove it, or choose such a strategy"
        )
    return search


def banned_tokens(history: list[int], n: int) -> list[int]:
    """Tokens that would complete an n-gram already present in ``history`` (n-gram blocking)."""
    if n <= 0 or len(history) < n - 1:
        return []
    if n == 1:
        return list(set(history))
    prefix = tuple(history[len(history) - n + 1 :])
    return [history[i + n - 1] for i in range(len(history) - n + 1) if tuple(history[i : i + n - 1]) == prefix]


def constrain(logits: torch.Tensor, histories: list[list[int]], eos_id: int, cfg: SearchConfig) -> torch.Tensor:
    """logits: (rows, vocab) of the next token after each row's ``histories`` (output so far, no BOS).
    Returns them with EOS forbidden before ``min_len`` and n-gram repeats forbidden (-inf)."""
    logits = logits.clone()
    for row, history in enumerate(histories):
        if len(history) < cfg.min_len:
            logits[row, eos_id] = float("-inf")
        banned = banned_tokens(history, cfg.no_repeat_ngram_size)
        if banned:
            logits[row, banned] = float("-inf")
    return logits


def position_limits(model) -> tuple[int | None, int | None]:
    """The source and target positions ``model`` can encode (a learned position table's size), None for
    any number: models without such a table need not say."""
    limits = getattr(model, "position_limits", None)
    return limits() if limits is not None else (None, None)


def continuation_room(model, prompt: list[int], max_new_tokens: int) -> tuple[list[int], int]:
    """A language model's prompt and the output limit (tokens, counting the end) of its continuation, within
    the positions the model can encode: the context (a sentence end, then the prompt) and all but the last
    output token take one each. A prompt that leaves no room for ``max_new_tokens`` keeps its end (at least
    one token); the limit is then what the table leaves. Unbounded models: the prompt and max_new_tokens + 1."""
    table = position_limits(model)[1]
    if table is None:
        return prompt, max_new_tokens + 1
    kept = prompt[-max(table - 1 - max_new_tokens, 1) :] if prompt else prompt
    return kept, max(min(max_new_tokens + 1, table - len(kept)), 1)


def max_lengths(src: torch.Tensor, pad_id: int, cfg: SearchConfig, cap: int | None = None) -> torch.Tensor:
    """(batch,) the number of tokens each output may have, counting the final EOS, at most ``cap`` (the
    target positions the model can encode: output token t is decoded at position t)."""
    src_len = (src != pad_id).sum(dim=1)
    return (src_len.float() * cfg.max_len_a + cfg.max_len_b).long().clamp(min=1, max=cap)


@torch.no_grad()
def decode(
    model,
    src: torch.Tensor,
    bos_id: int,
    eos_id: int,
    cfg: SearchConfig,
    prefixes: list[list[int]] | None = None,
    numbers: Sequence[int] | None = None,
) -> list[list[int]]:
    """Translate a padded batch src: (batch, src_len); returns token ids per sentence, without BOS/EOS.
    ``prefixes``: per sentence, target tokens the output must begin with (forced, then searched on).
    ``numbers``: per sentence, its number in the input (its line, from 1; default: 1 to batch), from which
    seeded sampling draws its random stream (:func:`sentence_generators`)."""
    if cfg.min_len:
        _warn_if_min_len_unreachable(src, model.pad_id, cfg, position_limits(model)[1])
    if cfg.ranks:
        return [hyps[0][1] if hyps else [] for hyps in ranked_hypotheses(model, src, bos_id, eos_id, cfg, prefixes)]
    if cfg.strategy == "greedy" and not (cfg.min_len or cfg.no_repeat_ngram_size or prefixes):
        return _greedy(model, src, bos_id, eos_id, cfg)
    if cfg.strategy in ("greedy", "sample"):  # one token a step, with constraints or drawn
        return _step_by_step(model, src, bos_id, eos_id, cfg, prefixes, numbers)
    raise ValueError(f"decode.strategy={cfg.strategy!r}: in STRATEGIES but not dispatched here; valid: {STRATEGIES}")


_WARNED_MIN_LEN: set = set()


def _warn_if_min_len_unreachable(src: torch.Tensor, pad_id: int, cfg: SearchConfig, cap: int | None = None) -> None:
    """Once per setting: decode.min_len at or above a sentence's output limit cannot hold (the limit ends it)."""
    key = (cfg.min_len, cfg.max_len_a, cfg.max_len_b)
    if key in _WARNED_MIN_LEN:
        return
    shortest = int(max_lengths(src, pad_id, cfg, cap).min()) - 1  # tokens before the end token
    if shortest < cfg.min_len:
        _WARNED_MIN_LEN.add(key)
        log.warning(
            "decode.min_len=%d is more than the %d tokens some outputs may have (decode.max_len_a=%s x source "
            "length + max_len_b=%s): those end at their limit, shorter than min_len",
            cfg.min_len,
            shortest,
            cfg.max_len_a,
            cfg.max_len_b,
        )


def read_every(device: torch.device) -> int:
    """Steps between two reads of which sentences have ended, in greedy search: every step, on every device.
    A read makes the host wait for an accelerator, where reading every few steps would let the host queue
    steps ahead; but an ended sentence then rides along until the next read, and on an H100 that cost more
    than the waits (greedy validation of Multi30k's 1,014 sentences, BENCHMARKS.md). The benchmark times
    both, one timing each so far (``benchmarks/gpu_measures.py`` replaces this function, which is why it
    still takes the device)."""
    return 1


def use_graphs(model, device: torch.device) -> bool:
    """Whether greedy search replays each step as a CUDA graph (``nmt.decoding.graphed``): on a GPU, for a
    model with caches of fixed size. Elsewhere nothing waits on kernel launches, and leaving ended
    sentences in the batch would only add arithmetic. Not under autocast: its cache of cast weights
    cannot be recorded into a graph (validation decodes with autocast off). (``benchmarks/gpu_measures.py``
    replaces this function to time both.)"""
    return device.type == "cuda" and supports_graphs(model) and not torch.is_autocast_enabled(device.type)


def never_emitted(logits: torch.Tensor, bos_id: int, pad_id: int) -> torch.Tensor:
    """logits or log-probabilities (rows, vocab) with the start and padding tokens ruled out: they are
    inputs, never outputs (a barely trained model may rank them high; its output would hold invisible
    tokens). Not renormalised: a hypothesis keeps its log-probability under the model."""
    logits = logits.clone()
    # two scalar fills: a list index would be copied to the device, and a copy waits for the device
    logits[:, bos_id] = float("-inf")
    logits[:, pad_id] = float("-inf")
    return logits


def force_prefixes(log_probs: torch.Tensor, step: int, prefixes: list[list[int]]) -> torch.Tensor:
    """log_probs: (rows, vocab) at ``step``; a row whose prefix is longer than ``step`` may only continue
    with its prefix token (its own log-probability kept, floored so that the hypothesis lives on)."""
    rows = [row for row, prefix in enumerate(prefixes) if step < len(prefix)]
    if not rows:
        return log_probs
    index = torch.tensor(rows, device=log_probs.device)
    tokens = torch.tensor([prefixes[row][step] for row in rows], device=log_probs.device)
    kept = log_probs[index, tokens].clamp(min=-1e4)
    log_probs = log_probs.clone()
    log_probs[index] = float("-inf")
    log_probs[index, tokens] = kept
    return log_probs


def _with_prefixes(limits: torch.Tensor, prefixes: list[list[int]] | None, cap: int | None = None) -> torch.Tensor:
    """Output limits long enough for each prefix and its end token; a prefix beyond ``cap`` (the target
    positions the model can encode) is refused before decoding (it failed at that step)."""
    if not prefixes:
        return limits
    longest = max(len(p) for p in prefixes)
    if cap is not None and longest + 1 > cap:
        raise ValueError(
            f"a prefix of {longest} tokens and its end token need more than the {cap} target positions of the "
            "model's learned position table (pos.max_len); shorten the prefix"
        )
    needed = torch.tensor([len(p) + 1 for p in prefixes], device=limits.device)
    return torch.maximum(limits, needed)


def greedy(model, src, bos_id: int, eos_id: int, cfg: SearchConfig | None = None) -> list[list[int]]:
    cfg = cfg or SearchConfig()
    return decode(model, src, bos_id, eos_id, SearchConfig(**{**cfg.__dict__, "strategy": "greedy"}))


@torch.no_grad()
def _greedy(model, src, bos_id: int, eos_id: int, cfg: SearchConfig, every: int | None = None) -> list[list[int]]:
    """Greedy search with the chosen tokens kept on the device: one read every ``every`` steps (default
    :func:`read_every`) says which sentences have ended, and they leave the batch; one read at the end
    fetches the outputs. The tokens are those of :func:`_step_by_step` (a sentence's rows are computed
    alike whichever other sentences share its batch)."""
    batch, device, pad_id = src.size(0), src.device, model.pad_id
    limits = max_lengths(src, pad_id, cfg, position_limits(model)[1])  # (batch,) tokens allowed, counting the EOS
    if every is None and use_graphs(model, device):
        outputs = graphed_greedy(
            model, src, limits, bos_id, eos_id, lambda x: never_emitted(x, bos_id, pad_id).argmax(-1)
        )
        if outputs is not None:
            return outputs
    every = every or read_every(device)
    steps = int(limits.max())
    state = model.encode(src)
    out = torch.full((batch, steps), pad_id, dtype=torch.long, device=device)  # padding where nothing was chosen
    rows = torch.arange(batch, device=device)  # the sentence of each row still in the batch
    ended = torch.zeros(batch, dtype=torch.bool, device=device)  # (rows,)
    prev = torch.full((batch,), bos_id, dtype=torch.long, device=device)
    for step in range(steps):
        logits, state = model.decode_step(prev, state)  # (rows, vocab)
        prev = never_emitted(logits, bos_id, pad_id).argmax(dim=-1)  # (rows,)
        # the last step allowed ends a sentence (as if EOS were forced), like beam search does
        ended = ended | (prev == eos_id) | (limits[rows] <= step + 1)
        out[rows, step] = prev.masked_fill(ended, pad_id)
        if (step + 1) % every == 0 and step + 1 < steps:
            going = (~ended).nonzero().squeeze(1)  # the read
            if going.numel() == 0:
                break
            if going.numel() < rows.numel():  # shrink the batch: ended sentences cost nothing from here on
                state, prev, rows, ended = state.reorder(going), prev[going], rows[going], ended[going]
    # a sentence's tokens are written one after another from its first step, and padding is never chosen
    return [ids[: ids.index(pad_id)] if pad_id in ids else ids for ids in out.tolist()]


@torch.no_grad()
def sentence_generators(cfg: SearchConfig, numbers: Sequence[int], device: torch.device) -> list | None:
    """Seeded sampling (``decode.seed``): one random stream per sentence, seeded by the seed and the
    sentence's number in its input, so that a sentence's sample depends neither on the batch it is decoded
    in nor on the lines before it, and two lines (equal ones too) draw apart. None: not sampling, or no
    seed (the global stream)."""
    if cfg.strategy != "sample" or cfg.seed is None:
        return None
    seeds = [hashlib.blake2b(f"{cfg.seed}:{n}".encode(), digest_size=8).digest() for n in numbers]
    return [torch.Generator(device=device).manual_seed(int.from_bytes(s, "little") >> 1) for s in seeds]


def _step_by_step(
    model, src, bos_id: int, eos_id: int, cfg: SearchConfig, prefixes=None, numbers=None
) -> list[list[int]]:
    """Sampling, and greedy search with a minimum length, n-gram blocking or forced prefixes: one token per
    sentence per step; finished sentences leave the batch. Bookkeeping stays on the host, so a GPU waits
    for it once per step (reading the new tokens)."""
    batch = src.size(0)
    limits = _with_prefixes(
        max_lengths(src, model.pad_id, cfg, cap := position_limits(model)[1]), prefixes, cap
    ).tolist()
    state = model.encode(src)
    alive = list(range(batch))  # original row of each row still decoding
    prev = torch.full((batch,), bos_id, dtype=torch.long, device=src.device)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    generators = sentence_generators(cfg, numbers or range(1, batch + 1), src.device)
    for step in range(max(limits)):
        logits, state = model.decode_step(prev, state)  # (alive, vocab)
        logits = never_emitted(logits, bos_id, model.pad_id)
        if cfg.min_len or cfg.no_repeat_ngram_size:
            logits = constrain(logits, [outputs[row] for row in alive], eos_id, cfg)
        if prefixes:
            logits = force_prefixes(logits.float(), step, [prefixes[row] for row in alive])
        if cfg.strategy == "greedy":
            next_tokens = logits.argmax(dim=-1)
        else:
            next_tokens = _sample(logits.float(), cfg, generators=generators and [generators[row] for row in alive])
        # the last step allowed ends the sentence (as if EOS were forced), like beam search does
        tokens = next_tokens.tolist()
        keep = [token != eos_id and limits[row] > step + 1 for row, token in zip(alive, tokens, strict=True)]
        for row, token, goes_on in zip(alive, tokens, keep, strict=True):
            if goes_on:
                outputs[row].append(token)
        if not any(keep):
            break
        if not all(keep):
            # shrink the batch so finished sentences cost nothing in later steps
            index = torch.tensor([i for i, goes_on in enumerate(keep) if goes_on], device=src.device)
            state, next_tokens = state.reorder(index), next_tokens[index]
            alive = [row for row, goes_on in zip(alive, keep, strict=True) if goes_on]
        prev = next_tokens
    return outputs


def _sample(logits: torch.Tensor, cfg: SearchConfig, generator=None, generators=None) -> torch.Tensor:
    """One token per row of ``logits`` (rows, vocab) drawn after temperature, top-k and top-p; from
    ``generator`` for all rows, or from ``generators``, one per row."""
    logits = logits / cfg.temperature
    if cfg.top_k > 0:
        kth = logits.topk(min(cfg.top_k, logits.size(-1)), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if cfg.top_p < 1.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # drop a token when the tokens before it already reach top_p (the top token always stays)
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= cfg.top_p
        drop = drop_sorted.scatter(1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    probs = logits.softmax(dim=-1)
    if generators:
        return torch.cat(
            [torch.multinomial(row[None], 1, generator=g)[0] for row, g in zip(probs, generators, strict=True)]
        )
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)


def length_penalty(length: int | torch.Tensor, alpha: float):
    """Wu et al. 2016 (GNMT): ((5 + length) / 6) ** alpha."""
    return ((5.0 + length) / 6.0) ** alpha


def beam_search(model, src, bos_id: int, eos_id: int, cfg: SearchConfig) -> list[list[int]]:
    """The best hypothesis of each sentence (see :func:`beam_hypotheses`)."""
    return decode(model, src, bos_id, eos_id, SearchConfig(**{**cfg.__dict__, "strategy": "beam"}))


def ranked_hypotheses(
    model, src, bos_id: int, eos_id: int, cfg: SearchConfig, prefixes: list[list[int]] | None = None
) -> list[list[tuple[float, list[int]]]]:
    """Per sentence, the hypotheses of a ranking search (``cfg.ranks``) as (score, token ids), best first."""
    if cfg.strategy == "beam":
        return beam_hypotheses(model, src, bos_id, eos_id, cfg, prefixes)
    raise ValueError(f"decode.strategy={cfg.strategy!r}: not a ranking search ({list(RANKED)}) dispatched here")


@torch.no_grad()
def beam_hypotheses(
    model, src, bos_id: int, eos_id: int, cfg: SearchConfig, prefixes: list[list[int]] | None = None
) -> list[list[tuple[float, list[int]]]]:
    """Batched beam search: all sentences and beams advance together as batch * beam rows. Returns, per
    sentence, its finished hypotheses as (score, token ids) best first (at least beam_size of them unless
    the search ran out): score is the log-probability divided by the length penalty."""
    batch, k = src.size(0), cfg.beam_size
    device = src.device
    limits = _with_prefixes(
        max_lengths(src, model.pad_id, cfg, cap := position_limits(model)[1]), prefixes, cap
    )  # (batch,)
    row_prefixes = [p for p in prefixes for _ in range(k)] if prefixes else None
    state = model.encode(src).reorder(torch.arange(batch, device=device).repeat_interleave(k))
    scores = torch.zeros(batch, k, device=device)
    scores[:, 1:] = float("-inf")  # all beams start identical: keep one until they diverge
    tokens = torch.full((batch * k, 0), bos_id, dtype=torch.long, device=device)  # history without BOS
    prev = torch.full((batch * k,), bos_id, dtype=torch.long, device=device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    # the limits and which sentences are done are kept on the host too: each read of the device makes a
    # GPU's host wait, so a step reads what ended and the best scores in a few reads, never one per sentence
    limits_host, done_host = limits.tolist(), [False] * batch
    offsets = (torch.arange(batch, device=device) * k)[:, None]  # (batch, 1)

    for step in range(max(limits_host)):
        logits, state = model.decode_step(prev, state)  # (batch * k, vocab)
        log_probs = never_emitted(F.log_softmax(logits.float(), dim=-1), bos_id, model.pad_id)
        if cfg.min_len or cfg.no_repeat_ngram_size:
            log_probs = constrain(log_probs, tokens.tolist(), eos_id, cfg)
        if row_prefixes:
            log_probs = force_prefixes(log_probs, step, row_prefixes)
        log_probs = log_probs.view(batch, k, -1)
        vocab = log_probs.size(-1)
        if min(limits_host) <= step + 1:  # some sentence's last step allowed: only EOS may follow
            at_limit = limits <= step + 1  # (batch,)
            # keep EOS's own log-probability (floored, so that a hypothesis always ends), nothing else
            forced = torch.full_like(log_probs, float("-inf"))
            forced[:, :, eos_id] = log_probs[:, :, eos_id].clamp(min=-1e4)
            log_probs = torch.where(at_limit[:, None, None], forced, log_probs)
        candidates = (scores[:, :, None] + log_probs).view(batch, k * vocab)
        # 2k candidates guarantee k that do not end, whatever happens to the ending ones
        top_scores, top_ids = candidates.topk(min(2 * k, k * vocab), dim=1)  # (batch, 2k)
        beam_of, token_of = top_ids // vocab, top_ids % vocab
        is_eos = token_of == eos_id

        # hypotheses that end now: EOS among the top k candidates of a sentence still searching
        in_top_k = torch.arange(top_ids.size(1), device=device) < k
        ends = (is_eos & in_top_k & (top_scores > float("-inf")) & ~done[:, None]).nonzero()  # (ending, 2)
        if ends.numel():
            sentence, candidate = ends[:, 0], ends[:, 1]
            histories = tokens[offsets[sentence, 0] + beam_of[sentence, candidate]].tolist()
            divisor = length_penalty(step + 1, cfg.length_penalty)  # length counts the EOS
            ended = zip(sentence.tolist(), top_scores[sentence, candidate].tolist(), histories, strict=True)
            for b, score, history in ended:
                finished[b].append((score / divisor, history))

        # continue with the best k candidates that do not end
        rank = is_eos.float() * top_ids.size(1) + torch.arange(top_ids.size(1), device=device)
        keep = rank.argsort(dim=1)[:, :k]  # (batch, k)
        scores = top_scores.gather(1, keep)
        rows = (offsets + beam_of.gather(1, keep)).view(-1)  # (batch * k,) rows of the previous step
        prev = token_of.gather(1, keep).view(-1)
        tokens = torch.cat((tokens[rows], prev[:, None]), dim=1)
        state = state.reorder(rows)

        best_alive = scores[:, 0].tolist()
        newly_done = [
            b
            for b in range(batch)
            if not done_host[b]
            and (
                limits_host[b] <= step + 1
                or (len(finished[b]) >= k and _is_finished(finished[b], best_alive[b], limits_host[b], cfg))
            )
        ]
        if newly_done:
            for b in newly_done:
                done_host[b] = True
            done = done.index_fill(0, torch.tensor(newly_done, device=device), True)
        scores = scores.masked_fill(done[:, None], float("-inf"))
        if all(done_host):
            break
    return [sorted(hyps, key=lambda h: -h[0]) for hyps in finished]


def _is_finished(hyps, best_alive: float, limit: int, cfg: SearchConfig) -> bool:
    if cfg.early_stopping:
        return True
    # can the best alive beam still beat the k-th best finished one? (its score only falls; the
    # length penalty's divisor grows at most to the limit)
    kth_best = sorted((h[0] for h in hyps), reverse=True)[cfg.beam_size - 1]
    divisor = length_penalty(limit if cfg.length_penalty > 0 else 1, cfg.length_penalty)
    return best_alive / divisor <= kth_best
