"""What a search is told: the decoding options (a config's ``decode`` block), which strategy reads which,
and the checks that refuse an option that is invalid or that the chosen strategy does not read. A new
strategy or option starts here (ARCHITECTURE.md, "A decoding strategy, step by step")."""

import difflib
import math
import numbers
from dataclasses import dataclass, fields

STRATEGIES = ("greedy", "beam", "sample", "epsilon")


# the strategies that keep several hypotheses per sentence and rank them (n-best, a batch's tokens shared out
# among them), each with the option that says how many it keeps (the n-best limit, the rows a sentence takes,
# the number in its evaluation folder's name): search.ranked_hypotheses dispatches them; a new one goes in both
RANKED = {"beam": "beam_size"}
# the strategies that draw tokens at random: decode.seed seeds them (one stream per sentence), and a language
# model's num_samples asks them for several continuations of one prompt
SAMPLED = ("sample", "epsilon")


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
    # epsilon sampling (Hewitt et al. 2022): tokens of probability below this are dropped, the most probable
    # one always kept; 0 = no filter (strategy=epsilon needs one above 0, e.g. 3e-4)
    epsilon: float = 0.0
    seed: int | None = None  # sampling seed
    min_len: int = 0  # EOS is not allowed before this many output tokens (summaries need a floor)
    no_repeat_ngram_size: int = 0  # >0: no n-gram of this size occurs twice in an output (0 = off)

    def __post_init__(self) -> None:
        problems = search_problems(self.__dict__)
        if problems:
            raise ValueError(problems[0])

    @property
    def ranks(self) -> bool:
        """Whether the search ranks several hypotheses per sentence (``search.ranked_hypotheses``)."""
        return self.strategy in RANKED

    @property
    def samples(self) -> bool:
        """Whether the search draws its tokens at random (``SAMPLED``)."""
        return self.strategy in SAMPLED

    @property
    def constrains(self) -> bool:
        """Whether a rule of ``constraints.constrain`` applies at each step (a minimum length, n-gram
        blocking): every search checks this one predicate, so a new rule is switched on here, once."""
        return bool(self.min_len or self.no_repeat_ngram_size)

    @property
    def hypotheses(self) -> int:
        """Hypotheses kept per sentence: the most n-best can return, and the rows each sentence takes."""
        return getattr(self, RANKED[self.strategy]) if self.ranks else 1


def did_you_mean(name: str, options: list[str]) -> str:
    close = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    return f" (did you mean {close[0]}?)" if close else ""


