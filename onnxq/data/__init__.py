"""What the user gives, as the model's inputs: readers of text (with a tokenizer.json), images and one .npy, in a
registry (READERS); arrays named otherwise mapped to the inputs (data.input_map); the source flags every command
shares; an .npz written a batch at a time (python -m onnxq data). Below them, the data as every pass sees it: the
model's input specs, sources read lazily (dataset, npz), cut into the batches the model takes (batching, stream),
samples held back for verification (holdout), the layouts a model may take (axes, unbatched), and the inputs a
KV-cache decoder needs that the user's data leaves out (completion, head_sizes)."""

from onnxq.data.flags import add_data_source_flags, data_config_from_args
from onnxq.data.npz_writer import Written, write_npz
from onnxq.data.reader import Opened, ReadData, Reader, SourceModel, source_model
from onnxq.data.registry import READERS, reader_for
from onnxq.data.sources import declare_source, described, resolve_source

__all__ = ["READERS", "Reader", "Opened", "ReadData", "SourceModel", "source_model", "reader_for", "resolve_source",
           "declare_source", "described", "add_data_source_flags", "data_config_from_args", "write_npz", "Written"]
