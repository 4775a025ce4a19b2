#!/usr/bin/env bash
# A CI gate: quantize, and pass the job only where the quantized model is shown within tolerance.
#
#   bash examples/ci_gate.sh OUT_FOLDER [MODEL.onnx CALIB]     (default: the shipped tiny_transformer sample)
#
# python -m onnxq's exit status is the verdict: 0 within tolerance; 1 out of tolerance (the model is written, for
# inspection); 2 bad input (one line on stderr, nothing written); 3 internal error; 4 not shown (nothing quantized,
# or too little data to show a bar: verify on more with --verify-data); 130 interrupted. The JSON report says the
# same for tools that read it: "verdict", "passed", and per output the figures gated beside their bars.
# PYTHON chooses the interpreter (default python). Writes into OUT_FOLDER only.
set -u
python=${PYTHON:-python}
samples="$(cd "$(dirname "$0")/.." && pwd)/models"
out=${1:?usage: bash examples/ci_gate.sh OUT_FOLDER [MODEL.onnx CALIB]}
model=${2:-$samples/tiny_transformer.onnx}
calib=${3:-$samples/tiny_transformer_calib.npz}
mkdir -p "$out"

"$python" -m onnxq "$model" --calib "$calib" -o "$out/model.int8.onnx" --report "$out/report.json" -q
status=$?
case $status in
  0) echo "gate: passed — within tolerance" ;;
  1) echo "gate: failed — out of tolerance (see $out/report.json; the model is kept for inspection)" ;;
  2) echo "gate: failed — bad input (the line above says what to fix)" ;;
  4) echo "gate: failed — not shown: verify on more data (--verify-data) or hold the outputs to other bars" ;;
  *) echo "gate: failed — onnxq exited $status" ;;
esac
if [ -f "$out/report.json" ]; then
  "$python" - "$out/report.json" <<'PY'
import json
import sys

report = json.load(open(sys.argv[1]))
print(f"report: verdict {report['verdict']}, passed {report['passed']}")
for name, check in report["verification"]["providers"]["CPUExecutionProvider"]["outputs"].items():
    bars = ", ".join(f"{b['metric']} {b['value']:.4f} {b['op']} {b['bar']}" for b in check["bars"])
    print(f"  {name}: {check['verdict']} ({bars})")
PY
fi
exit $status
