"""Which flags set which keys of QuantConfig, as the command line itself says: each flag of the quantize command
is parsed with a value of each kind it may take, and the keys whose value changes in the QuantConfig it builds
(onnxq.cli.args.config_from_args) are the keys it sets. config_reference.py shows them beside each key."""

from __future__ import annotations

import argparse
import dataclasses
from typing import Any

# A value of each kind a flag takes, as parsed (and as the page shows it where a flag's value decides the key).
PROBES = (("0.5", "X"), ("16", "N"), ("x", "NAME"), ("cpu", "LIST"), ("x=1", "INPUT=N"), ("x=y", "INPUT=ARRAY"),
          ("json:dumps", "MODULE:FUNCTION"), ("numeric", "KIND"), ("cosine=0.5", "cosine=X"), ("sqnr=0.5", "sqnr=X"),
          ("max_abs=0.5", "max_abs=X"), ("argmax=0.5", "argmax=X"), ("perplexity=1.5", "perplexity=X"),
          ("threshold=0.5", "threshold=X"), ("top3=0.5", "topK=X"), ("task=0.5", "task=X"),
          ("task=numeric", "task=KIND"), ("y:cosine=0.5", "OUTPUT:METRIC=X"))
# Flags that take effect only beside another one: the blocks' flags need 4-bit weights, --compute float16 too.
CONTEXTS = ((), ("--weights", "int4"))


def flag_keys() -> dict[str, list[str]]:
    """Dotted config key → the flags that set it, as `--flag` or, where the value decides the key, `--flag VALUE`."""
    from onnxq.cli.args import config_from_args
    from onnxq.cli.help import build_parser
    from onnxq.errors import OnnxqError

    parser = build_parser()

    def config(argv: list[str]) -> dict[str, Any]:
        return _leaves(config_from_args(parser.parse_args(["model.onnx", *argv])))

    reached: dict[str, dict[str, set[str]]] = {}  # flag → key → the values (as shown) that set it
    for action in parser._actions:
        if not action.option_strings or not isinstance(action, (argparse._StoreAction, argparse._StoreConstAction,
                                                                 argparse._AppendAction)):
            continue
        flag = action.option_strings[-1]
        for context in CONTEXTS:
            base = config(list(context))
            for value, shown in _probes(action):
                try:
                    changed = config([*context, flag, *([] if value is None else [value])])
                except OnnxqError:
                    continue
                for key in (k for k in changed if changed[k] != base[k]):
                    reached.setdefault(flag, {}).setdefault(key, set()).add(shown)
    return _shown(reached)


def _probes(action: argparse.Action) -> list[tuple[str | None, str]]:
    if action.nargs == 0:
        return [(None, "")]
    if action.choices is not None:
        return [(str(c), str(c)) for c in action.choices]
    return list(PROBES)


def _shown(reached: dict[str, dict[str, set[str]]]) -> dict[str, list[str]]:
    """A flag alone where every value it took set the key; with the values that did where only some did."""
    keys: dict[str, list[str]] = {}
    for flag, by_key in reached.items():
        every = set().union(*by_key.values())
        for key, values in by_key.items():
            names = [f"`{flag}`"] if values == every else [f"`{flag} {v}`" for v in sorted(values)]
            keys.setdefault(key, []).extend(names)
    return keys


def _leaves(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted key → value, through nested tables (dict-valued keys, such as output_tolerances, whole)."""
    out = {}
    for field in dataclasses.fields(obj):
        value = getattr(obj, field.name)
        if dataclasses.is_dataclass(value):
            out.update(_leaves(value, f"{prefix}{field.name}."))
        else:
            out[f"{prefix}{field.name}"] = value
    return out
