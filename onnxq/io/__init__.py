"""Everything onnxq reads and writes: models (load, save, external data), the output guard, sessions' view of a
model, and resident memory between phases."""

from onnxq.io.memory import page_out, trim_heap
from onnxq.io.model import (LOAD_NOTES, MAX_IR_VERSION, external_data_files, load_model, model_size_bytes,
                            save_model)
from onnxq.io.naming import RenamedNode
from onnxq.io.ort_model import OrtModel
from onnxq.io.outputs import RunFiles, run_files, write_output
from onnxq.io.reads import regular_file
from onnxq.io.spill import SpillFile

__all__ = ["load_model", "save_model", "model_size_bytes", "external_data_files", "OrtModel", "page_out",
           "trim_heap", "SpillFile", "RunFiles", "run_files", "write_output", "regular_file", "RenamedNode",
           "LOAD_NOTES", "MAX_IR_VERSION"]
