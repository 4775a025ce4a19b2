"""Calibration data as onnxruntime.quantization's users already have it: a CalibrationDataReader (get_next() until
None), subclassed or only duck-typed, quantizes exactly as the same batches from a generator; a callable making a
fresh reader is read as often as the run needs. A duck-typed reader ended in a TypeError before."""

import numpy as np
from onnxruntime.quantization import CalibrationDataReader
from conftest import initializer_bytes

import onnxq

BATCH = 8


class _Reader:
    """As ORT's quantization examples write one: get_next() and no base class."""

    def __init__(self, data: dict[str, np.ndarray]) -> None:
        samples = len(next(iter(data.values())))
        self._batches = iter([{k: v[i:i + BATCH] for k, v in data.items()} for i in range(0, samples, BATCH)])

    def get_next(self):
        return next(self._batches, None)


class _SubclassReader(_Reader, CalibrationDataReader):
    pass


def test_readers_quantize_as_the_same_batches_from_a_generator(samples_dir):
    data = dict(np.load(samples_dir / "mlp_calib.npz"))
    model = samples_dir / "mlp.onnx"
    # The output-error windows read the data again: a one-shot reader cannot be, and the notes say so.
    config = {"calibration": {"range_choice": "output-error"}}
    generator = onnxq.quantize(model, (batch for batch in list(_Reader(data)._batches)), config=config)
    for reader in (_Reader(data), _SubclassReader(data)):
        result = onnxq.quantize(model, reader, config=config)
        assert not result.report.verification.failed  # no bar measured below (128 held samples show no 0.99)
        assert initializer_bytes(result.model) == initializer_bytes(generator.model)
        assert any("one-shot iterator" in note for note in result.report.notes)  # read once, said so
    # A callable making a fresh reader is read again where a step needs it: as the arrays themselves.
    made = onnxq.quantize(model, lambda: _Reader(data), config=config)
    assert not any("one-shot iterator" in note for note in made.report.notes)
    assert initializer_bytes(made.model) == initializer_bytes(onnxq.quantize(model, data).model)
