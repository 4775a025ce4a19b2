"""Arrays named otherwise than the model's inputs (an .npz of x_train, y_train, x_test, y_test for an input x):
the first line says which arrays match no input and which input each could feed, by shape and dtype, and
data.input_map (--input-map x=x_train) picks — the arrays it leaves unnamed are then left out."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np

from onnxq.data.axes import data_headers
from onnxq.data.npz import open_npz
from onnxq.data.specs import DataSource, InputSpec
from onnxq.errors import CalibrationDataError, ConfigError, one_line

__all__ = ["array_headers", "mapped_source", "fits"]

Header = tuple[tuple[int, ...], np.dtype]


def array_headers(source: DataSource) -> dict[str, Header] | None:
    """Each array's (shape, dtype), read from headers only (data.axes.data_headers)."""
    return data_headers(source)


def fits(header: Header, spec: InputSpec) -> bool:
    """The array could feed the input: a dtype of its kind, its rank, and every dimension it fixes but the samples
    axis (a model without a batch axis: samples stacked on a first axis of the data's own)."""
    shape, dtype = header
    same_kind = dtype.kind == spec.dtype.kind or (dtype.kind in "iu" and spec.dtype.kind in "iu")
    if not same_kind or spec.shape is None:
        return same_kind
    want = spec.shape if not spec.unbatched else (None, *spec.shape)
    axis = 0 if spec.unbatched else spec.sample_axis
    return len(shape) == len(want) and all(i == axis or not isinstance(w, int) or w == n
                                           for i, (n, w) in enumerate(zip(shape, want)))


def mapped_source(source: DataSource, specs: list[InputSpec], input_map: Mapping[str, str], what: str,
                  inherited: bool = False) -> DataSource:
    """The source with its arrays renamed as input_map says (the others left out), or as it is when every array
    names an input; one line (module doc) when some match none. inherited: the calibration data's map serving the
    verification data, which applies only where that data has the arrays it names (a test.npz of x beside a
    train.npz of x_train needs none)."""
    headers = array_headers(source)
    inputs = {s.name: s for s in specs}
    if inherited and (headers is None or not any(array in headers for array in input_map.values())):
        input_map = {}
    for name in input_map:
        if name not in inputs:
            raise ConfigError(f"--input-map names {one_line(name)!r}, which is not an input of the model; its inputs "
                              f"are: {_listed(specs)}")
    if headers is None:
        if input_map:
            raise ConfigError(f"--input-map renames the arrays of one .npz (or a dict of arrays); the {what} data "
                              "is none — name its arrays after the model's inputs")
        return source
    for name, array in input_map.items():
        if array not in headers:
            raise CalibrationDataError(f"--input-map {name}={one_line(array)}: the {what} data has no array "
                                       f"{one_line(array)!r}; its arrays are: {one_line(', '.join(headers))}")
    if input_map:
        return _renamed(source, {name: input_map.get(name, name) for name in inputs
                                 if input_map.get(name, name) in headers}, what)
    unmatched = [name for name in headers if name not in inputs]
    if unmatched:
        raise CalibrationDataError(_unmatched_line(unmatched, headers, specs, what))
    return source


def _renamed(source: DataSource, chosen: dict[str, str], what: str) -> DataSource:
    """input → the array chosen for it, read as lazily as the source (an .npz: rows on demand)."""
    if isinstance(source, Mapping):
        return {name: source[array] for name, array in chosen.items()}
    path = Path(source)
    if path.is_dir():
        raise ConfigError(f"--input-map renames the arrays of one .npz; {what} folder {one_line(path)} holds several "
                          "— name its arrays after the model's inputs")
    members = open_npz(path, what)
    return {name: members[array] for name, array in chosen.items()}


def _unmatched_line(unmatched: list[str], headers: Mapping[str, Header], specs: list[InputSpec], what: str) -> str:
    named = ", ".join(f"{n} {list(headers[n][0])} {headers[n][1]}" for n in unmatched[:6]) + (
        ", …" if len(unmatched) > 6 else "")
    arrays = f"array {named}, which matches" if len(unmatched) == 1 else f"arrays {named}, which match"
    inputs = f"input is {_listed(specs)}" if len(specs) == 1 else f"inputs are: {_listed(specs)}"
    line = f"{what} data has {arrays} no model input; the model's {inputs}"
    candidates = {s.name: [n for n in unmatched if fits(headers[n], s)] for s in specs if s.name not in headers}
    picks = {name: found for name, found in candidates.items() if found}
    if not picks:
        return line + " — rename the arrays to the inputs they feed, or leave them out of the data"
    said = ", ".join(f"{' or '.join(found)} fits {name}" for name, found in picks.items())
    flags = " ".join(f"--input-map {name}={found[0]}" for name, found in picks.items())
    table = ", ".join(f'{name} = "{found[0]}"' for name, found in picks.items())
    return f"{line}; {said} — pass {flags} (TOML [data] input_map = {{{table}}})"


def _listed(specs: list[InputSpec]) -> str:
    return ", ".join(f"{s.name} ({s.describe()})" for s in specs[:6]) + (", …" if len(specs) > 6 else "")
