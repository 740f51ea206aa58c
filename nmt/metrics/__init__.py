"""Scores of decoded text: sacreBLEU BLEU and chrF, ROUGE, bootstrap intervals and the paired bootstrap test."""
