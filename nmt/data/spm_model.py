"""SentencePiece's model file: the ``lowercase`` normalisation as a rule file, and the model's bytes edited in
protobuf's wire format (SentencePiece's generated protobuf module accepts only the protobuf release it was
built with)."""

import sys
from pathlib import Path


def normalization_rule(name: str, folder: Path) -> dict:
    """SentencePiece's option for a normalisation: its own rules by name; ``lowercase`` as a rule file
    mapping each code point that Python lowercases to its lowercase form, one character at a time (a Greek
    final sigma becomes σ, not ς), and leaving every other character as written (the ``*_cf`` rules
    lowercase too, but on top of NFKC, which rewrites characters)."""
    if name != "lowercase":
        return {"normalization_rule_name": name}
    lines = []
    for code in range(sys.maxunicode + 1):
        if 0xD800 <= code <= 0xDFFF:  # surrogates are not characters
            continue
        char = chr(code)
        lower = char.lower()
        if lower != char:
            lines.append(f"{code:X}\t{' '.join(f'{ord(c):X}' for c in lower)}\n")
    path = folder / "lowercase.tsv"
    path.write_text("".join(lines), encoding="utf-8")
    return {"normalization_rule_tsv": str(path)}


# field numbers of sentencepiece_model.proto: ModelProto.normalizer_spec, NormalizerSpec.normalization_rule_tsv
_NORMALIZER_SPEC, _RULE_TSV = 3, 6


def without_rule_path(model_proto: bytes) -> bytes:
    """The model without the path of the rule file it was trained with (a temporary file): the rule itself
    is compiled into the model (``precompiled_charsmap``), and the path alone would make two trainings of
    the same tokenizer differ byte for byte, and with them the data identity of a run. Edited in the wire
    format: SentencePiece's generated protobuf module accepts only the protobuf release it was built with."""
    if b"lowercase.tsv" not in model_proto:  # the models of SentencePiece's own rules stay byte for byte
        return model_proto

    def drop_path(number: int, payload: bytes) -> bytes | None:
        return None if number == _RULE_TSV else payload

    def in_normalizer(number: int, payload: bytes) -> bytes:
        return _edit_fields(payload, drop_path) if number == _NORMALIZER_SPEC else payload

    return _edit_fields(model_proto, in_normalizer)


# ModelProto.trainer_spec, TrainerSpec.num_threads
_TRAINER_SPEC, _NUM_THREADS = 2, 16


def without_thread_count(model_proto: bytes) -> bytes:
    """The model without the number of threads that trained it: the pieces do not depend on it (the
    training uses a fixed number, tokenizer.TRAINING_THREADS), and the count alone made the same tokenizer
    another file on a machine with other cores, and a run resumed there refused for other tokenizers."""

    def in_trainer(number: int, payload: bytes) -> bytes:
        return _edit_fields(payload, lambda n, p: p, drop={_NUM_THREADS}) if number == _TRAINER_SPEC else payload

    return _edit_fields(model_proto, in_trainer)


def _edit_fields(message: bytes, edit, drop: set[int] = frozenset()) -> bytes:
    """A protobuf message rebuilt field by field: ``edit(number, payload)`` gives each length-delimited
    field's new payload (the same object: unchanged; None: dropped); fields numbered in ``drop`` are
    dropped whatever their type; other fields are copied as they are."""
    out, i = bytearray(), 0
    while i < len(message):
        start = i
        key, i = _read_varint(message, i)
        wire = key & 7
        if wire == 0:
            i = _read_varint(message, i)[1]
            if key >> 3 in drop:
                continue
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        elif wire == 2:
            size, i = _read_varint(message, i)
            payload = message[i : i + size]
            i += size
            new = edit(key >> 3, payload)
            if new is None:
                continue
            if new is not payload:
                out += _varint(key) + _varint(len(new)) + new
                continue
        else:
            raise ValueError(f"not a SentencePiece model: protobuf wire type {wire} at byte {start}")
        out += message[start:i]
    return bytes(out)


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)
