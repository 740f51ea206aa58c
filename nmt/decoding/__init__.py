"""Decoding: search strategies written against encode / decode_step / reorder, and batch decoding of raw text."""
