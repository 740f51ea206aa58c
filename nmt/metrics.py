"""Translation metrics, all computed by sacreBLEU on detokenised text against raw references."""

from collections.abc import Sequence

import sacrebleu
from sacremoses import MosesTokenizer

ROUGE_KEYS = ("rouge1", "rouge2", "rougeL")


def rouge_scores(hypotheses: Sequence[str], references: Sequence[str]) -> dict:
    """ROUGE-1/2/L F-measures x 100 (torchmetrics' ROUGE, averaged over sentences as summarisation papers
    report it; lowercased, words of letters and digits, no stemming)."""
    from torchmetrics.text.rouge import ROUGEScore

    scores = ROUGEScore(rouge_keys=ROUGE_KEYS)(list(hypotheses), list(references))
    return {key: round(float(scores[f"{key}_fmeasure"]) * 100, 2) for key in ROUGE_KEYS}


def corpus_scores(hypotheses: Sequence[str], references: Sequence[str], tgt_lang: str, rouge: bool = False) -> dict:
    """sacreBLEU BLEU (13a, cased) with its signature and n-gram precisions, chrF, and the lowercased
    tokenised BLEU that older papers report (Moses-tokenised, lowercased, multi-bleu style); with
    ``rouge``, also ROUGE-1/2/L."""
    hypotheses, references = list(hypotheses), list(references)
    bleu = sacrebleu.metrics.BLEU(tokenize=bleu_tokenizer(tgt_lang))
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf = sacrebleu.metrics.CHRF()
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "bleu_precisions": [round(p, 2) for p in bleu_score.precisions],
        "brevity_penalty": round(bleu_score.bp, 4),
        "length_ratio": round(bleu_score.sys_len / max(bleu_score.ref_len, 1), 4),
        "chrf": round(chrf_score.score, 2),
        "chrf_signature": str(chrf.get_signature()),
        "bleu_tok_lc": round(tokenized_lowercase_bleu(hypotheses, references, tgt_lang), 2),
        "sentences": len(hypotheses),
        **(rouge_scores(hypotheses, references) if rouge else {}),
    }


def bleu_tokenizer(lang: str) -> str:
    """sacreBLEU's tokenizer for a target language: 'zh' for Chinese, '13a' otherwise."""
    return "zh" if lang == "zh" else "13a"


def tokenized_lowercase_bleu(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> float:
    """BLEU on lowercased, Moses-tokenised text (aggressive hyphen splitting), scored without further
    tokenisation: the number multi-bleu.perl gives in most Multi30k papers. Not comparable to sacreBLEU."""
    if lang == "zh":  # Moses does not segment Chinese: use sacreBLEU's character-level Chinese tokenizer
        return (
            sacrebleu.metrics.BLEU(tokenize="zh", lowercase=True)
            .corpus_score(list(hypotheses), [list(references)])
            .score
        )
    tokenizer = MosesTokenizer(lang=lang)

    def prepare(text: str) -> str:
        return tokenizer.tokenize(text.lower(), aggressive_dash_splits=True, escape=False, return_str=True)

    hyps = [prepare(h) for h in hypotheses]
    refs = [prepare(r) for r in references]
    return sacrebleu.metrics.BLEU(tokenize="none", force=True).corpus_score(hyps, [refs]).score
