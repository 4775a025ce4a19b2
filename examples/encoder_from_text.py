"""A sentence encoder quantized from raw text: python examples/encoder_from_text.py OUT_FOLDER [MODEL.onnx TEXT]

MODEL.onnx: a transformer encoder exported to ONNX (input_ids, attention_mask, token_type_ids), its Hugging Face
tokenizer.json beside it. TEXT: sentences, one a line (.txt), or JSON lines (.jsonl, the "text" field). Without
them the example makes a small stand-in of each (examples/stand_ins.py). Needs the tokenizers package
(pip install ".[text]"). Writes into OUT_FOLDER only: the tokenized sentences.npz, the int8 model and its
report.json.
"""

import json
import subprocess
import sys
from pathlib import Path

import onnxq


def main(argv: list[str]) -> int:
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    if len(argv) == 3:
        model, text = Path(argv[1]), Path(argv[2])
    else:
        from stand_ins import text_encoder
        model, text = text_encoder(out)
        print(f"stand-ins: {model.name} with tokenizer.json beside it, {text.name}")

    # What onnxq makes of the text (the arrays the model takes), said and written as an .npz: the command line.
    subprocess.run([sys.executable, "-m", "onnxq", "data", str(model), str(text), "-o", str(out / "sentences.npz")],
                   check=True)

    # The text itself as calibration data (the same as --calib TEXT): tokenized with the tokenizer.json beside the
    # model, 9 sentences in 10 calibrate, every 10th is held back to verify on.
    result = onnxq.quantize(model, text, output=out / f"{model.stem}.int8.onnx")
    (out / "report.json").write_text(json.dumps(result.report.to_dict(), indent=1))
    print(result.summary())
    for check in result.report.verification.outputs:
        print(f"{check.name}: mean cosine to float {check.metrics.cosine_mean:.4f}")
    return 0 if result.report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