def search_problems(values: dict, key: str = "decode") -> list[str]:
    """Every invalid option of a search block ``values`` (absent options take their defaults), one line
    each naming ``key`` (``decode``, or ``validation.search`` for validation's search)."""
    names = [f.name for f in fields(SearchConfig)]
    unknown = [k for k in values if k not in names]
    if unknown:
        return [f"{key}.{unknown[0]}: not a search option{did_you_mean(unknown[0], names)}; valid: {names}"]
    v = {f.name: f.default for f in fields(SearchConfig)} | dict(values)

    def integer(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    def number(x) -> bool:
        # finite: an infinite max_len_a cut every output to one token, a NaN length penalty ranked nothing
        return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)

    checks = [
        (
            "strategy",
            v["strategy"] in STRATEGIES,
            f"is not one of {list(STRATEGIES)}{did_you_mean(str(v['strategy']), list(STRATEGIES))}",
        ),
        ("beam_size", integer(v["beam_size"]) and v["beam_size"] >= 1, "must be a whole number, at least 1"),
        ("length_penalty", number(v["length_penalty"]), "must be a finite number (0: raw log-probability)"),
        ("max_len_a", number(v["max_len_a"]) and v["max_len_a"] >= 0, "must be a finite number >= 0"),
        ("max_len_b", integer(v["max_len_b"]) and v["max_len_b"] >= 0, "must be a whole number >= 0"),
        ("early_stopping", isinstance(v["early_stopping"], bool), "must be true or false"),
        ("temperature", number(v["temperature"]) and v["temperature"] > 0, "must be positive and finite"),
        ("top_k", integer(v["top_k"]) and v["top_k"] >= 0, "must be a whole number >= 0 (0: off)"),
        ("top_p", number(v["top_p"]) and 0 < v["top_p"] <= 1, "must be in (0, 1]"),
        ("epsilon", number(v["epsilon"]) and 0 <= v["epsilon"] < 1, "must be in [0, 1) (0: off)"),
        (
            "epsilon",
            v["strategy"] != "epsilon" or not number(v["epsilon"]) or v["epsilon"] > 0,
            f"drops no token: {key}.strategy=epsilon needs a threshold above 0 (e.g. {key}.epsilon=3e-4, "
            f"Hewitt et al. 2022); {key}.strategy=sample samples from every token",
        ),
        ("seed", v["seed"] is None or integer(v["seed"]), "must be an integer or null"),
        ("min_len", integer(v["min_len"]) and v["min_len"] >= 0, "must be a whole number >= 0"),
        (
            "no_repeat_ngram_size",
            integer(v["no_repeat_ngram_size"]) and v["no_repeat_ngram_size"] >= 0,
            "must be a whole number >= 0 (0: off)",
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
    "epsilon": "eps",
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
    "epsilon": (*COMMON, "temperature", "epsilon", "seed"),
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


def read_options(search: SearchConfig) -> SearchConfig:
    """``search`` with the options its strategy does not read at their defaults."""
    defaults = SearchConfig()
    return SearchConfig(**{**search.__dict__, **{k: getattr(defaults, k) for k in UNREAD.get(search.strategy, ())}})


def unreachable_min_len(values: dict, key: str = "decode") -> str | None:
    """A length no output can reach: a limit that does not grow with the source (``max_len_a`` 0) and leaves no
    room for a token before the end token (the limit counts it), where every output came out empty without a
    word; or a minimum length above such a limit, where the search would cut every output at the limit. A
    limit that grows is reached by long enough sources, and is not refused."""
    v = {f.name: f.default for f in fields(SearchConfig)} | dict(values)
    a, b, least = v["max_len_a"], v["max_len_b"], v["min_len"]
    if not all(isinstance(x, int | float) and not isinstance(x, bool) for x in (a, b, least)):
        return None  # each value's own check names it
    if a == 0 and b < 2:
        return (
            f"{key}.max_len_b={b} with {key}.max_len_a=0: the limit counts the end token, so every output would "
            "be empty; raise max_len_b to 2 or more, or give max_len_a"
        )
    if a == 0 and least > 0 and least >= b:
        return (
            f"{key}.min_len={least}: no output may end before {least} tokens, and {key}.max_len_a=0 with "
            f"max_len_b={b} lets an output hold {max(b - 1, 0)} before its end token; lower min_len, or raise "
            "max_len_b"
        )
    return None


def _plain(value):
    """A number of another library (numpy's int64 or float32, a 0-d tensor's item) as Python's own, which the
    checks, the records and the folders' names read; anything else as it is."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if getattr(getattr(value, "dtype", None), "kind", None) == "b":  # numpy's bool_
        return bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    return value


def unknown_search_option(given: dict) -> str | None:
    """What to say of the first key of a ``decode`` block ``given`` that is no search option, or None."""
    names = list(SearchConfig.__dataclass_fields__)
    unknown = next((key for key in given if key not in names), None)
    if unknown is None:
        return None
    return (
        f"decode.{unknown}={given[unknown]}: not a search option{did_you_mean(unknown, names)}; valid: "
        f"{', '.join(names)}"
    )


def search_settings(own: dict | None, given: dict | None, refuse_unread: bool = True) -> SearchConfig:
    """The search of an evaluation or a translation: the options ``given`` (the command line's ``decode``
    block, where null means "not given"), else the run's ``own`` (its config's ``decode`` block: a
    summariser keeps its minimum length and trigram blocking), else the defaults. An option given that the
    chosen strategy does not read is refused (a decoding grid, which crosses strategies with options,
    passes ``refuse_unread=False`` and treats settings that differ only in those as one). The options the
    chosen strategy does not read come back at their defaults: the run's own top_k, say, neither reaches
    another strategy's search nor is recorded as part of it."""
    fields = SearchConfig.__dataclass_fields__
    given = {k: v for k, v in (given or {}).items() if v is not None}
    if problem := unknown_search_option(given):  # (+decode.beamsize=5): a TypeError's traceback
        raise ValueError(problem)
    given = {k: _plain(v) for k, v in given.items()}
    values = {k: v for k, v in (own or {}).items() if k in fields}
    search = SearchConfig(**{**values, **given})
    if refuse_unread and (said := unreachable_min_len(search.__dict__)):
        raise ValueError(said)
    unread = [k for k in UNREAD[search.strategy] if k in given]
    if refuse_unread and unread:
        raise ValueError(
            f"decode.{unread[0]}={given[unread[0]]}: decode.strategy={search.strategy} does not read it "
            f"({readers(unread[0])}); remove it, or choose such a strategy"
        )
    return read_options(search)
