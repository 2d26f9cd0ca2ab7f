"""The NumPy runtime computes on the checkpoint's memory maps: float32 weights are mapped, not
copied, where the layout allows (issue 17), and copied only where it does not; its small products
run on one BLAS thread.

Fixtures: fixtures/runtime/pretraining (a float32 model.safetensors, tied), small files written
here with a tensor at a chosen offset, and a V30522 H256 L2 model written by transformers for the
resident-memory measurement.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import FIXTURES, ROOT
from bertconv import load
from bertconv.dtypes import FLOAT16, FLOAT32
from bertconv.runtime import NumpyBert, blas
from bertconv.runtime.weights import float32_values
from bertconv.tensor import ArrayTensor, MappedTensor, StridedTensor, TransposedTensor

TIED = FIXTURES / "runtime" / "pretraining"
#: Resident anonymous memory a model may add, as a share of its float32 file: Python objects and
#: the forward pass's activations, not a second copy of the weights (a copy adds 1.0).
ANON_GROWTH_MAX = 0.25


def mapped_file_of(array: np.ndarray) -> Path | None:
    """The file whose memory map holds `array`'s first value (from /proc/self/maps), or None
    when that memory is not a map of a file."""
    if array.size == 0:
        return None
    address = array.__array_interface__["data"][0]
    with open("/proc/self/maps") as maps:
        for line in maps:
            span, _, _, _, inode, *path = line.split(maxsplit=5)
            start, end = (int(bound, 16) for bound in span.split("-"))
            if start <= address < end:
                return Path(path[0].strip()) if inode != "0" and path else None
    return None


def test_a_float32_checkpoints_weights_are_views_of_its_memory_maps():
    tree = load(TIED)
    model = NumpyBert(tree)
    file = (TIED / "model.safetensors").resolve()
    copied = [name for name, values in model.params.items()
              if values.flags.writeable or mapped_file_of(values) != file]
    assert not copied
    kernel = model.params["layers.0.attention.query.kernel"]  # stored [out, in]: its map, transposed
    assert kernel.flags.f_contiguous and not kernel.flags.c_contiguous
    assert np.array_equal(kernel, tree["layers.0.attention.query.kernel"].tensor.read())
    assert model.params[model.decoder] is model.params["embeddings.word"]


@pytest.fixture
def stored(tmp_path):
    """A [3, 5] float32 matrix and a file holding it at byte 8 (aligned) and at byte 2 (not)."""
    matrix = np.arange(15, dtype=np.float32).reshape(3, 5)
    path = tmp_path / "tensors.bin"
    path.write_bytes(bytes(8) + matrix.tobytes() + bytes(2) + matrix.tobytes())
    return matrix, path


def test_layouts_blas_takes_are_shared(stored):
    matrix, path = stored
    mapped = MappedTensor(path, 8, FLOAT32, (3, 5))
    for tensor, expected in ((mapped, matrix), (TransposedTensor(mapped), matrix.T),
                             (TransposedTensor(TransposedTensor(mapped)), matrix)):
        values = float32_values(tensor)
        assert np.array_equal(values, expected)
        assert mapped_file_of(values) == path.resolve() and not values.flags.writeable, tensor


def test_layouts_blas_does_not_take_are_copied(stored):
    matrix, path = stored
    misaligned = MappedTensor(path, 8 + matrix.nbytes + 2, FLOAT32, (3, 5))
    every_other_column = StridedTensor(path, 8, matrix.nbytes, FLOAT32, (3, 3), (5, 2), 0)
    half = MappedTensor(path, 8, FLOAT16, (3, 10))
    in_memory = ArrayTensor(matrix, FLOAT32)  # writable: its owner could change it under the model
    for tensor, expected in ((misaligned, matrix), (every_other_column, matrix[:, ::2]),
                             (half, np.frombuffer(matrix.tobytes(), "<f2").reshape(3, 10).astype(np.float32)),
                             (in_memory, matrix)):
        values = float32_values(tensor)
        assert np.array_equal(values, expected)
        assert values.dtype == np.float32 and values.flags.c_contiguous and values.flags.aligned
        assert values.flags.owndata and mapped_file_of(values) is None, tensor
    assert not np.shares_memory(float32_values(in_memory), matrix)


@pytest.fixture(scope="module")
def vocab_sized_model(tmp_path_factory) -> Path:
    """A float32 BertForMaskedLM with BERT's vocabulary (V30522 H256 L2 A4 I1024 P128), 38 MB."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=30522, hidden_size=256, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=1024, max_position_embeddings=128)
    directory = tmp_path_factory.mktemp("vocab-sized")
    transformers.BertForMaskedLM(config).save_pretrained(directory)
    return directory


