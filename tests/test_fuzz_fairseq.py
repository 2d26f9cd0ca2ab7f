"""Fuzzing the fairseq reader: its `model.pt` bytes, and its pickle inside an intact zip.

The pickle is where fairseq's checkpoints differ from a state dict (an argparse.Namespace, the
optimizer history beside the model), so half of the cases mutate it alone and rebuild a zip
around it that the container reader accepts; the reader must read each or refuse it cleanly
(`fuzzing.check_case`), and reading `fairseq.read` directly keeps the mutant from going to
another format's reader when it stops sniffing as fairseq.
"""

from __future__ import annotations

import io
import zipfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES
from fuzzing import check_case, mutations, share_of_cases
from bertconv.formats import fairseq

SOURCE = FIXTURES / "family_google" / "fairseq" / "roberta" / "model.pt"

pytestmark = pytest.mark.fuzz


def _read_as_fairseq(path: Path) -> None:
    tree = fairseq.read(path)
    for param in tree:
        np.asarray(param.tensor.read()).sum()


def test_fairseq_bytes_survive_mutations(tmp_path):
    data = SOURCE.read_bytes()
    target = tmp_path / "model.pt"
    outcomes = Counter()
    count = share_of_cases(0.25)
    for _kind, label, mutant in mutations(data, seed=16, count=count, boundaries=[0, 4, 30]):
        target.write_bytes(mutant)
        outcomes[check_case(target, f"model.pt {label}", _read_as_fairseq)] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == count


def _rezipped(members: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    return buffer.getvalue()


def test_fairseq_pickle_survives_mutations_inside_an_intact_zip(tmp_path):
    with zipfile.ZipFile(SOURCE) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    pickle_name = next(name for name in members if name.endswith("/data.pkl"))
    target = tmp_path / "model.pt"
    target.write_bytes(_rezipped(members))
    assert check_case(target, "rezipped original", _read_as_fairseq) == "ok"
    outcomes = Counter()
    count = share_of_cases(0.25)
    for _kind, label, mutant in mutations(members[pickle_name], seed=17, count=count, boundaries=[0, 2, 40]):
        target.write_bytes(_rezipped({**members, pickle_name: mutant}))
        outcomes[check_case(target, f"data.pkl {label}", _read_as_fairseq)] += 1
    assert outcomes["refused"] > 0 and sum(outcomes.values()) == count
