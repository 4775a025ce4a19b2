"""The flags that say what the data is (text, images, arrays named otherwise), for every command that reads data:
python -m onnxq (--calib, --verify-data), calibrate, verify and data. They set the config's [data] table."""

from __future__ import annotations

import argparse
import dataclasses
import re

from onnxq.config import NORMALIZATIONS, DataConfig
from onnxq.errors import ConfigError

__all__ = ["add_data_source_flags", "data_config_from_args"]


DATA_SOURCES = ("data sources", "besides .npz, the data may be text (.txt a sample a line, .jsonl, a folder of .txt) "
                                "with the model's tokenizer.json, images (a folder, a pattern such as 'photos/*.jpg'), "
                                "or one .npy for a one-input model; see python -m onnxq data")


def add_data_source_flags(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """The flags, in a group of their own on a parser, or in the group given (the main command's data group)."""
    group = p.add_argument_group(*DATA_SOURCES) if isinstance(p, argparse.ArgumentParser) else p
    group.add_argument("--tokenizer", metavar="JSON",
                       help="text: the model's Hugging Face tokenizer.json (default: tokenizer.json beside the model)")
    group.add_argument("--field", metavar="NAME", help="text: the field of each .jsonl line holding it (default text)")
    group.add_argument("--max-length", type=int, metavar="N",
                       help="text, encoders: tokens per sentence at most, each batch padded to its longest (default: "
                            "the model's fixed length, else the tokenizer's, else 512)")
    group.add_argument("--window", type=int, metavar="N",
                       help="text, decoders: tokens per window, cut from the text end to end (default: the model's "
                            "fixed length, else 128)")
    group.add_argument("--size", metavar="S|HxW",
                       help="images: height and width where the model leaves them open (each image scaled to cover "
                            "it, then cropped around the centre)")
    group.add_argument("--normalize", choices=list(NORMALIZATIONS),
                       help="images: pixel values: imagenet (default: 0-1, then its mean and std), unit 0-1, "
                            "signed -1..1, raw 0-255")
    group.add_argument("--mean", metavar="M[,M,M]",
                       help="images: subtracted after --scale, per channel (in the model's order)")
    group.add_argument("--std", metavar="S[,S,S]", help="images: divided by after the mean, per channel")
    group.add_argument("--scale", type=float, metavar="X", help="images: each pixel (0-255) multiplied by X first")
    group.add_argument("--bgr", action="store_true", default=None, help="images: the model takes BGR (OpenCV)")
    group.add_argument("--input-map", action="append", metavar="INPUT=ARRAY",
                       help="feed INPUT from the data's array ARRAY (an .npz named otherwise, e.g. x=x_train); the "
                            "arrays not named are left out; repeatable")
    group.add_argument("--verify-input-map", action="append", metavar="INPUT=ARRAY",
                       help="the same for --verify-data (e.g. x=x_test from the same .npz); default: --input-map's, "
                            "where that data has its arrays; repeatable")


def data_config_from_args(data: DataConfig, args: argparse.Namespace) -> DataConfig:
    """The flags over the config file's [data] table (a parser without the flags: the table as it is)."""
    if not hasattr(args, "input_map"):
        return data
    changes = {key: value for key, value in {
        "tokenizer": args.tokenizer, "field": args.field, "max_length": args.max_length, "window": args.window,
        "size": _size(args.size), "normalize": args.normalize, "mean": _numbers(args.mean, "--mean"),
        "std": _numbers(args.std, "--std"), "scale": args.scale, "channel_order": "bgr" if args.bgr else None,
    }.items() if value is not None}
    for flag, key in (("--input-map", "input_map"), ("--verify-input-map", "verify_input_map")):
        specs = getattr(args, key, None)
        if specs:
            changes[key] = {**getattr(data, key), **_pairs(specs, flag)}
    return dataclasses.replace(data, **changes) if changes else data


def _size(text: str | None) -> tuple[int, ...] | None:
    if text is None:
        return None
    match = re.fullmatch(r"\s*(\d+)\s*(?:[x×,]\s*(\d+)\s*)?", text)
    if match is None:
        raise ConfigError(f"--size {text!r}: give S (e.g. 224) or HxW (e.g. 256x192)")
    return tuple(int(g) for g in match.groups() if g is not None)


def _numbers(text: str | None, flag: str) -> tuple[float, ...] | None:
    if text is None:
        return None
    try:
        return tuple(float(part) for part in text.split(","))
    except ValueError:
        raise ConfigError(f"{flag} {text!r}: give one number or three, comma-separated (e.g. 0.485,0.456,0.406)"
                          ) from None


def _pairs(specs: list[str], flag: str) -> dict[str, str]:
    """INPUT=ARRAY specs; an input named twice is refused (the later would silently replace the earlier)."""
    pairs: dict[str, str] = {}
    for spec in specs:
        name, _, array = spec.partition("=")
        if not name or not array:
            raise ConfigError(f"{flag} {spec!r}: expected INPUT=ARRAY, e.g. x=x_train")
        if name in pairs and pairs[name] != array:
            hint = (" — to verify on another array, keep --input-map for calibration and add --verify-input-map "
                    f"{name}={array}" if flag == "--input-map" else "")
            raise ConfigError(f"{flag} gives {name} twice ({pairs[name]}, {array}): one array per input{hint}")
        pairs[name] = array
    return pairs
