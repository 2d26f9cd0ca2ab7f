"""A SentencePiece model file (`spiece.model`, ALBERT's tokenizer) read without the protobuf or
sentencepiece packages: the few fields of its `ModelProto` a Unigram tokenizer is built from.

sentencepiece_model.proto, the fields read (field number, wire type):

    ModelProto       1 pieces (repeated SentencePiece)   2 trainer_spec (TrainerSpec)
                     3 normalizer_spec (NormalizerSpec)
    SentencePiece    1 piece (string)   2 score (float, fixed32)   3 type (enum, default NORMAL)
    TrainerSpec      3 model_type (enum, default UNIGRAM)   40 unk_id (int32, default 0)
    NormalizerSpec   2 precompiled_charsmap (bytes)

Every other field is skipped. As protobuf merges a message, a scalar given twice takes its last
value. A piece's id is its index among the pieces.
"""

from __future__ import annotations

import struct
from pathlib import Path

from ...containers.tensorflow import protowire as pw
from ...errors import bad_input
from ...records import record

#: SentencePiece.Type: what a piece is. CONTROL pieces ([CLS], <pad>) never come out of text
#: segmentation; USER_DEFINED pieces are always kept whole.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
#: TrainerSpec.ModelType.
UNIGRAM, BPE, WORD, CHAR = 1, 2, 3, 4
MODEL_TYPE_NAMES = {UNIGRAM: "unigram", BPE: "bpe", WORD: "word", CHAR: "char"}


@record
class Piece:
    """One vocabulary entry: its text, its log-probability (Unigram) and its `type`."""

    piece: str
    score: float
    type: int = NORMAL


@record
class SentencePieceModel:
    """What a Unigram tokenizer needs of a SentencePiece model.

    Attributes:
      pieces: the vocabulary, id = index.
      model_type: UNIGRAM, BPE, WORD or CHAR.
      unk_id: the id of the unknown piece.
      precompiled_charsmap: the normalization rules compiled into the file (nmt_nfkc by default),
        or b"" for none.
    """

    pieces: list[Piece]
    model_type: int
    unk_id: int
    precompiled_charsmap: bytes


def read(path: Path) -> SentencePieceModel:
    """Parse the ModelProto in the file at `path`. Raises BadInput naming the file for anything that
    is not one (a truncated field, a wrong wire type, no pieces, an unk_id out of range)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise bad_input(path, f"cannot read the SentencePiece model: {exc}") from None
    pieces: list[Piece] = []
    model_type, unk_id, charsmap = UNIGRAM, 0, b""
    for field in pw.iter_fields(data, source=path, entry="ModelProto"):
        if field.number == 1:
            pw.require_wire_type(field, pw.WIRE_LEN, "pieces", source=path, entry="ModelProto")
            pieces.append(_piece(field.value, path, len(pieces)))
        elif field.number == 2:
            pw.require_wire_type(field, pw.WIRE_LEN, "trainer_spec", source=path, entry="ModelProto")
            for spec in pw.iter_fields(field.value, source=path, entry="TrainerSpec"):
                if spec.number == 3:
                    pw.require_wire_type(spec, pw.WIRE_VARINT, "model_type", source=path, entry="TrainerSpec")
                    model_type = pw.as_int64(spec.value)
                elif spec.number == 40:
                    pw.require_wire_type(spec, pw.WIRE_VARINT, "unk_id", source=path, entry="TrainerSpec")
                    unk_id = pw.as_int64(spec.value)
        elif field.number == 3:
            pw.require_wire_type(field, pw.WIRE_LEN, "normalizer_spec", source=path, entry="ModelProto")
            for spec in pw.iter_fields(field.value, source=path, entry="NormalizerSpec"):
                if spec.number == 2:
                    pw.require_wire_type(spec, pw.WIRE_LEN, "precompiled_charsmap", source=path,
                                         entry="NormalizerSpec")
                    charsmap = bytes(spec.value)
    if not pieces:
        raise bad_input(path, "not a SentencePiece model: the ModelProto has no pieces")
    if not 0 <= unk_id < len(pieces):
        raise bad_input(path, f"the SentencePiece model's unk_id {unk_id} is not one of its {len(pieces)} pieces")
    return SentencePieceModel(pieces, model_type, unk_id, charsmap)


def read_unigram(path: Path, whose: str) -> SentencePieceModel:
    """`read`, refusing any model but a Unigram (`whose` says what the file should be: "ALBERT's")."""
    model = read(path)
    if model.model_type != UNIGRAM:
        name = MODEL_TYPE_NAMES.get(model.model_type, str(model.model_type))
        raise bad_input(path, f"a SentencePiece {name} model; fill-mask reads {whose} Unigram models")
    return model


def _piece(message: memoryview, path: Path, index: int) -> Piece:
    entry = f"pieces[{index}]"
    text, score, kind = None, 0.0, NORMAL
    for field in pw.iter_fields(message, source=path, entry=entry):
        if field.number == 1:
            pw.require_wire_type(field, pw.WIRE_LEN, "piece", source=path, entry=entry)
            try:
                text = bytes(field.value).decode("utf-8")
            except UnicodeDecodeError:
                raise bad_input(path, f"{entry}: the piece is not UTF-8 text") from None
        elif field.number == 2:
            pw.require_wire_type(field, pw.WIRE_FIXED32, "score", source=path, entry=entry)
            score = struct.unpack("<f", field.value.to_bytes(4, "little"))[0]
        elif field.number == 3:
            pw.require_wire_type(field, pw.WIRE_VARINT, "type", source=path, entry=entry)
            kind = pw.as_int64(field.value)
    if text is None:
        raise bad_input(path, f"{entry}: has no piece text")
    return Piece(text, score, kind)
