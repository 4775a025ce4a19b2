"""A new rewrite form and a new output format are one registration each (passes.forms.registry.rewrite_form,
config.formats.register_format): the quantize pass and quantize() use them. The quantize pass's requires / ensures
catch a plan it cannot apply and a form that leaves a planned weight float."""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
import pytest
from conftest import to_model, weight

import onnxq
from onnxq import QuantConfig, VerifyConfig
from onnxq.cli.main import build_parser
from onnxq.config.formats import FORMATS, OutputFormat, register_format
from onnxq.handlers import plan_model
from onnxq.passes import REWRITE_FORMS, QuantizePass, RewriteInputs, rewrite_form
from onnxq.io.model_sessions import make_session


def _two_layers(rng) -> ir.Model:
    tape = ir.tape.Tape()
    x = ir.val("x", ir.DataType.FLOAT, ["batch", 16])
    h = tape.op("MatMul", [x, weight(tape, rng, "w0", (16, 32))], name="mm0")
    y = tape.op("MatMul", [h, weight(tape, rng, "w1", (32, 8))], name="mm1")
    h.name, y.name = "h", "y"
    return to_model(tape, [x], [y])


@pytest.fixture
def float16_weights():
    """A form this test adds: the weight stored as float16 and cast back (half the bytes, activations float)."""

    @rewrite_form("float16-weights-test", stage=0)
    def _float16(model, plans, inputs):
        for plan in plans:
            for spec in plan.weights:
                value = plan.node.inputs[spec.input_index]
                half = ir.tensor(value.const_value.numpy().astype(np.float16), name=f"{value.name}_float16")
                stored = ir.Value(name=half.name, const_value=half, type=ir.TensorType(ir.DataType.FLOAT16),
                                  shape=half.shape)
                model.graph.register_initializer(stored)
                cast = ir.node("Cast", [stored], {"to": ir.DataType.FLOAT}, name=f"{plan.node.name}_cast")
                model.graph.insert_before(plan.node, cast)
                plan.node.replace_input_with(spec.input_index, cast.outputs[0])
        return {p.node.name: "weights float16" for p in plans}

    yield "float16-weights-test"
    del REWRITE_FORMS["float16-weights-test"]


def _plans(model, form: str):
    plans, _ = plan_model(model.graph, QuantConfig(), "static")
    return [dataclasses.replace(p, form=form) for p in plans]


def test_a_registered_form_is_applied_by_the_quantize_pass(rng, float16_weights):
    model = _two_layers(rng)
    reference = model.clone()
    result = QuantizePass(_plans(model, float16_weights), RewriteInputs({}, QuantConfig()))(model)
    assert result.notes == {"mm0": "weights float16", "mm1": "weights float16"}
    assert [n.op_type for n in model.graph] == ["Cast", "MatMul", "Cast", "MatMul"]
    x = {"x": rng.normal(0, 1, (4, 16)).astype(np.float32)}
    expected = make_session(reference, optimize=False).run(None, x)[0]
    got = make_session(model, optimize=False).run(None, x)[0]
    np.testing.assert_allclose(got, expected, rtol=0, atol=2e-3 * np.abs(expected).max())  # float16: 2^-11


def test_the_quantize_pass_refuses_what_it_cannot_apply(rng, float16_weights):
    model = _two_layers(rng)
    with pytest.raises(ir.passes.PreconditionError, match="no rewrite form 'nope'"):
        QuantizePass(_plans(model, "nope"), RewriteInputs({}, QuantConfig()))(model)
    with pytest.raises(ir.passes.PreconditionError, match=r"'mm1': no calibrated range for \['h'\]"):
        QuantizePass(_plans(model, "qdq"), RewriteInputs({"x": (-3.0, 3.0)}, QuantConfig()))(model)
    stranger = _two_layers(rng)
    with pytest.raises(ir.passes.PreconditionError, match="not in the main graph"):
        QuantizePass(_plans(stranger, "qdq"), RewriteInputs({}, QuantConfig()))(model)


