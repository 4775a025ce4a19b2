"""onnxruntime 1.31.1 ends the process (SIGSEGV) making an ORT_ENABLE_ALL CPU session of a float16 model where a
Transpose feeds a MatMul of a float16 weight — what every float16 transformer onnxq computes for a CUDA target has
(a WavLM's attention). onnxq's deployed sessions leave out the optimizer that crashes (io.sessions). In a child
process: a crash would end the test run."""

import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

_CHILD = """
import sys, numpy as np, onnx_ir as ir
from onnxq.io.model_sessions import make_session
session = make_session(ir.load(sys.argv[1]), optimize=True)
x = np.load(sys.argv[2])
np.save(sys.argv[3], session.run(None, {"x": x})[0])
"""


def test_a_float16_transpose_into_a_matmul_gets_a_deployed_session(rng, tmp_path):
    weight = rng.normal(0, 0.1, (64, 64)).astype(np.float16)
    nodes = [helper.make_node("Cast", ["x"], ["xh"], to=TensorProto.FLOAT16, name="to16"),
             helper.make_node("Transpose", ["xh"], ["xt"], perm=[1, 0, 2], name="transpose"),
             helper.make_node("MatMul", ["xt", "w"], ["yh"], name="mm"),
             helper.make_node("Cast", ["yh"], ["y"], to=TensorProto.FLOAT, name="to32")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "t", 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(weight, "w")])
    model, x = tmp_path / "fp16.onnx", rng.normal(0, 1, (3, 5, 64)).astype(np.float32)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), model)
    np.save(tmp_path / "x.npy", x)
    done = subprocess.run([sys.executable, "-c", _CHILD, str(model), str(tmp_path / "x.npy"), str(tmp_path / "y.npy")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]  # -11: the segmentation fault
    expected = np.transpose(x.astype(np.float16), (1, 0, 2)).astype(np.float32) @ weight.astype(np.float32)
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), expected, rtol=2e-2, atol=2e-2)  # float16 products
