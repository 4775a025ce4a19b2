"""A Hugging Face tokenizer.json, loaded with the `tokenizers` package (the optional extra onnxq[text]), its own
padding and truncation turned off: the text reader pads and cuts as the model takes its inputs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from onnxq.config import DataConfig
from onnxq.data.reader import SourceModel
from onnxq.errors import CalibrationDataError, one_line
from onnxq.io import regular_file

__all__ = ["TextTokenizer", "load_tokenizer", "DEFAULT_MAX_LENGTH"]

# An encoder's longest sentence when neither the model, the flags nor the tokenizer file say: BERT's positions.
DEFAULT_MAX_LENGTH = 512
_PAD_TOKENS = ("[PAD]", "<pad>", "<|pad|>", "<|endoftext|>")


@dataclasses.dataclass(frozen=True)
class TextTokenizer:
    tokenizer: Any  # tokenizers.Tokenizer, padding and truncation off
    path: Path
    found: str  # how it was found, for the description: "--tokenizer" or "beside the model"
    pad_id: int
    file_max_length: int | None  # the truncation length the file set, if any

    def encode(self, texts: list[str], max_length: int | None) -> list[Any]:
        """Each text's encoding (ids, type_ids), with the tokenizer's special tokens, cut to max_length tokens."""
        if max_length is None:
            self.tokenizer.no_truncation()
        else:
            self.tokenizer.enable_truncation(max_length)
        return self.tokenizer.encode_batch(texts)


def load_tokenizer(config: DataConfig, model: SourceModel, what: str) -> TextTokenizer:
    """The tokenizer of data.tokenizer (--tokenizer), else the tokenizer.json beside the model; one line naming the
    fix when there is none, the `tokenizers` package is missing, or the file is not a tokenizer."""
    beside = model.folder / "tokenizer.json" if model.folder is not None else None
    if config.tokenizer is not None:
        path, found = Path(config.tokenizer), "--tokenizer"
    elif beside is not None and beside.is_file():
        path, found = beside, "found beside the model"
    else:
        raise CalibrationDataError(f"{what} data is text, and no tokenizer was given — pass --tokenizer "
                                   "tokenizer.json (the model's Hugging Face tokenizer file; TOML [data] tokenizer), "
                                   "or put tokenizer.json beside the model")
    regular_file(path, "tokenizer file", CalibrationDataError)
    try:
        import tokenizers
    except ImportError:
        raise CalibrationDataError(f"{what} data is text: reading it needs the tokenizers package — pip install "
                                   "tokenizers (onnxq's text extra)") from None
    try:
        tokenizer = tokenizers.Tokenizer.from_file(str(path))
    except Exception as e:  # noqa: BLE001 — the Rust side raises plain Exception for any unreadable file
        raise CalibrationDataError(f"tokenizer file {one_line(path)} is not a Hugging Face tokenizer.json "
                                   f"({one_line(str(e)[:120])}) — save one with tokenizer.save(path)") from None
    padding, truncation = tokenizer.padding, tokenizer.truncation
    pad_id = padding["pad_id"] if padding else next(
        (i for i in map(tokenizer.token_to_id, _PAD_TOKENS) if i is not None), 0)
    tokenizer.no_padding()  # its fixed padding (MiniLM's pads every sentence to 128) would decide the lengths
    tokenizer.no_truncation()
    return TextTokenizer(tokenizer, path, found, int(pad_id), truncation["max_length"] if truncation else None)