def test_a_form_that_leaves_a_planned_weight_float_breaks_the_pass_contract(rng):
    rewrite_form("forgetful-test", stage=0)(lambda model, plans, inputs: {})
    try:
        model = _two_layers(rng)
        with pytest.raises(ir.passes.PostconditionError, match=r"read float weights: \['mm0', 'mm1'\]"):
            QuantizePass(_plans(model, "forgetful-test"), RewriteInputs({}, QuantConfig()))(model)
    finally:
        del REWRITE_FORMS["forgetful-test"]


@pytest.fixture
def tagged_format():
    """A format this test adds: the QDQ model, tagged in its metadata, with every planned product noted."""

    def lower(model, plans):
        model.metadata_props["quantized_by"] = "onnxq test format"
        return {p.node.name: "the test format keeps QDQ" for p in plans}

    register_format(OutputFormat("tagged-test", "QDQ with a metadata tag", lower))
    yield "tagged-test"
    del FORMATS["tagged-test"]


def test_a_registered_format_is_usable_end_to_end(samples_dir, tagged_format):
    assert build_parser().parse_args(["m.onnx", "--format", tagged_format]).format == tagged_format
    result = onnxq.quantize(samples_dir / "mlp.onnx", samples_dir / "mlp_calib.npz",
                            config=QuantConfig(format=tagged_format, verify=VerifyConfig(enabled=False)))
    assert result.model.metadata_props["quantized_by"] == "onnxq test format"
    kept = [n for n in result.report.notes if "kept in QDQ form (the test format keeps QDQ)" in n]
    assert len(kept) == len(result.report.quantized) == 3 and kept[0].startswith(f"format {tagged_format}: ")
    with pytest.raises(onnxq.errors.ConfigError, match="unknown format 'tflite'; use one of qdq, qoperator, qlinear"):
        QuantConfig(format="tflite")


def test_calibration_collects_the_ranges_the_plans_forms_read(rng, float16_weights):
    """What calibration observes comes from the plans' schemes under their forms: a calibrated form (qdq) reads its
    activations' ranges, a run-time one (dynamic) or a weight-only one reads none."""
    from onnxq.passes.forms.quantize import needed_ranges

    model, config = _two_layers(rng), QuantConfig()
    assert needed_ranges(_plans(model, "qdq"), config) == ["x", "h"]
    assert needed_ranges(_plans(model, "dynamic"), config) == []
    assert needed_ranges(_plans(model, float16_weights), config) == []
    mixed = _plans(model, "qdq")
    assert needed_ranges([mixed[1], dataclasses.replace(mixed[0], form="dynamic")], config) == ["h"]


def test_each_quantized_input_has_a_scheme(rng):
    from onnxq.handlers.scheme import PerAxis, PerBlock, PerTensor, PerToken, Scheme, TensorQuant
    from onnxq.passes.forms.registry import plan_tensors

    model, config = _two_layers(rng), QuantConfig()
    static = _plans(model, "qdq")[0]
    assert plan_tensors(static, config) == (
        TensorQuant(0, Scheme("uint8", False, PerTensor(), "calibrated")),
        TensorQuant(1, Scheme("int8", True, PerAxis(1), "constant"), pair_limit_axis=0))  # target portable
    per_token = dataclasses.replace(static, form="dynamic", per_token=True)
    assert plan_tensors(per_token, config)[0].scheme == Scheme("uint8", True, PerToken(), "runtime")
    dynamic = dataclasses.replace(static, form="dynamic")
    assert plan_tensors(dynamic, config)[0].scheme == Scheme("uint8", False, PerTensor(), "runtime")
    int4 = QuantConfig(mode="weight-only", weights=onnxq.QScheme("int4", symmetric=True))
    [blocked] = [p for p in plan_model(model.graph, int4, "weight-only")[0] if p.node.name == "mm0"]
    assert plan_tensors(blocked, int4) == (TensorQuant(1, Scheme("int4", True, PerBlock(0, 32), "constant")),)
    eight = int4.replace(blocks=dataclasses.replace(int4.blocks, int8_nodes=("mm0",)))
    assert plan_tensors(blocked, eight)[0].scheme.dtype == "int8"
    assert plan_tensors(dataclasses.replace(static, form="no-such-form"), config) == ()
