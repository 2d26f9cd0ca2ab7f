"""ONNX export of the masked-LM logits (`convert SRC DST --to onnx`): a write-only format.

The output is a directory: `model.onnx` (the graph of `onnx_graph`, inputs `input_ids`,
`attention_mask` and, where the model has token types, `token_type_ids`, int64 [B, S]; output
`logits` float32 [B, S, V]), `model.onnx.data` beside it when the weights pass protobuf's 2 GB
(`EXTERNAL_DATA_BYTES`), and the source's tokenizer files, as every directory target carries
them.

The weights are streamed one tensor at a time. A protobuf parser merges repeated occurrences of
an embedded message field, so `model.onnx` is written as a sequence of serialized ModelProtos:
the model's header and graph first, then one `ModelProto(graph=GraphProto(initializer=[t]))` per
weight, which a reader merges into one graph with every initializer in order. Only the few bytes
before a weight's values are encoded here (`_inline_weight_prefix`, the bytes protobuf would
write); the values go through `stream.append` like any checkpoint's tensors (copied, or
transposed straight into the output, past the page cache), so no weight is serialized in
memory. Past 2 GB the values go to `model.onnx.data` instead, at aligned offsets, and each
TensorProto names them with the entries of onnx's `external_data_helper.set_external_data`.

After writing, `check_written` runs the file with onnxruntime and compares its logits with the
NumPy runtime's (`onnx_check`); `compare_outputs` does the same for `diff CKPT model.onnx
--outputs`. bertconv does not read ONNX files as checkpoints (`read` refuses them).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ... import dtypes, families
from ...containers import stream
from ...containers.direct_output import open_output
from ...containers.tensorflow import protowire as pw
from ...errors import BadInput, bad_input
from ...lazy import lazy_module
from ...version import __version__

TYPE_CHECKING = False  # typing's, without importing typing at run time (start-up)
if TYPE_CHECKING:
    from ...tree import ParameterTree
    from . import check as onnx_check, graph as onnx_graph
else:  # the onnx package is an optional extra, imported only by a write or a check
    onnx_graph = lazy_module("bertconv.formats.onnx.graph")
    onnx_check = lazy_module("bertconv.formats.onnx.check")

FORMAT = "onnx"
MODEL_FILE = "model.onnx"
DATA_FILE = "model.onnx.data"
OWNED_FILES = (MODEL_FILE, DATA_FILE)
#: The file `candidates` looks for in a directory.
DIRECTORY_FILES = (MODEL_FILE,)
#: The precisions `--dtype` takes (`onnx_graph.Precision`).
WRITES_DTYPES = ("float32", "float16")
#: Every family and variant the runtimes run: the graph is theirs, whatever the family.
WRITES_FAMILIES = (*families.FAMILIES, *(v.name for f in families.FAMILIES.values() for v in f.variants))

#: protobuf refuses messages of 2 GiB and more; weights past this many bytes go to DATA_FILE
#: (64 MiB left for the graph, which is a few hundred KB even for 48 layers).
EXTERNAL_DATA_BYTES = 2**31 - 2**26
#: Offsets of weights in DATA_FILE are multiples of this, so a runtime can map them.
EXTERNAL_DATA_ALIGNMENT = 4096
#: The first byte of a serialized ModelProto: field 1 (ir_version), a varint.
_IR_VERSION_TAG = 0x08
#: Field numbers of onnx.proto: ModelProto.graph, GraphProto.initializer, TensorProto's dims,
#: data_type, name and raw_data.
_MODEL_GRAPH, _GRAPH_INITIALIZER = 7, 5
_TENSOR_DIMS, _TENSOR_DATA_TYPE, _TENSOR_NAME, _TENSOR_RAW_DATA = 1, 2, 8, 9
#: TensorProto.DataType of the dtypes an export stores.
_DATA_TYPES = {np.dtype(np.float32): 1, np.dtype(np.float16): 10}
NOT_A_CHECKPOINT = ("an ONNX file is an export target, not a checkpoint bertconv reads; to check an export "
                    "against its source, run `bertconv diff SOURCE {path} --outputs`")


def sniff(path: Path) -> str | None:
    """FORMAT for a `.onnx` file that starts as a serialized ModelProto (its ir_version)."""
    path = Path(path)
    if not path.name.endswith(".onnx") or not path.is_file():
        return None
    with open(path, "rb") as f:
        return FORMAT if f.read(1) == bytes([_IR_VERSION_TAG]) else None


def candidates(directory: Path) -> list[Path]:
    """An export directory's `model.onnx`."""
    return [path for path in (Path(directory) / name for name in DIRECTORY_FILES) if path.is_file()]


