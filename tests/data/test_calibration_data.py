"""Data sources, validation messages, holdout."""

import numpy as np
import pytest

from onnxq.data.batching import Holdout

from onnxq.data.dataset import iter_batches, validate_batch

from onnxq.data.specs import InputSpec
from onnxq.errors import CalibrationDataError

SPECS = [InputSpec("ids", np.dtype(np.int64), ("batch", "seq")), InputSpec("x", np.dtype(np.float32), (None, 4))]


def _data(rng, n=10, seq=5):
    return {"ids": rng.integers(0, 9, (n, seq)), "x": rng.normal(0, 1, (n, 4)).astype(np.float32)}


def test_npz_file_folder_dict_and_iterable_give_the_same_samples(rng, tmp_path):
    data = _data(rng)
    np.savez(tmp_path / "one.npz", **data)
    (tmp_path / "dir").mkdir()
    np.savez(tmp_path / "dir" / "a.npz", **{k: v[:4] for k, v in data.items()})
    np.savez(tmp_path / "dir" / "b.npz", **{k: v[4:] for k, v in data.items()})
    (tmp_path / "npy").mkdir()
    for k, v in data.items():
        np.save(tmp_path / "npy" / f"{k}.npy", v)

    def generator():
        for i in range(0, 10, 3):
            yield {k: v[i:i + 3] for k, v in data.items()}

    sources = [tmp_path / "one.npz", str(tmp_path / "dir"), tmp_path / "npy", data,
               [{k: v[i:i + 3] for k, v in data.items()} for i in range(0, 10, 3)], generator(), generator]
    for source in sources:
        batches = list(iter_batches(source, batch_size=4))
        joined = {k: np.concatenate([b[k] for b in batches]) for k in data}
        for k in data:
            np.testing.assert_array_equal(joined[k], data[k])


class _DuckReader:
    """A reader as ORT's quantization examples write one: get_next() and no base class."""

    def __init__(self, batches):
        self._batches = iter(batches)

    def get_next(self):
        return next(self._batches, None)


def test_onnxruntime_calibration_data_readers_give_the_same_samples(rng):
    from onnxruntime.quantization import CalibrationDataReader

    class SubclassReader(_DuckReader, CalibrationDataReader):
        pass

    data = _data(rng)
    chunks = [{k: v[i:i + 3] for k, v in data.items()} for i in range(0, 10, 3)]
    for reader in (_DuckReader(chunks), SubclassReader(chunks)):
        batches = list(iter_batches(reader, batch_size=4))
        for k in data:
            np.testing.assert_array_equal(np.concatenate([b[k] for b in batches]), data[k])
    with pytest.raises(CalibrationDataError, match=r"item 0 is a list.*dict of input name"):
        list(iter_batches(_DuckReader([[1, 2]]), batch_size=4))


def test_arrays_with_different_sample_counts_are_refused(rng):
    data = _data(rng)
    data["x"] = data["x"][:7]
    with pytest.raises(CalibrationDataError, match=r"different numbers of samples \(ids: 10, x: 7\)"):
        list(iter_batches(data, batch_size=4))


def test_max_samples_takes_the_first_n(rng):
    batches = list(iter_batches(_data(rng), batch_size=4, max_samples=6))
    assert [len(b["x"]) for b in batches] == [4, 2]


def test_generator_with_varying_sequence_lengths(rng):
    def gen():
        for seq in (3, 7, 5):
            yield {"ids": rng.integers(0, 9, (2, seq)), "x": rng.normal(0, 1, (2, 4)).astype(np.float32)}

    shapes = [validate_batch(b, SPECS)["ids"].shape for b in iter_batches(gen(), batch_size=8)]
    assert shapes == [(2, 3), (2, 7), (2, 5)]


@pytest.mark.parametrize("change,message", [
    (lambda d: d.update(y=d.pop("x")), "has 'y', which matches no model input; the model's inputs are: ids"),
    (lambda d: d.pop("x"), "lacks model input 'x' (float32 [?, 4])"),
    (lambda d: d.update(ids=d["ids"].astype(np.float32)), "'ids' is float32 but the model expects int64"),
    (lambda d: d.update(x=d["x"][:, 0]), "'x' has shape (10,) (rank 1) but the model expects rank 2"),
    (lambda d: d.update(x=d["x"][:, :3]), "'x' has shape (10, 3) but the model expects float32 [?, 4]"),
    (lambda d: d["x"].__setitem__((1, 1), np.nan), "'x' contains NaN"),
    (lambda d: d["x"].__setitem__((1, 1), np.inf), "'x' contains inf"),
])
def test_bad_data_gets_one_line_naming_the_problem(rng, change, message):
    data = _data(rng)
    change(data)
    with pytest.raises(CalibrationDataError) as info:
        validate_batch(data, SPECS)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_a_missing_constant_input_is_said_to_take_one_value(rng):
    """transformers' causal LMs exported by TorchScript take logits_to_keep, an int64 scalar: one value for every
    batch, not samples."""
    specs = [*SPECS, InputSpec("logits_to_keep", np.dtype(np.int64), (), sample_axis=None)]
    with pytest.raises(CalibrationDataError) as info:
        validate_batch(_data(rng), specs)
    assert "lacks model input 'logits_to_keep' (int64 []); it is held constant: add its one value" in str(info.value)
    assert validate_batch({**_data(rng), "logits_to_keep": np.array(0)}, specs)["logits_to_keep"].shape == ()


