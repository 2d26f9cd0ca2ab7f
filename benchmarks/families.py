"""Issue 28's rows: per family that bertconv reads in Hugging Face format and transformers has,
at the size of its best-known base checkpoint, each side a whole process, the two taking turns:

  - `bertconv convert SRC DST --to hf` against transformers' `AutoModelForMaskedLM.from_pretrained`
    + `save_pretrained` (goal: ≥5x faster), bertconv's peak RSS against the largest tensor +
    150 MiB, and whether its output holds the tensors transformers saved, bit for bit;
  - `bertconv fill-mask` against transformers' `pipeline("fill-mask")` on the same text (the
    family's mask token), and whether both put the same token first.

Inputs are built by transformers itself (random weights, see `benchmarks/family_inputs.py`) and
cached under the bench directory. Adding a family is one `Bench` line in `FAMILIES`.
"""

from __future__ import annotations

import json
import math
import shutil
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from . import inputs
from .conversions import WHY, Command, Runner, bertconv_command
from .measure import warm
from .report import CONVERT_GOAL, FILL_MASK_GOAL, MIB, RSS_HEADROOM, Row, Section

ROOT = inputs.ROOT
BUILDER = Path(__file__).resolve().parent / "family_inputs.py"
RESAVE = inputs.REFERENCE / "hf_masked_lm_resave.py"
FILL_MASK = inputs.REFERENCE / "fill_mask_pipeline.py"
#: torch's seed for the random weights.
SEED = 0
#: The environment with transformers 4.57, for families transformers 5 dropped (NEZHA).
ORACLE_PYTHON = ".cache/oracle-venv/bin/python"


@dataclass(frozen=True)
class Bench:
    """One family's rows: `config` is what transformers' `AutoConfig.for_model` takes (model_type
    first) at the size of `checkpoint`; the tokenizer is the one transformers builds from the
    committed fixture directory `tokenizer`; `text` holds the family's mask token; `python` runs
    the `transformers` that has the family (relative to the project root; default: this Python)."""

    name: str
    checkpoint: str
    config: dict
    tokenizer: str
    text: str
    python: str = ""
    transformers: str = "transformers 5"

    @property
    def interpreter(self) -> str:
        return str(ROOT / self.python) if self.python else sys.executable

    def spec(self) -> dict:
        """What `family_inputs.py` builds from (and the cache records)."""
        return {"config": self.config, "tokenizer": self.tokenizer, "seed": SEED}


#: A made-up protein of a typical length: 266 residues and one <mask> (ESM-2 reads up to 1,022 tokens).
PROTEIN = "MKTAYIAKQRQISFVKSHFSRQ<mask>EERLGLIEVQAPILSRVGDGTQDNLSGAEKAVQVKVKALPDAQFEVVHSLAKWKRQTLGQHDFSAGEGLYTHMKALRPDEDRLSPLHSVYVDQWDWERVMGDGERQFSTLKSTVEAIWAGIKATEAAVSEEFGLAPFLPDQIHFVHSQELLSRYPDLDAKGRERAIAKDLGAVFLVGIGGKLSDGHRHDVRAPDYDDWUAAEPAREAHVEAVDRALSWYDRTGLHGKLYALHDLIRSLQ"
#: One line per family, at the size of its best-known base checkpoint (`--families` takes the keys).
#: A family only transformers 4.57 has (NEZHA) adds `python=ORACLE_PYTHON, transformers="transformers 4.57"`.
FAMILIES: dict[str, Bench] = {
    "modernbert": Bench("ModernBERT", "answerdotai/ModernBERT-base", dict(
        model_type="modernbert", hidden_size=768, num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
        vocab_size=50368, max_position_embeddings=8192, local_attention=128),
        "fixtures/modernbert/masked_lm", "The capital of France is [MASK]."),
    "megatron-bert": Bench("Megatron-BERT", "nvidia/megatron-bert-uncased-345m", dict(
        model_type="megatron-bert", hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
        intermediate_size=4096, vocab_size=30592, max_position_embeddings=512),
        "fixtures/prenorm/megatron/masked_lm", "the capital of france is [MASK] ."),
    "esm": Bench("ESM-2", "facebook/esm2_t30_150M_UR50D", dict(
        model_type="esm", hidden_size=640, num_hidden_layers=30, num_attention_heads=20, intermediate_size=2560,
        vocab_size=33, max_position_embeddings=1026, position_embedding_type="rotary", token_dropout=True,
        emb_layer_norm_before=False, layer_norm_eps=1e-5), "fixtures/prenorm/esm/masked_lm", PROTEIN),
    "xlm-roberta": Bench("XLM-RoBERTa", "FacebookAI/xlm-roberta-base", dict(
        model_type="xlm-roberta", hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
        intermediate_size=3072, vocab_size=250002, max_position_embeddings=514, type_vocab_size=1, layer_norm_eps=1e-5),
        "fixtures/family_hf/xlm_roberta/masked_lm", "The capital of France is <mask>."),
    "distilbert": Bench("DistilBERT", "distilbert/distilbert-base-uncased", dict(
        model_type="distilbert", dim=768, n_layers=6, n_heads=12, hidden_dim=3072, vocab_size=30522,
        max_position_embeddings=512), "fixtures/family_hf/distilbert/masked_lm", "the capital of france is [MASK] ."),
    "deberta-v2": Bench("DeBERTa-v3", "microsoft/deberta-v3-base", dict(
        model_type="deberta-v2", hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        vocab_size=128100, max_position_embeddings=512, type_vocab_size=0, relative_attention=True,
        position_buckets=256, max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
        share_att_key=True, position_biased_input=False, layer_norm_eps=1e-7),
        "fixtures/deberta/v3/masked_lm", "The capital of France is [MASK]."),
    "nezha": Bench("NEZHA", "sijunhe/nezha-cn-base", dict(
        model_type="nezha", hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        vocab_size=21128, max_position_embeddings=512, max_relative_position=64),
        "fixtures/nezha/hf/masked_lm", "the capital of france is [MASK] .", python=ORACLE_PYTHON,
        transformers="transformers 4.57"),
    # Chinese words split by jieba (rjieba) before WordPiece, in both tools.
    "roformer": Bench("RoFormer", "junnyu/roformer_chinese_base", dict(
        model_type="roformer", hidden_size=768, num_hidden_layers=12, num_attention_heads=12, intermediate_size=3072,
        vocab_size=50000, max_position_embeddings=1536, embedding_size=768),
        "fixtures/roformer/hf/masked_lm", "北京的天气[MASK]常好。"),
}
#: What `--quick` runs: the smallest.
QUICK = ("distilbert",)