def read(path: Path, *, config_path: Path | None = None, num_heads: int | None = None) -> "ParameterTree":
    """Refused: an export holds a computation, not the checkpoint's tensors and config."""
    raise bad_input(path, NOT_A_CHECKPOINT.format(path=path))


# --- writing ----------------------------------------------------------------------------------


def write(tree: "ParameterTree", directory: Path, *, options) -> list[Path]:
    """Write the MLM logits of `tree` as `model.onnx` (+ `model.onnx.data` past 2 GB) into the new
    `directory`. `options` is a `conversion.WriteOptions` (dtype, on_tensor).

    Raises BadInput for a tree the runtimes cannot run or without an MLM head, for a weight
    outside float16's range in a float16 export, and when the `onnx` package is not installed.
    """
    import importlib.util

    from ...runtime import weights

    if importlib.util.find_spec("onnx") is None:
        raise BadInput("the ONNX export needs the onnx package, an optional extra: pip install 'bertconv[onnx]'; "
                       "nothing was written")
    plan = weights.plan(tree)
    if not plan.heads.mlm:
        raise bad_input(tree.path, "has no MLM head (transform, its LayerNorm, output bias): the ONNX export "
                                   "computes the masked-LM logits, which this checkpoint cannot")
    missing = onnx_graph.not_computed(tree.config)
    if missing:
        values = ", ".join(f"{field} {getattr(tree.config, field)!r}" for field in missing)
        raise bad_input(tree.path, f"the ONNX export does not compute a model with {values} yet; nothing was written")
    precision = onnx_graph.Precision(options.dtype or "float32")
    graph = onnx_graph.build(tree.config, _numerics(tree), plan.decoder, plan.decoder_bias, precision)
    nbytes = sum(int(np.prod(tree[name].tensor.shape)) * init.dtype.itemsize
                 for name, init in graph.initializers.items())
    directory = Path(directory)
    external = directory / DATA_FILE if nbytes > EXTERNAL_DATA_BYTES else None
    model_path = directory / MODEL_FILE
    weights_in_order = [(init, _stored(tree, init)) for init in graph.initializers.values()]
    header = _header(tree, graph, precision).SerializeToString()
    if external is None:
        pieces: list[stream.Piece] = [header]
        for init, source in weights_in_order:
            pieces += [_inline_weight_prefix(init, source), source]
        with open_output(model_path, sum(map(stream.nbytes_of, pieces))) as out:
            stream.append(out, pieces, on_tensor=options.on_tensor)
        return [model_path]
    data_pieces: list[stream.Piece] = []
    references = []
    offset = 0
    for init, source in weights_in_order:
        padding = -offset % EXTERNAL_DATA_ALIGNMENT
        data_pieces += [stream.Padding(padding), source]
        offset += padding
        references.append(_external_weight(init, source, offset))
        offset += stream.nbytes_of(source)
    with open_output(external, offset) as out:
        stream.append(out, data_pieces, on_tensor=options.on_tensor)
    with open(model_path, "wb") as model_file:
        model_file.write(header + b"".join(references))
    return [model_path, external]


def _header(tree: "ParameterTree", graph, precision):
    """The ModelProto without its weights: graph, opset, and where it came from."""
    import onnx

    model = onnx.helper.make_model(graph.graph_proto("bertconv_mlm"), producer_name="bertconv",
                                   producer_version=__version__,
                                   opset_imports=[onnx.helper.make_opsetid("", onnx_graph.OPSET)])
    model.ir_version = onnx_graph.IR_VERSION
    model.doc_string = (f"Masked-LM logits of {tree.path.name} ({tree.format}), written by bertconv "
                        f"{__version__} in {precision.value}")
    onnx.helper.set_model_props(model, {"bertconv.source_format": tree.format,
                                        "bertconv.model_type": tree.config.model_type,
                                        "bertconv.numerics": _numerics(tree).describe(),
                                        "bertconv.dtype": precision.value})
    return model


def _stored(tree: "ParameterTree", init) -> "stream.TensorSource":
    """The weight `init.name` as the stream writes it: the tree's tensor itself when it is stored
    as the export stores it (copied, or transposed straight into the output), else its values
    converted (`_stored_values`)."""
    tensor = tree[init.name].tensor
    dtype = dtypes.from_numpy(np.dtype(init.dtype))
    source = tensor if tensor.dtype is dtype else (lambda: _stored_values(tree, init))
    return init.name, dtype, tuple(tensor.shape), source


