"""A CNN quantized from a folder of photos: python examples/cnn_from_images.py OUT_FOLDER [MODEL.onnx PHOTOS]

MODEL.onnx: a CNN taking images (NCHW or NHWC, float or uint8); PHOTOS: a folder of .png / .jpg files (searched
recursively). onnxq decodes them, scales each to cover the model's size and crops the centre, and normalizes them
with ImageNet's mean and std (--normalize sets others). Without arguments the example makes a small CNN image
encoder and 40 photos (examples/stand_ins.py). Needs Pillow (pip install ".[vision]"). Writes into
OUT_FOLDER only: photos.npz, the int8 model and its report.json.
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
        model, photos = Path(argv[1]), Path(argv[2])
    else:
        from stand_ins import image_encoder
        model, photos = image_encoder(out)
        print(f"stand-ins: {model.name}, {len(list(photos.iterdir()))} photos in {photos.name}/")

    # The photos as the model's input, said and written as an .npz: the command line's `data` command.
    subprocess.run([sys.executable, "-m", "onnxq", "data", str(model), str(photos), "-o", str(out / "photos.npz")],
                   check=True)

    # The folder itself as calibration data (the same as --calib PHOTOS); every 10th photo is held back to verify on.
    result = onnxq.quantize(model, photos, output=out / f"{model.stem}.int8.onnx")
    (out / "report.json").write_text(json.dumps(result.report.to_dict(), indent=1))
    print(result.summary())
    for check in result.report.verification.outputs:
        print(f"{check.name}: mean cosine to float {check.metrics.cosine_mean:.4f}")
    return 0 if result.report.passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