def input_dir(key: str) -> Path:
    return inputs.bench_dir() / "families" / key


def ensure(key: str, log: Callable[[str], None]) -> Path:
    """The family's input directory (model.safetensors, config.json, tokenizer files), built by
    transformers first if the cache lacks it or holds another spec."""
    bench = FAMILIES[key]
    return inputs.build_once(input_dir(key), [bench.interpreter, BUILDER, json.dumps(bench.spec())], bench.spec(),
                             what=f"{bench.name} ({bench.checkpoint}'s size)", log=log)


def safetensors_header(path: Path) -> dict:
    """The JSON header of a safetensors file: name -> {dtype, shape, data_offsets} (and __metadata__)."""
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(length))


DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def largest_tensor_bytes(path: Path) -> int:
    return max(math.prod(entry["shape"]) * DTYPE_BYTES[entry["dtype"]]
               for name, entry in safetensors_header(path).items() if name != "__metadata__")


def same_tensors(ours: Path, theirs: Path) -> str:
    """"yes" when two model.safetensors hold the same names, dtypes, shapes and bytes; else what differs."""
    if not (ours.is_file() and theirs.is_file()):
        return ""
    headers = [{n: e for n, e in safetensors_header(p).items() if n != "__metadata__"} for p in (ours, theirs)]
    only_ours, only_theirs = sorted(headers[0].keys() - headers[1].keys()), sorted(headers[1].keys() - headers[0].keys())
    if only_ours or only_theirs:
        return f"NO: names differ ({_some(only_ours)} only in bertconv's; {_some(only_theirs)} only in transformers')"
    differ = []
    with open(ours, "rb") as a, open(theirs, "rb") as b:
        starts = [8 + struct.unpack("<Q", f.read(8))[0] for f in (a, b)]
        for name in sorted(headers[0]):
            x, y = headers[0][name], headers[1][name]
            if (x["dtype"], x["shape"]) != (y["dtype"], y["shape"]):
                differ.append(name)
                continue
            a.seek(starts[0] + x["data_offsets"][0])
            b.seek(starts[1] + y["data_offsets"][0])
            if a.read(x["data_offsets"][1] - x["data_offsets"][0]) != b.read(y["data_offsets"][1] - y["data_offsets"][0]):
                differ.append(name)
    return "yes" if not differ else f"NO: values differ ({_some(differ)})"


def _some(names: list[str], shown: int = 2) -> str:
    """A count of names and the first few ("3: a, b, ...")."""
    return f"{len(names)}: {', '.join(names[:shown])}{', ...' if len(names) > shown else ''}" if names else "none"