def _stored_values(tree: "ParameterTree", init) -> np.ndarray:
    """The weight `init.name` in its stored dtype, C-ordered; float16 values past its range refused."""
    from ...runtime.weights import float32_values

    values = float32_values(tree[init.name].tensor)
    if init.dtype == np.float32:
        return np.ascontiguousarray(values)
    with np.errstate(over="ignore"):
        stored = np.ascontiguousarray(values.astype(init.dtype))
    if not np.isfinite(stored).all() and np.isfinite(values).all():
        param = tree[init.name]
        largest = float(np.abs(values).max())
        raise bad_input(param.file, f"tensor {init.name} ({param.source}) holds {largest:g}, beyond float16's "
                                    f"largest value {float(np.finfo(np.float16).max):g}: it cannot be stored in "
                                    f"float16; export with --dtype float32")
    return stored


def _tensor_fields(init, source: "stream.TensorSource") -> bytes:
    """A TensorProto's dims (1), data_type (2) and name (8), as protobuf serializes them."""
    _, _, shape, _ = source
    return (b"".join(pw.encode_varint_field(_TENSOR_DIMS, d) for d in shape)
            + pw.encode_varint_field(_TENSOR_DATA_TYPE, _DATA_TYPES[np.dtype(init.dtype)])
            + pw.encode_len_field(_TENSOR_NAME, init.name.encode("utf-8")))


def _inline_weight_prefix(init, source: "stream.TensorSource") -> bytes:
    """The bytes before a weight's values in `ModelProto(graph=GraphProto(initializer=[t]))` with
    the values as t's raw_data (9): the stream writes the values right after them, so the
    weight is never serialized in memory. The same bytes as that message's SerializeToString."""
    nbytes = stream.nbytes_of(source)
    tensor_head = _tensor_fields(init, source) + pw.encode_tag(_TENSOR_RAW_DATA, pw.WIRE_LEN) + pw.encode_varint(nbytes)
    graph_head = pw.encode_tag(_GRAPH_INITIALIZER, pw.WIRE_LEN) + pw.encode_varint(len(tensor_head) + nbytes)
    graph_length = len(graph_head) + len(tensor_head) + nbytes
    return pw.encode_tag(_MODEL_GRAPH, pw.WIRE_LEN) + pw.encode_varint(graph_length) + graph_head + tensor_head


def _external_weight(init, source: "stream.TensorSource", offset: int) -> bytes:
    """A ModelProto whose graph holds the weight alone, its values at `offset` in DATA_FILE: the
    external-data entries onnx's `set_external_data` makes."""
    import onnx

    tensor = onnx.TensorProto()
    tensor.ParseFromString(_tensor_fields(init, source))
    tensor.data_location = onnx.TensorProto.EXTERNAL
    for key, value in (("location", DATA_FILE), ("offset", offset), ("length", stream.nbytes_of(source))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return onnx.ModelProto(graph=onnx.GraphProto(initializer=[tensor])).SerializeToString()


# --- checks -----------------------------------------------------------------------------------


def check_written(tree: "ParameterTree", directory: Path, options) -> tuple[list[str], list[str]]:
    """Run the written export and compare it with the NumPy runtime (`onnx_check.verify`).

    Returns (the weights the export holds, by canonical name; notes). Raises CheckFailed when the
    outputs differ (or a float16 export overflows), BadInput for a float16 export that cannot be
    checked (onnxruntime absent).
    """
    from ...runtime import weights

    plan = weights.plan(tree)
    precision = onnx_graph.Precision(options.dtype or "float32")
    graph = onnx_graph.build(tree.config, _numerics(tree), plan.decoder, plan.decoder_bias, precision)
    notes = onnx_check.verify(tree, Path(directory) / MODEL_FILE, precision)
    return list(graph.initializers), notes


def compare_outputs(tree: "ParameterTree", path: Path, *, atol: float | None = None) -> dict:
    """`diff TREE path --outputs` for an export: `onnx_check.compare` on the probe batches."""
    path = Path(path)
    model = path / MODEL_FILE if path.is_dir() else path
    return onnx_check.compare(tree, model, atol=atol)


def _numerics(tree: "ParameterTree"):
    """The conventions the NumPy runtime runs `tree` with, which the graph computes too."""
    from ...runtime.numerics import Numerics

    return Numerics.for_tree(tree)
