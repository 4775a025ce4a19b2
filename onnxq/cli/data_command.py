"""python -m onnxq data MODEL SOURCE -o data.npz: what the user has (text, images, one .npy, an .npz named otherwise)
as an .npz keyed by the model's input names, read as quantize would read it, and an account of what it made."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from onnxq.data.batching import Holdout, fixed_batch_size
from onnxq.data.completion import describe_made
from onnxq.data.holdout import plan_holdout
from onnxq.data.dataset import validated_batches
from onnxq.cli.args import Parser, add_verbose_flag, path_arg
from onnxq.config import QuantConfig
from onnxq.data import (ReadData, SourceModel, Written, add_data_source_flags, data_config_from_args, declare_source,
                        described, resolve_source, source_model, write_npz)
from onnxq.errors import ConfigError
from onnxq.io import load_model, run_files, write_output
from onnxq.verify.tasks.rules import language_model_logits, may_hold_to_a_share

__all__ = ["build_data_parser", "data_command"]

_SHOWN = 8  # inputs listed one a line; a decoder's caches beyond are counted


def build_data_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="python -m onnxq data",
        description="Write the data you have as an .npz keyed by the model's input names, as python -m onnxq "
                    "--calib / --verify-data would read it (they also take these sources directly, with the same "
                    "flags), and say what was made.",
        epilog="Exit status: 0 written, 2 bad input (nothing written).")
    p.add_argument("model", type=path_arg, help="the float .onnx model the data feeds")
    p.add_argument("source", type=path_arg, metavar="SOURCE",
                   help=".txt / .jsonl / a folder of .txt (text), a folder or pattern of images, one .npy, or an .npz")
    p.add_argument("-o", "--output", type=path_arg, metavar="NPZ", required=True, help="the .npz to write")
    p.add_argument("--config", type=path_arg, metavar="TOML", help="QuantConfig as TOML (its [data] table applies)")
    add_data_source_flags(p)
    add_verbose_flag(p)
    return p


def data_command(argv: list[str]) -> int:
    args = build_data_parser().parse_args(argv)
    with run_files() as files:  # the .npz is written when everything was read well, or not at all
        if args.config:
            files.read(args.config, "the config file", ConfigError)
        files.claim(args.output, "output")
        config = QuantConfig.from_toml(args.config) if args.config else QuantConfig()
        config = config.replace(data=data_config_from_args(config.data, args))
        model = load_model(args.model)
        files.add_input(args.model, "the input model")
        reads = source_model(model, config.calibration, language_model_logits(model) is not None, args.model)
        resolved = resolve_source(args.source, reads, config.data, "calibration")
        declare_source(files, args.source, resolved, "the calibration data")
        made: dict[str, str] = {}
        source = dataclasses.replace(resolved, same_shape=True) if isinstance(resolved, ReadData) else resolved
        batches = validated_batches(source, list(reads.specs), reads.batch_size, made=made)
        written: dict[str, Written] = {}
        write_output(args.output, lambda staged: written.update(write_npz(staged, batches)))
    how = described(resolved) or f"{args.source}" + "".join(
        f", {name} from {array}" for name, array in config.data.input_map.items())
    shares = may_hold_to_a_share(model, config.verify)
    split = _split(_samples(written, reads), reads, config, shares)
    print("\n".join([*_account(Path(args.output), how, resolved, reads, written, made), split]))
    return 0


def _account(output: Path, how: str, resolved, model: SourceModel, written: dict[str, Written],
             made: dict[str, str]) -> list[str]:
    """What was written: the inputs, their shapes and how each was made."""
    lines = [f"onnxq: wrote {output}: {_samples(written, model)} samples, from {how}"]
    by_reader = resolved.opened.made if isinstance(resolved, ReadData) else {}
    width = max(map(len, list(written)[:_SHOWN]), default=0)
    for name, array in list(written.items())[:_SHOWN]:
        said = by_reader.get(name) or made.get(name)
        lines.append(f"  {name:<{width}}  {array.dtype} {list(array.shape)}" + (f"  made: {said}" if said else ""))
    rest = {name: made[name] for name in list(written)[_SHOWN:] if name in made}
    if len(written) > _SHOWN:
        lines.append(f"  … {len(written) - _SHOWN} more inputs" + (f"; {describe_made(rest)}" if rest else ""))
    return lines


def _samples(written: dict[str, Written], model: SourceModel) -> int:
    return next((w.shape[0] for name, w in written.items() if model.spec(name).sample_axis is not None), 1)


def _split(samples: int, model: SourceModel, config: QuantConfig, shares: bool) -> str:
    """The held-out split of python -m onnxq MODEL --calib data.npz (no --verify-data): data.holdout's plan
    (shares: an output of the model may be judged by a task share, whose bar needs more samples)."""
    verify = config.verify
    plan = plan_holdout(samples, verify.holdout_every, verify.max_samples, shares)
    held = Holdout(plan.every, plan.most, fixed_batch_size(list(model.specs))).held_of(samples)
    if held == 0:
        return (f"quantize --calib would hold back no sample for verification (fewer than {verify.holdout_every}) "
                "and verify on calibration data, which flatters the result — pass --verify-data too")
    return (f"quantize --calib would calibrate on {samples - held} and verify on {held} held back "
            f"({plan.words(held)}); with --verify-data it calibrates on all")
