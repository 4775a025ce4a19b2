"""Each node's local error in the sensitivity ranking: its quantized twin against its float twin, both on float
inputs. The MLP sample's last Gemm writes the model's output, which the switch takes over (its quantized twin is
renamed): its local error must still be the twin's, not the switched value's (a float copy when off)."""

from pathlib import Path

import onnxq
from onnxq.calibration.batching import samples_in

SAMPLES = Path(__file__).resolve().parents[2] / "models"


def test_every_main_graph_node_has_its_local_error(tmp_path):
    report = onnxq.quantize(SAMPLES / "mlp.onnx", SAMPLES / "mlp_calib.npz", output=tmp_path / "q.onnx").report
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
    config = onnxq.QuantConfig(verify=onnxq.VerifyConfig(fallback=False))
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
