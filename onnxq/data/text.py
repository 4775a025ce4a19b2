"""Text as a language model's inputs: a .txt file (a sample a line), a .jsonl file (a sample a line, its text in
data.field) or a folder of .txt files (a sample a file), tokenized with the model's tokenizer.json.

An encoder (BERT, MiniLM) gets its sentences, each batch padded to its longest up to data.max_length (or the length
the model fixes), with attention_mask and token_type_ids as the tokenizer makes them. A decoder language model gets
windows of data.window tokens cut from all the text's tokens end to end (the causal-LM recipe: no padding, every
token real); its attention_mask, position_ids and empty caches are made as its first step takes them
(data.completion)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from onnxq.data.completion import completable
from onnxq.data.specs import Batch, InputSpec
from onnxq.config import DataConfig
from onnxq.data.images import IMAGE_SUFFIXES
from onnxq.data.reader import Opened, ReadData, SourceModel
from onnxq.data.tokenizer import DEFAULT_MAX_LENGTH, TextTokenizer, load_tokenizer
from onnxq.errors import CalibrationDataError, one_line

__all__ = ["TEXT_SUFFIXES", "claims_text", "open_text", "read_texts", "DEFAULT_WINDOW"]

TEXT_SUFFIXES = (".txt", ".jsonl")
DEFAULT_WINDOW = 128  # a decoder's window when the model does not fix one: SmolLM2's calib_windows.npz
_TOKENS = "input_ids"
_MASK, _TYPES = "attention_mask", "token_type_ids"


def claims_text(path: Path) -> bool:
    """A .txt / .jsonl file, or a folder of .txt files with no arrays and no images (a README.txt beside photos is
    no text to calibrate on)."""
    if path.is_dir():
        return not any(path.glob("*.np[yz]")) and any(path.glob("*.txt")) and not any(
            p.suffix.lower() in IMAGE_SUFFIXES for p in path.iterdir())
    return path.suffix.lower() in TEXT_SUFFIXES and path.is_file()


def read_texts(path: Path, field: str, what: str) -> tuple[list[str], tuple[Path, ...]]:
    """(the samples, the files read): a line each of a .txt / .jsonl file, a file each of a folder (blank ones
    skipped)."""
    if path.is_dir():
        files = tuple(sorted(path.glob("*.txt")))
        texts = [_read(f, what).strip() for f in files]
    else:
        files = (path,)
        lines = [(i, line) for i, line in enumerate(_read(path, what).splitlines(), 1) if line.strip()]
        texts = [_field(line, i, path, field, what) for i, line in lines] if path.suffix.lower() == ".jsonl" \
            else [line.strip() for _, line in lines]
    texts = [t for t in texts if t]
    if not texts:
        raise CalibrationDataError(f"{what} text {one_line(path)} holds no text — give a sample a line (a file a "
                                   "sample in a folder)")
    return texts, files


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise CalibrationDataError(f"{what} text {one_line(path)} is not UTF-8 (byte {e.start}) — save it as UTF-8"
                                   ) from None
    except OSError as e:
        raise CalibrationDataError(f"{what} text {one_line(path)} cannot be read ({e.strerror or e})") from None


def _field(line: str, number: int, path: Path, field: str, what: str) -> str:
    try:
        record = json.loads(line)
    except json.JSONDecodeError as e:
        raise CalibrationDataError(f"{what} file {one_line(path)} line {number} is not JSON ({e.msg}) — give one "
                                   "JSON object a line") from None
    if not isinstance(record, dict) or not isinstance(record.get(field), str):
        fields = ", ".join(map(str, record)) if isinstance(record, dict) else type(record).__name__
        raise CalibrationDataError(f"{what} file {one_line(path)} line {number} has no text field {field!r} (it has: "
                                   f"{one_line(fields)}) — pass --field NAME (TOML [data] field)")
    return record[field]


def open_text(path: Path, model: SourceModel, config: DataConfig, what: str) -> ReadData:
    """The text as the model's token inputs (module doc)."""
    tokens = _token_input(model, what)
    texts, files = read_texts(path, config.field, what)
    tokenizer = load_tokenizer(config, model, what)
    opened = _windows(texts, tokens, model, config, tokenizer, what) if model.decoder else \
        _sentences(texts, tokens, model, config, tokenizer, what)
    read = f"{what} text {path.name} ({len(texts)} samples), tokenized with {tokenizer.path} ({tokenizer.found}): "
    opened = dataclasses.replace(opened, description=read + opened.description, files=(*files, tokenizer.path),
                                 folders=(path,) if path.is_dir() else ())
    return ReadData(opened, model.batch_size)