def test_same_kind_dtypes_are_cast(rng):
    data = _data(rng)
    data["x"] = data["x"].astype(np.float64)
    data["ids"] = data["ids"].astype(np.int32)
    out = validate_batch(data, SPECS)
    assert out["x"].dtype == np.float32 and out["ids"].dtype == np.int64


def test_unreadable_sources(tmp_path):
    (tmp_path / "bad.npz").write_text("not a zip")
    with pytest.raises(CalibrationDataError, match="not a readable .npz"):
        list(iter_batches(tmp_path / "bad.npz", 4))
    with pytest.raises(CalibrationDataError, match="not found"):
        list(iter_batches(tmp_path / "missing.npz", 4))
    (tmp_path / "empty").mkdir()
    with pytest.raises(CalibrationDataError, match="holds no .npz or .npy"):
        list(iter_batches(tmp_path / "empty", 4))
    with pytest.raises(CalibrationDataError, match="not a dict"):
        list(iter_batches([np.zeros(3)], 4))
    np.save(tmp_path / "x.npy", np.zeros(3))
    with pytest.raises(CalibrationDataError, match="single .npy"):
        list(iter_batches(tmp_path / "x.npy", 4))
    (tmp_path / "mixed").mkdir()
    np.save(tmp_path / "mixed" / "x.npy", np.zeros(3))
    np.savez(tmp_path / "mixed" / "y.npz", x=np.zeros(3))
    with pytest.raises(CalibrationDataError, match="mixes .npz and .npy"):
        list(iter_batches(tmp_path / "mixed", 4))


def test_holdout_takes_every_kth_sample_up_to_a_cap(rng):
    data = {"x": np.arange(50, dtype=np.float32)[:, None]}
    holdout = Holdout(every=10, max_samples=3)
    passed = np.concatenate([b["x"] for b in holdout.split(iter_batches(data, 8))]).ravel()
    held = np.concatenate([b["x"] for b in holdout.held]).ravel()
    assert held.tolist() == [9.0, 19.0, 29.0]
    assert sorted(passed.tolist() + held.tolist()) == list(range(50))
    assert holdout.held_count == 3


def test_holdout_of_a_fixed_batch_holds_whole_batches():
    # 20 samples of a model that takes exactly 20: holding back samples 9 and 19 left 18 + 2, no whole batch of either
    # ("calibration data holds no samples"); the one batch now calibrates and is the verification's first batch.
    holdout = Holdout(every=10, max_samples=64, fixed=20)
    kept = list(holdout.split(iter_batches({"x": np.arange(20, dtype=np.float32)[:, None]}, 8)))
    assert [b["x"].shape for b in kept] == [(20, 1)] and holdout.held == []
    assert [b["x"].shape for b in holdout.first_batches()] == [(20, 1)]
    # 200 samples in batches of 8: every 10th batch is held back (samples 72-79, 152-159), none is left out.
    holdout = Holdout(every=10, max_samples=64, fixed=8)
    kept = np.concatenate([b["x"] for b in holdout.split(iter_batches({"x": np.arange(200.0)[:, None]}, 32))]).ravel()
    held = np.concatenate([b["x"] for b in holdout.verification_batches()]).ravel()
    assert held.tolist() == list(range(72, 80)) + list(range(152, 160))
    assert sorted(kept.tolist() + held.tolist()) == list(range(200)) and holdout.held_count == 16


def test_holdout_of_a_fixed_batch_larger_than_the_cap_holds_one_batch():
    holdout = Holdout(every=2, max_samples=3, fixed=4)
    kept = list(holdout.split(iter_batches({"x": np.arange(24.0)[:, None]}, 4)))
    assert len(kept) == 5 and [b["x"].ravel().tolist() for b in holdout.held] == [[4.0, 5.0, 6.0, 7.0]]


def test_holdout_with_too_few_samples_keeps_the_first_batch(rng):
    holdout = Holdout(every=10, max_samples=64)
    list(holdout.split(iter_batches({"x": np.ones((3, 1), np.float32)}, 8)))
    assert holdout.held == [] and holdout.first["x"].shape == (3, 1)
