"""Each node's local error in the sensitivity ranking: its quantized twin against its float twin, both on float
inputs. The MLP sample's last Gemm writes the model's output, which the switch takes over (its quantized twin is
renamed): its local error must still be the twin's, not the switched value's (a float copy when off)."""

import math
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest

import onnxq
from onnxq.data.batching import samples_in
from onnxq.io import OrtModel
from onnxq.io.sessions import session_options
from onnxq.search.local_error import LocalSums, add_local_sums

SAMPLES = Path(__file__).resolve().parents[2] / "models"


def test_every_main_graph_node_has_its_local_error(tmp_path):
    report = onnxq.quantize(SAMPLES / "mlp.onnx", SAMPLES / "mlp_calib.npz", output=tmp_path / "q.onnx",
                            config={"verify": {"sensitivity": "always"}}).report
    local = {n["name"]: n["local_sqnr_db"] for n in report.to_dict()["sensitivity"]["nodes"]}
    # Measured (seeded data in models/, AVX2): 39.6, 40.5 and 37.9 dB; an off switch would read as exact (None).
    assert set(local) == {"/fc0/Gemm", "/fc1/Gemm", "/fc2/Gemm"}
    assert all(v is not None and 30 < v < 50 for v in local.values()), local


def test_the_ranking_is_the_same_with_its_batches_cut(tmp_path, monkeypatch):
    """A decoder's switch model fetches its logits and every twin's pair: SmolLM2's ranking took its run from 4.8 to
    11.3 GB on one batch of 16 windows. Its batches are cut to OUTPUT_BUDGET bytes of fetched values; the figures
    are the same (sums in another order)."""
    import importlib
    search = importlib.import_module("onnxq.search.sensitivity")
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(fallback=False, sensitivity="always"))
    whole = onnxq.quantize(SAMPLES / "mlp.onnx", SAMPLES / "mlp_calib.npz", config=config).report.sensitivity
    monkeypatch.setattr(search, "OUTPUT_BUDGET", 1)  # one sample a run
    fitted, sizes = search._SwitchRuns._fitted, []
    monkeypatch.setattr(search._SwitchRuns, "_fitted",
                        lambda self, fetched: sizes.append([samples_in(b) for b in fitted(self, fetched)]) or
                        fitted(self, fetched))
    cut = onnxq.quantize(SAMPLES / "mlp.onnx", SAMPLES / "mlp_calib.npz", config=config).report.sensitivity
    assert sizes and set(sizes[0]) == {1} and len(sizes[0]) == cut.samples
    assert [n.name for n in cut.nodes] == [n.name for n in whole.nodes]
    for a, b in zip(whole.nodes, cut.nodes):
        assert abs(a.harm - b.harm) < 1e-9 and abs(a.local_sqnr_db - b.local_sqnr_db) < 1e-6


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_the_local_sums_are_the_sums_of_the_twins_values(rng, dtype):
    """The switch model sums each pair in the graph (SmolLM2's 300 pairs were 150 MB of values a window fetched):
    Σ float² and Σ (quantized − float)², float16 widened first (its squares overflow at 65504: values of 300 here)."""
    shape = [4, 64]
    quantized, floating = (ir.val(name, ir.DataType.from_numpy(np.dtype(dtype)), shape) for name in ("q", "f"))
    graph = ir.Graph([quantized, floating], [], nodes=[], opset_imports={"": 17})
    names = add_local_sums(graph, [None, (quantized, floating)])
    graph.sort()
    assert names[0] == ("", "") and len(graph.outputs) == 2
    session = OrtModel(ir.Model(graph, ir_version=8)).session(session_options(optimize=False),
                                                               ["CPUExecutionProvider"])
    f = (rng.standard_normal(shape) * 300).astype(dtype)
    q = (f + rng.standard_normal(shape)).astype(dtype)
    signal, noise = session.run(list(names[1]), {"q": q, "f": f})
    wide = f.astype(np.float64)
    # float32 sums of 256 squares: within 1e-5 of the float64 ones (float16 inputs are exact in float32)
    np.testing.assert_allclose(signal, np.sum(wide ** 2), rtol=1e-5)
    np.testing.assert_allclose(noise, np.sum((q.astype(np.float64) - wide) ** 2), rtol=1e-5)
    assert signal.dtype == (np.float64 if dtype == np.float64 else np.float32)


def test_local_sums_sqnr_over_batches_and_at_the_edges():
    sums = LocalSums()
    sums.add(np.float32(60.0), np.float32(0.5))
    sums.add(np.float32(40.0), np.float32(0.5))
    assert sums.sqnr_db == pytest.approx(20.0, abs=1e-12)  # 100 / 1
    assert LocalSums().sqnr_db == math.inf  # nothing differs
    infinite = LocalSums()
    infinite.add(np.float32(1.0), np.float32(np.inf))
    assert infinite.sqnr_db == -math.inf
    broken = LocalSums()
    broken.add(np.float32(1.0), np.float32(np.nan))
    assert math.isnan(broken.sqnr_db)
