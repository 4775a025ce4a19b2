"""A decoder language model with a KV cache, to 4-bit weights: python examples/decoder_int4.py OUT_FOLDER
[MODEL.onnx CALIB.npz DEV.npz]

MODEL.onnx: a decoder exported with its cache (Optimum's text-generation-with-past, onnxruntime-genai's model
builder); CALIB.npz and DEV.npz: windows of token ids (input_ids, and attention_mask if you have it; the position
ids and the empty caches of a first step are made). Without them the example makes a two-layer stand-in and windows
of the tokens it writes itself (examples/stand_ins.py). The command line does the same:

    python -m onnxq decoder.onnx --calib calib.npz --verify-data dev.npz --weights int4 -o decoder.int4.onnx

4-bit weights in blocks of 32 (MatMulNBits), rounded by GPTQ on the calibration windows; the token table and the
lm_head in 8-bit blocks (a decoder's default); judged by perplexity on DEV.npz against the float model's.
Writes into OUT_FOLDER only: the 4-bit model and its report.json.
"""

import json
import sys
from pathlib import Path

import onnxq


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if len(argv) == 4:
        model, calib, dev = (Path(a) for a in argv[1:])
    else:
        from stand_ins import kv_decoder_with_windows
        model, calib, dev = kv_decoder_with_windows(out)
        print(f"stand-ins: {model.name} (two layers, a KV cache), {calib.name} and {dev.name} (token windows)")

    # A decoder is recognized by its logits over the rows of its token table: 4-bit weights then get MatMulNBits
    # with accuracy_level 4 and the perplexity gate without being asked.
    config = onnxq.QuantConfig(weights=onnxq.QScheme("int4"))
    result = onnxq.quantize(model, calib, verify_data=dev, output=out / f"{model.stem}.int4.onnx", config=config)
    report = result.report
    (out / "report.json").write_text(json.dumps(report.to_dict(), indent=1))
    print(result.summary())
    logits = next(o for o in report.verification.outputs if o.name == "logits").metrics
    print(f"perplexity on {dev.name}: float {logits.perplexity_reference:.3f}, 4-bit {logits.perplexity:.3f} "
          f"({logits.perplexity_ratio:.4f}x float); file {report.quant_bytes / report.float_bytes:.2f}x float")
    return 0 if report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
