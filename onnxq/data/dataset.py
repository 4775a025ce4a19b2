"""Calibration / verification data: sources read (lazily), batches, validation against the model's inputs."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from pathlib import Path
from typing import Any

import numpy as np

from onnxq.data.batching import Batches, exact_batches, fixed_batch_size, take
from onnxq.data.completion import completed
from onnxq.data.npz import NpzMember, open_npz
from onnxq.data.specs import Batch, DataSource, InputSpec, laid_out, readable, sample_axis
from onnxq.data.unbatched import fits_model, one_sample_batches, stacks_samples
from onnxq.errors import CalibrationDataError, one_line
from onnxq.io import RunFiles, regular_file

__all__ = ["iter_batches", "validate_batch", "validated_batches", "reread_batches", "declare_data_files",
           "data_files"]


def iter_batches(source: DataSource, batch_size: int, max_samples: int | None = None,
                 what: str = "calibration", axes: Mapping[str, int | None] | None = None,
                 unbatched: Mapping[str, int] | None = None) -> Iterator[Batch]:
    """Batches (dicts of arrays sharing a samples axis: 0, or the input's entry in `axes`; None: held constant,
    fed whole with every batch) from any supported source, up to max_samples. The inputs of `unbatched` (name →
    the model's rank: no batch axis) have their samples stacked on a first axis of the data's own: each batch is
    one sample (data.unbatched)."""
    axes = {**(axes or {}), **dict.fromkeys(unbatched or {}, 0)}
    remaining = max_samples if max_samples is not None else float("inf")
    raw = _raw_batches(source, batch_size, what, axes)
    for batch in (one for b in raw for one in one_sample_batches(b, unbatched, what)) if unbatched else raw:
        if remaining <= 0:
            return
        n = _num_samples(batch, what)
        if n > remaining:
            batch = take(batch, slice(0, int(remaining)))
            n = int(remaining)
        remaining -= n
        yield batch


def _raw_batches(source: DataSource, batch_size: int, what: str, axes: Mapping[str, int | None]) -> Iterator[Batch]:
    if callable(source) and not isinstance(source, Mapping):
        source = source()
    source = readable(source)
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            yield from _folder_batches(path, batch_size, what, axes)
        elif path.suffix == ".npy":
            raise CalibrationDataError(
                f"{what} file {path} is a single .npy: put one <input name>.npy per model input in a folder and "
                "pass the folder, or save them together with numpy.savez")
        else:
            yield from _slices(_load_npz(path, what), batch_size, what, axes)
    elif isinstance(source, Mapping):  # .npz members (data.input_map renames them) read rows on demand
        yield from _slices({k: v if isinstance(v, NpzMember) else np.asarray(v) for k, v in source.items()},
                           batch_size, what, axes)
    elif isinstance(source, Iterable):
        for i, item in enumerate(source):
            if not isinstance(item, Mapping):
                raise CalibrationDataError(
                    f"{what} item {i} is a {type(item).__name__}, not a dict of input name → array — key each "
                    "batch's arrays by their input names")
            yield laid_out({k: np.asarray(v) for k, v in item.items()}, axes)
    else:
        raise CalibrationDataError(
            f"{what} data of type {type(source).__name__} is not supported — pass an .npz path, a folder of .npz, "
            "a dict of arrays, an iterable of dicts or an object whose get_next() returns them (ORT's "
            "CalibrationDataReader)")


def data_files(folder: Path, what: str) -> tuple[list[Path], list[Path]]:
    """The .npz shards and the .npy arrays of a data folder, each checked to be a regular file (a FIFO in the
    folder would block the read forever)."""
    shards, arrays = sorted(folder.glob("*.npz")), sorted(folder.glob("*.npy"))
    if shards and arrays:
        raise CalibrationDataError(f"{what} folder {one_line(folder)} mixes .npz and .npy files — use one kind")
    if not shards and not arrays:
        raise CalibrationDataError(f"{what} folder {one_line(folder)} holds no .npz or .npy files — add files or "
                                   "pass one .npz")
    for file in shards + arrays:
        regular_file(file, f"{what} file", CalibrationDataError)
    return shards, arrays


def reread_batches(source: DataSource, specs: list[InputSpec], batch_size: int, max_samples: int | None = None,
                   what: str = "verification", made: MutableMapping[str, str] | None = None) -> Batches:
    """validated_batches that each pass reads again from the source (a path, arrays or a callable: one batch in
    memory at a time); a one-shot iterable is read once and held. The first batch is checked now, so that bad data
    stops the run before any work."""
    def read() -> Iterable[Batch]:
        return validated_batches(source, specs, batch_size, max_samples, what, made)

    if isinstance(source, (str, Path, Mapping)) or callable(source):
        batches = Batches(read)
    else:
        batches = Batches.held(list(read()))
    batches.first()
    return batches


def declare_data_files(files: RunFiles, source: DataSource | None, what: str) -> None:
    """Record a data path as an input of the run (a folder: it and every file in it), checking each is regular."""
    if not isinstance(source, (str, Path)):
        return
    path = Path(source)
    if not path.is_dir():
        files.read(path, what, CalibrationDataError)
        return
    files.add_data_folder(path, what)
    shards, arrays = data_files(path, what)
    for file in shards + arrays:
        files.add_input(file, f"{what} file")


def _folder_batches(path: Path, batch_size: int, what: str, axes: Mapping[str, int | None]) -> Iterator[Batch]:
    shards, arrays = data_files(path, what)
    for file in shards:
        members = _load_npz(file, what)
        yield from _slices(members, batch_size, what, axes)
        for member in members.values():  # one shard's files open at a time, however many shards
            member.close()
    if arrays:
        loaded = {}
        for file in arrays:
            try:  # memory-mapped: only the batch being fed is read
                loaded[file.stem] = np.load(file, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, MemoryError) as e:
                raise CalibrationDataError(f"{what} file {one_line(file)} is not a readable .npy array "
                                           f"({one_line(e)}) — save it with numpy.save") from None
        yield from _slices(loaded, batch_size, what, axes)


def _load_npz(path: Path, what: str) -> dict[str, NpzMember]:
    regular_file(path, f"{what} file" if path.exists() else f"{what} data", CalibrationDataError)
    return open_npz(path, what)


def _slices(arrays: Mapping[str, np.ndarray | NpzMember], batch_size: int, what: str,
            axes: Mapping[str, int | None]) -> Iterator[Batch]:
    if not arrays:
        return
    # An .npz member reads rows of axis 0 on demand; one with its samples elsewhere, or held constant, is read whole.
    batch = laid_out({k: np.asarray(v) if isinstance(v, NpzMember) and axes.get(k, 0) != 0 else v
                      for k, v in arrays.items()}, axes)
    if any((axis := sample_axis(batch, k)) is not None and a.ndim <= axis for k, a in batch.items()):
        yield batch  # let validation report the missing samples axis
        return
    n = _num_samples(batch, what)
    for start in range(0, n, batch_size):
        yield take(batch, slice(start, start + batch_size))


def _num_samples(batch: Batch, what: str) -> int:
    counts = {k: v.shape[axis] if v.ndim > axis else 0 for k, v in batch.items()
              if (axis := sample_axis(batch, k)) is not None}
    if len(set(counts.values())) > 1:
        detail = ", ".join(f"{k}: {n}" + (f" on axis {sample_axis(batch, k)}" if sample_axis(batch, k) else "")
                           for k, n in counts.items())
        raise CalibrationDataError(f"{what} inputs have different numbers of samples ({detail}); each array holds "
                                   "its samples on axis 0, or the axis calibration.sample_axes gives it"
                                   + _axis_hint(batch, counts))
    return next(iter(counts.values()), 1)


def _axis_hint(batch: Batch, counts: Mapping[str, int]) -> str:
    """Where an input whose count is off has the others' (largest) count on another axis: the flag that says so.
    Else the flag for inputs given once (a Slice's starts, a Reshape's shape, TopK's k: one value for all samples)."""
    most = max(counts.values())
    for name, count in counts.items():
        shape = batch[name].shape
        axes = [i for i, n in enumerate(shape) if n == most and i != sample_axis(batch, name)]
        if count != most and axes:
            return (f" — {name!r} has {most} on axis {axes[0]}: if that is its samples axis, pass --sample-axis "
                    f"{name}={axes[0]} (TOML [calibration] sample_axes = {{{name} = {axes[0]}}})")
    off = [name for name, count in counts.items() if count != most]
    return (f" — if {', '.join(map(repr, off))} {'is' if len(off) == 1 else 'are'} one value for every sample, pass "
            f"{' '.join(f'--constant-input {name}' for name in off)} (TOML [calibration] constant_inputs = "
            f"[{', '.join(map(repr, off))}])")


def validate_batch(batch: Mapping[str, Any], specs: list[InputSpec], what: str = "calibration") -> Batch:
    """Check names, dtypes, ranks, fixed dims and finiteness; cast within a kind (float64 → float32)."""
    by_name = {s.name: s for s in specs}
    expected = _listed(specs)
    for name in batch:
        if name not in by_name:
            raise CalibrationDataError(
                f"{what} data has '{one_line(name)}', which matches no model input; the model's inputs are: "
                f"{expected} — rename it to the input it feeds, or leave it out of the data")
    out = {}
    for spec in specs:
        if spec.name not in batch:
            held = "; it is held constant: add its one value, fed whole with every batch" if spec.sample_axis is None \
                else ""
            raise CalibrationDataError(f"{what} data lacks model input '{spec.name}' ({spec.describe()}){held}; the "
                                       f"model's inputs are: {expected}")
        array = np.asarray(batch[spec.name])
        if array.dtype.kind != spec.dtype.kind and not (array.dtype.kind in "iu" and spec.dtype.kind in "iu"):
            raise CalibrationDataError(
                f"{what} input '{spec.name}' is {array.dtype} but the model expects {spec.dtype} — "
                f"convert it with .astype(numpy.{spec.dtype})")
        _check_shape(spec, array, what)
        if array.dtype != spec.dtype:
            array = array.astype(spec.dtype)
        if spec.dtype.kind == "f" and not np.all(np.isfinite(array)):
            bad = "NaN" if np.isnan(array).any() else "inf"
            raise CalibrationDataError(f"{what} input '{spec.name}' contains {bad} — remove or fix those samples")
        out[spec.name] = array
    return laid_out(out, {s.name: s.sample_axis for s in specs})


def _listed(specs: list[InputSpec], most: int = 6) -> str:
    """The model's inputs for an error line: a decoder with a KV cache has dozens (63 for SmolLM2), and one line
    that lists them all buries its point."""
    shown = ", ".join(f"{s.name} ({s.describe()})" for s in specs[:most])
    return shown + (f", … ({len(specs) - most} more)" if len(specs) > most else "")


def _check_shape(spec: InputSpec, array: np.ndarray, what: str) -> None:
    """Rank and every fixed dimension but the samples axis (an input held constant: every one)."""
    if spec.shape is None:
        return
    axis = spec.sample_axis
    where = _layout_said(spec)
    # A fixed first dimension read as the batch's, and samples that are each the whole input: no batch axis.
    if stacks_samples(spec, array.shape):
        raise CalibrationDataError(_unbatched(spec, array.shape[1:], what) if fits_model(array.shape[1:], spec.shape)
                                   else _sample_off(spec, array.shape[1:], what))
    if array.ndim != len(spec.shape):
        # Rank one more, the rest the model's: samples of a model whose open first axis is no batch's (points, nodes).
        hint = (f" — if the model takes one sample a run with no batch axis, pass --unbatched-input {spec.name}"
                if array.ndim == len(spec.shape) + 1 and axis == 0 and fits_model(array.shape[1:], spec.shape) else "")
        raise CalibrationDataError(
            f"{what} input '{spec.name}' has shape {array.shape} (rank {array.ndim}) but the model expects "
            f"rank {len(spec.shape)} {spec.describe()}; {where}{hint}")
    for i, (got, want) in enumerate(zip(array.shape, spec.shape)):
        if i != axis and isinstance(want, int) and got != want:
            raise CalibrationDataError(
                f"{what} input '{spec.name}' has shape {array.shape} but the model expects {spec.describe()}; {where}")


def _layout_said(spec: InputSpec) -> str:
    if spec.unbatched:
        return ("the model has no batch axis (calibration.unbatched_inputs): give one sample of its whole shape, or "
                "samples stacked on a first axis of their own, fed one per run")
    if spec.sample_axis is None:
        return ("it is held constant (a scalar input, or calibration.constant_inputs): give the one value fed with "
                "every batch")
    return f"axis {spec.sample_axis} holds the samples"


def _sample_off(spec: InputSpec, sample_shape: tuple[int, ...], what: str) -> str:
    """Samples stacked as for a model without a batch axis, one dimension off what the model fixes."""
    axis, got, want = next((i, g, w) for i, (g, w) in enumerate(zip(sample_shape, spec.shape))
                           if isinstance(w, int) and g != w)
    return (f"{what} input '{spec.name}': each sample has shape {sample_shape} but the model takes "
            f"{spec.describe()} in one run — its dimension {axis} is {got}, not {want}")


def _unbatched(spec: InputSpec, sample_shape: tuple[int, ...], what: str) -> str:
    """A model that takes one sample per run, without a samples axis (torchvision's detection models take an image
    [3, H, W]), given data whose layout was not read off its shapes (batches given one by one, or beside inputs
    that take batches): its first dimension read as a fixed batch gave batches of one rank too many."""
    fed = (f"pass --unbatched-input {spec.name} to feed them one per run (TOML [calibration] unbatched_inputs = "
           f"[{spec.name!r}])")
    if sample_shape[0] == 1:  # samples that each carry the model's batch axis of 1: the data's axis is one too many
        return (f"{what} input '{spec.name}': each sample {sample_shape} carries the model's batch axis of 1 "
                f"({spec.describe()}) — {fed}, or stack them on that axis: data.reshape(-1, *data.shape[2:])")
    return (f"{what} input '{spec.name}': each sample {sample_shape} is all the model takes in one run "
            f"({spec.describe()}, no batch axis) — {fed}, or export the model with a batch axis")


def _sole_input(array: np.ndarray, specs: list[InputSpec], what: str) -> dict[str, np.ndarray]:
    """One array given for the data: the samples of the model's one input."""
    if len(specs) != 1:
        names = ", ".join(s.name for s in specs[:4]) + (", …" if len(specs) > 4 else "")
        raise CalibrationDataError(f"{what} data is one array but the model has {len(specs)} inputs ({names}) — "
                                   "pass a dict of input name → array")
    return {specs[0].name: array}


def validated_batches(source: DataSource, specs: list[InputSpec], batch_size: int, max_samples: int | None = None,
                      what: str = "calibration", made: MutableMapping[str, str] | None = None) -> Iterator[Batch]:
    """iter_batches, each batch completed with the inputs a decoder's data leaves out (data.completion:
    empty caches, position ids; recorded in `made`) and checked against the model's inputs as it arrives. A model
    with a fixed batch dimension B gets batches of exactly B samples (batch_size and max_samples give way to it)."""
    if isinstance(source, np.ndarray):
        source = _sole_input(source, specs, what)
    fixed = fixed_batch_size(specs)
    if fixed is not None:
        batch_size = fixed
        max_samples = None if max_samples is None else max(fixed, max_samples // fixed * fixed)
    axes = {s.name: s.sample_axis for s in specs}
    unbatched = {s.name: len(s.shape or ()) for s in specs if s.unbatched}
    batches = (validate_batch(completed(batch, specs, made), specs, what)
               for batch in iter_batches(source, batch_size, max_samples, what, axes, unbatched))
    yield from batches if fixed is None else exact_batches(batches, fixed, what)
