"""Step load: load, prepare and check the model, read the data as the pipeline reads it, and declare every file the
run reads and writes."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from onnxq.calibration import CalibrationSummary
from onnxq.config import DataConfig
from onnxq.data import declare_source, described, resolve_source, source_model
from onnxq.data.specs import DataSource
from onnxq.errors import CalibrationDataError
from onnxq.io import LOAD_NOTES, external_data_files, load_model
from onnxq.io.memory import page_out
from onnxq.io.outputs import active_run
from onnxq.passes import check_model
from onnxq.passes.preparation.checks import onnx_opset
from onnxq.passes.preparation.steps import prepared
from onnxq.passes.preparation.upgrade import ORT_MIN_OPSET
from onnxq.steps.records import Loaded, RunInputs
from onnxq.steps.state import RunState
from onnxq.verify.outcome import check_output_tolerances
from onnxq.verify.tasks.rules import language_model_logits

__all__ = ["load"]


def load(state: RunState) -> bool:
    """The model loaded, prepared and checked; the data read as the pipeline reads it; every file declared."""
    given, config = state.given, state.resolved.config
    if isinstance(given.model, (str, os.PathLike)):  # its state taken before it is read: a change while it loads
        active_run().add_input(given.model, "the input model")  # is seen right after (_declare_files)
    loaded = load_model(given.model)
    # Prepared (passes.preparation.steps: an old opset converted, weight casts and BatchNormalization folded): the model
    # as given stays the verification's reference (Loaded.unconverted), the prepared one is what is quantized.
    reference, notes = prepared(loaded)
    record = Loaded(given, reference)
    if notes:
        state.notes.extend(notes)
        # Below the opsets onnxruntime runs, the model as given has no session: the prepared one is the reference.
        unconverted = loaded if (onnx_opset(loaded) or ORT_MIN_OPSET) >= ORT_MIN_OPSET else None
        record = dataclasses.replace(record, unconverted=unconverted, given_runs=unconverted is not None)
    input_path = Path(given.model) if isinstance(given.model, (str, os.PathLike)) else None
    check_model(reference)
    check_output_tolerances(config.verify, [o.name for o in reference.graph.outputs])
    if input_path is not None:
        # A large .onnx that keeps its weights is its own external data (io.in_place): listed once. The model as
        # loaded: a prepared clone may hold its weights in memory (a float16 model's, made float32).
        data = [p for p in external_data_files(loaded) if p.resolve() != input_path.resolve()]
        record = dataclasses.replace(record, input_path=input_path, input_files=(input_path, *data))
    read, given_data = _read_data(state, record)
    record = dataclasses.replace(record, given=read)  # the data as the pipeline reads it (text, images, ...)
    _declare_files(record, given_data)  # unusable output paths stop the run now, not after calibrating
    active_run().check_inputs_unchanged("right after loading")
    # What preparing computed in memory (a float16 model's weights made float32, a folded Transpose of a tied
    # table) goes to the run's spill file now, memory-mapped like the input's own weights (io.spill: only a model
    # holding 64 MB of them or more), so that calibration's sessions read it in place instead of copying it.
    if reference is not loaded:
        state.spill.spill([reference])
        page_out(loaded)  # what spilling read of the given weights leaves resident memory (a float16 model's file)
    state.loaded = dataclasses.replace(record, work=reference.clone(),
                                       verifies_on_calibration_data=_same_data(given_data, config.data))
    _note_renames(state, reference)
    return True


def _note_renames(state: RunState, reference) -> None:
    densified = reference.meta[LOAD_NOTES]["densified"]
    if densified:
        state.notes.append(f"{len(densified)} sparse initializer(s) made dense to be quantized "
                           f"({', '.join(densified[:3])}{', …' if len(densified) > 3 else ''})")
    repeated = reference.meta[LOAD_NOTES].get("renamed_values", ())
    if repeated:
        state.notes.append(f"{len(repeated)} value name(s) repeated across subgraphs renamed in the output "
                           f"(e.g. {repeated[0]!r}): calibration keys values by name")


def _read_data(state: RunState, record: Loaded
               ) -> tuple[RunInputs, tuple[DataSource | None, DataSource | None]]:
    """The caller's inputs with the data as the pipeline reads it (onnxq.data: text, images, one .npy, arrays
    renamed by data.input_map), each reader's account of what it made in the notes; and the data as given."""
    given, config = record.given, state.resolved.config
    decoder = language_model_logits(record.reference) is not None
    model = source_model(record.reference, config.calibration, decoder, record.input_path)
    calibration = resolve_source(given.calibration, model, config.data, "calibration")
    # The verification data's own map with no --verify-data: other arrays of the calibration data (x_test).
    given_verify = given.calibration if given.verify_data is None and config.data.verify_input_map \
        else given.verify_data
    verify_data = resolve_source(given_verify, model, config.data, "verification")
    state.notes.extend(line for line in map(described, (calibration, verify_data)) if line is not None)
    return dataclasses.replace(given, calibration=calibration, verify_data=verify_data), (given.calibration,
                                                                                         given_verify)


def _same_data(given: tuple[DataSource | None, DataSource | None], data: DataConfig) -> bool:
    """Whether the verification data is the calibration data: one file (or folder) read through the same arrays."""
    calibration, verification = given
    if not all(isinstance(source, (str, os.PathLike)) and os.path.exists(source)
               for source in (calibration, verification)):
        return False
    verify_map, inherited = data.map_for("verification")
    return os.path.samefile(calibration, verification) and (inherited or verify_map == data.input_map)


def _declare_files(record: Loaded, given_data: tuple[DataSource | None, DataSource | None]) -> None:
    """What the run reads and writes, each output checked against every input and every other output (io.outputs)."""
    files, given = active_run(), record.given
    for i, path in enumerate(record.input_files):
        files.add_input(path, "the input model" if i == 0 else "the input model's external data")
    declare_source(files, given_data[0], given.calibration, "the calibration data")
    declare_source(files, given_data[1], given.verify_data, "the verification data")
    if given.cache is not None and not isinstance(given.cache, CalibrationSummary):
        if os.path.lexists(given.cache):  # read, never rewritten
            files.read(given.cache, "the calibration cache", CalibrationDataError)
        else:
            files.claim(given.cache, "calibration cache")
    if given.output is not None:
        output = Path(given.output)
        files.claim(output, "output", also=[output.with_name(output.name + ".data")])