def top_token(stdout: Path, *, bertconv: bool) -> int | None:
    """The id of the first prediction: bertconv's --json, or the pipeline script's first line."""
    try:
        text = stdout.read_text()
        if bertconv:
            return json.loads(text)["masks"][0]["predictions"][0]["id"]
        return int(text.split("\t", 1)[0])
    except (OSError, ValueError, KeyError, IndexError):
        return None


def title(bench: Bench, directory: Path) -> str:
    config = json.loads((directory / "config.json").read_text())
    layers = config.get("num_hidden_layers", config.get("n_layers"))
    hidden = config.get("hidden_size", config.get("dim"))
    weights = (directory / "model.safetensors").stat().st_size
    return (f"{bench.name} ({bench.checkpoint}'s size: L={layers}, H={hidden}, V={config['vocab_size']:,}, fp32): "
            f"{weights / MIB:,.0f} MiB in model.safetensors")


def section(key: str, runner: Runner) -> Section:
    bench = FAMILIES[key]
    directory = ensure(key, runner.log)
    weights = directory / "model.safetensors"
    warm(sorted(p for p in directory.iterdir() if p.is_file()))
    result = Section(title(bench, directory))

    ours_out, theirs_out = runner.out(f"{key}-bertconv"), runner.out(f"{key}-transformers")
    command = [*bertconv_command(), "convert", directory, ours_out, "--to", "hf", "--quiet"]
    # The check runs once both outputs exist (they are removed after the last run of both).
    ours, theirs = runner.run_alternating([
        Command(command, ours_out, check=lambda out: same_tensors(out / "model.safetensors", theirs_out / "model.safetensors")),
        Command([bench.interpreter, RESAVE, directory, theirs_out], theirs_out)])
    limit = largest_tensor_bytes(weights) + RSS_HEADROOM
    same = runner.checked(command)
    convert = Row("convert HF → HF", "bertconv", ours, check=f"RSS ≤ {limit / MIB:,.0f} MiB (largest tensor + 150)",
                  passed=None if ours is None else ours.peak_rss_bytes <= limit, why=WHY["rss"],
                  note=f"output = transformers' save_pretrained, bit for bit: {same}" if same else "")
    result.rows += [convert, Row(convert.task, f"{bench.transformers} AutoModelForMaskedLM from_pretrained + save_pretrained",
                                 theirs, bertconv=convert, goal=CONVERT_GOAL, why=WHY["convert"])]

    stdouts = runner.out(f"{key}-fill-mask-bertconv.json"), runner.out(f"{key}-fill-mask-pipeline.txt")
    ours, theirs = runner.run_alternating([
        Command([*bertconv_command(), "fill-mask", directory, bench.text, "--json", "--quiet"], stdout=str(stdouts[0])),
        Command([bench.interpreter, FILL_MASK, directory, bench.text], stdout=str(stdouts[1]))])
    tops = top_token(stdouts[0], bertconv=True), top_token(stdouts[1], bertconv=False)
    for path in stdouts:
        path.unlink(missing_ok=True)
    mask = next(token for token in ("[MASK]", "<mask>") if token in bench.text)
    fill = Row(f"fill-mask (one {mask})", "bertconv", ours, check="same top token as the pipeline",
               passed=None if None in tops else tops[0] == tops[1],
               note="" if None in tops else f"top token ids: bertconv {tops[0]}, pipeline {tops[1]}")
    result.rows += [fill, Row(fill.task, f"{bench.transformers} pipeline('fill-mask')", theirs, bertconv=fill,
                              goal=FILL_MASK_GOAL, why=WHY["fill-mask"])]
    result.notes.append(f"Random weights (torch seed {SEED}) at {bench.checkpoint}'s size, built with {bench.transformers} "
                        f"(`from_config` + `save_pretrained`); the tokenizer is transformers' from "
                        f"{bench.tokenizer}, padded with filler tokens to the model's vocabulary.")
    return result


def run(keys: list[str], reps: int, log, *, idle_wait: float = 0, untimed_first_run: bool = True) -> list[Section]:
    """The sections of the families `keys`, each command measured `reps` times (after an untimed
    first run unless `untimed_first_run` is False: `Runner.untimed_first_run`)."""
    out_dir = inputs.bench_dir() / "out-families"
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    runner = Runner(reps, out_dir, log, idle_wait, untimed_first_run)
    try:
        sections = []
        for key in keys:
            log(f"== {FAMILIES[key].name}")
            sections.append(section(key, runner))
        return sections
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