ANON_GROWTH_SCRIPT = """
import sys
from pathlib import Path
import numpy as np
from bertconv import load
from bertconv.runtime import NumpyBert

def resident_anonymous_bytes():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024

np.ones((64, 512), np.float32) @ np.ones((512, 512), np.float32)  # BLAS's own buffers, before measuring
tree = load(Path(sys.argv[1]))
before = resident_anonymous_bytes()
model = NumpyBert(tree)
model.masked_lm_logits(np.array([[2, 5, 7, 3]]), np.zeros((1, 4), int), np.ones((1, 4), int), np.array([[1]]))
print(resident_anonymous_bytes() - before)
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads RssAnon from /proc (Linux)")
def test_running_a_float32_model_adds_no_copy_of_its_weights(vocab_sized_model):
    """Measured in a process of its own: resident anonymous memory (not the page cache's pages of
    the mapped file) after loading the model and running it, which reads every weight."""
    file_size = (vocab_sized_model / "model.safetensors").stat().st_size
    proc = subprocess.run([sys.executable, "-c", ANON_GROWTH_SCRIPT, str(vocab_sized_model)],
                          capture_output=True, text=True, cwd=ROOT, check=True)
    growth = int(proc.stdout)
    assert growth < ANON_GROWTH_MAX * file_size, f"{growth / 2**20:.1f} MiB for a {file_size / 2**20:.1f} MiB file"


def test_one_thread_runs_blas_single_threaded_then_restores_the_count():
    from threadpoolctl import threadpool_info, threadpool_limits

    def blas_threads() -> list[int]:
        return [pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"]

    if not blas_threads():
        pytest.skip("threadpoolctl finds no BLAS loaded by NumPy here")
    with threadpool_limits(limits=2, user_api="blas"):
        if set(blas_threads()) != {2}:
            pytest.skip("the BLAS runs one thread at most here")
        with blas.one_thread():
            assert set(blas_threads()) == {1}
        assert set(blas_threads()) == {2}


def test_products_of_few_rows_run_on_one_blas_thread(monkeypatch):
    """A short text's products run under `one_thread`; at BLAS_THREADS_MIN_ROWS rows the dense
    products are BLAS's to split (the per-head attention products, S rows each, stay on one)."""
    from contextlib import contextmanager

    from bertconv.runtime import numpy_bert

    entered = []

    @contextmanager
    def recording_one_thread():
        entered.append(True)
        yield

    monkeypatch.setattr(numpy_bert.blas, "one_thread", recording_one_thread)
    model = NumpyBert(load(TIED))
    layers = model.config.num_hidden_layers

    def count(batch: int, seq_len: int) -> int:
        entered.clear()
        ids = np.full((batch, seq_len), 7)
        model.masked_lm_logits(ids, np.zeros_like(ids), np.ones_like(ids), np.zeros((batch, 1), int))
        return len(entered)

    dense_per_layer, attention_per_layer = 6, 2  # query, key, value, output, intermediate, output
    assert count(1, 8) == layers * (dense_per_layer + attention_per_layer) + 2  # + the MLM transform, decoder
    rows = numpy_bert.BLAS_THREADS_MIN_ROWS
    assert count(rows // 32, 32) == layers * attention_per_layer + 2  # the head runs at B positions only