def _token_input(model: SourceModel, what: str) -> InputSpec:
    """The input of token ids (input_ids), every other input one that text fills or that completion makes."""
    ids = [s for s in model.specs if s.dtype.kind in "iu" and s.shape is not None and len(s.shape) == 2
           and s.name not in (_MASK, _TYPES) and not completable(s, list(model.specs))]
    tokens = model.spec(_TOKENS) or (ids[0] if len(ids) == 1 else None)
    if tokens is None or tokens.shape is None or len(tokens.shape) != 2 or tokens.dtype.kind not in "iu":
        raise CalibrationDataError(f"{what} data is text but the model has no input of token ids (integers [batch, "
                                   f"sequence], e.g. input_ids); its inputs are: {model.listed()} — give an .npz "
                                   "keyed by input name")
    for spec in model.specs:
        if spec is not tokens and spec.name not in (_MASK, _TYPES) and not completable(spec, list(model.specs)):
            raise CalibrationDataError(f"{what} data is text, which makes {tokens.name}, attention_mask, "
                                       f"token_type_ids, position_ids and empty caches, but the model also takes "
                                       f"{spec.name!r} ({spec.describe()}) — give an .npz keyed by input name")
    return tokens


def _fixed_length(tokens: InputSpec) -> int | None:
    length = tokens.shape[1]
    return length if isinstance(length, int) and length > 0 else None


def _sentences(texts: list[str], tokens: InputSpec, model: SourceModel, config: DataConfig,
               tokenizer: TextTokenizer, what: str) -> Opened:
    fixed = _fixed_length(tokens)
    if fixed is not None and config.max_length not in (None, fixed):
        raise CalibrationDataError(f"the model fixes {tokens.name}'s length at {fixed} tokens; --max-length "
                                   f"{config.max_length} cannot feed it — drop --max-length")
    longest = fixed or config.max_length or tokenizer.file_max_length or DEFAULT_MAX_LENGTH
    encodings = tokenizer.encode(texts, longest)
    ids = [np.asarray(e.ids, np.int64) for e in encodings]
    types = [np.asarray(e.type_ids, np.int64) for e in encodings]
    inputs = {s.name: s for s in model.specs if s.name in (_MASK, _TYPES)}

    def batches(size: int, same_shape: bool) -> Iterator[Batch]:
        width = fixed or (max(map(len, ids)) if same_shape else None)
        for start in range(0, len(ids), size):
            yield _padded(ids[start:start + size], types[start:start + size], width, tokenizer.pad_id, tokens,
                          inputs)

    cut = sum(len(e.overflowing) > 0 for e in encodings)
    made = {name: how for name, how in ((_MASK, "1 over each sentence's tokens, 0 over the padding"),
                                        (_TYPES, "the tokenizer's type ids (0 for one sentence)")) if name in inputs}
    how = (f"{fixed} tokens, as the model fixes" if fixed else f"each batch padded to its longest (an .npz: all to "
           f"the longest), at most {longest} tokens")
    return Opened("text", len(ids), batches, f"sentences for an encoder, {how}" + (
        f"; {cut} cut to {longest}" if cut else ""), made)


def _padded(ids: list[np.ndarray], types: list[np.ndarray], width: int | None, pad_id: int, tokens: InputSpec,
            inputs: dict[str, InputSpec]) -> Batch:
    width = width or max(map(len, ids))
    batch = {tokens.name: np.full((len(ids), width), pad_id, tokens.dtype)}
    mask, type_ids = np.zeros((len(ids), width), np.int64), np.zeros((len(ids), width), np.int64)
    for row, (sample, kinds) in enumerate(zip(ids, types)):
        batch[tokens.name][row, :len(sample)] = sample
        mask[row, :len(sample)] = 1
        type_ids[row, :len(sample)] = kinds
    for name, array in ((_MASK, mask), (_TYPES, type_ids)):
        if name in inputs:
            batch[name] = array.astype(inputs[name].dtype)
    return batch


def _windows(texts: list[str], tokens: InputSpec, model: SourceModel, config: DataConfig,
             tokenizer: TextTokenizer, what: str) -> Opened:
    fixed = _fixed_length(tokens)
    if fixed is not None and config.window not in (None, fixed):
        raise CalibrationDataError(f"the model fixes {tokens.name}'s length at {fixed} tokens; --window "
                                   f"{config.window} cannot feed it — drop --window")
    window = fixed or config.window or DEFAULT_WINDOW
    stream = np.concatenate([np.asarray(e.ids, np.int64) for e in tokenizer.encode(texts, None)])
    count = len(stream) // window
    if count == 0:
        shorter = "" if fixed else f", or pass --window {max(2, len(stream))}"
        raise CalibrationDataError(f"{what} text makes {len(stream)} tokens, fewer than one window of {window} — "
                                   f"add text{shorter}")
    windows = stream[:count * window].reshape(count, window).astype(tokens.dtype)
    types = model.spec(_TYPES)

    def batches(size: int, same_shape: bool) -> Iterator[Batch]:
        for start in range(0, count, size):
            batch = {tokens.name: windows[start:start + size]}
            if types is not None:
                batch[_TYPES] = np.zeros_like(batch[tokens.name], dtype=types.dtype)
            yield batch

    made = {_TYPES: "0 (one segment)"} if types is not None else {}
    left = len(stream) - count * window
    return Opened("text", count, batches, f"{count} windows of {window} tokens for a decoder, cut from "
                  f"{len(stream)} tokens end to end" + (f" ({left} left over)" if left else ""), made)
