"""The zoo's entries: where each model comes from (a PyPI wheel, its sha256, the file inside), and how its package
prepares inputs and reads answers. Each entry's `prepare` returns a Task: calibration data, one feed for latency,
and `answers(session)`, the task's decisions on held-out inputs (labels, strings, speech/no-speech per chunk) made
with the package's own pre- and post-processing around the given session."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np

from zoo import inputs

__all__ = ["Task", "ZooModel", "ZOO"]


@dataclasses.dataclass
class Task:
    calibration: dict[str, np.ndarray]
    feed: dict[str, np.ndarray]  # one deployment-sized run, for latency
    answers: Callable[[object], list]  # session → the task's decisions on the held-out inputs
    metric: str
    sample_axes: dict[str, int] = dataclasses.field(default_factory=dict)
    truth: list | None = None  # the right answers, where the held-out inputs were made from them (rendered text)
    # The held-out inputs, given to onnxq as its verification data (--verify-data): its gate then judges the task on
    # the inputs the bench judges, not on every 10th calibration sample (5 lines, 1 page) — as one feed, or as the
    # batches the package runs (the recognizer's: each padded to its own widest line).
    verification: dict[str, np.ndarray] | list[dict[str, np.ndarray]] | None = None


@dataclasses.dataclass(frozen=True)
class ZooModel:
    name: str
    kind: str
    package: str
    version: str
    sha256: str
    member: str  # the model's path inside the wheel
    prepare: Callable[[np.random.Generator], Task]


_RAPIDOCR = ("rapidocr-onnxruntime", "1.4.4", "971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf")
_DDDDOCR = ("ddddocr", "1.6.1", "c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935")
_SILERO = ("silero-vad", "6.2.3", "7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8")


def _rapidocr():
    from rapidocr_onnxruntime import RapidOCR
    return RapidOCR()


def _batches(arrays: np.ndarray, size: int) -> list[np.ndarray]:
    return [arrays[i:i + size] for i in range(0, len(arrays), size)]


def _ppocr_cls(rng: np.random.Generator) -> Task:
    """Direction classifier: printed lines, half turned 180°; TextClassifier's resize_norm_img, its labels."""
    cls = _rapidocr().text_cls
    lines = [inputs.text_line(rng)[0] for _ in range(160)]
    lines = [line[::-1, ::-1].copy() if i % 2 else line for i, line in enumerate(lines)]
    x = np.stack([cls.resize_norm_img(line) for line in lines]).astype(np.float32)

    def answers(session):
        return [label for batch in _batches(x[64:], 8)
                for label, _ in cls.postprocess_op(session.run(None, {"x": batch})[0])]
    return Task({"x": x[:64]}, {"x": x[64:72]}, answers, "label agreement",
                truth=["180" if i % 2 else "0" for i in range(64, 160)], verification={"x": x[64:]})


class _RecSession:
    """What TextRecognizer calls as its session (OrtInferSession: a batch in, the outputs out), on a given one."""

    def __init__(self, session) -> None:
        self.session = session

    def __call__(self, batch: np.ndarray) -> list[np.ndarray]:
        return self.session.run(None, {"x": batch})


def _rec_batch(rec, lines: list[np.ndarray]) -> np.ndarray:
    """Lines as TextRecognizer batches them: 48 high, padded to the widest line's aspect ratio (at least 320/48)
    so that no line is squeezed."""
    ratio = max(320 / 48, *(line.shape[1] / line.shape[0] for line in lines))
    return np.stack([rec.resize_norm_img(line, ratio) for line in lines]).astype(np.float32)


def _deployed_batches(rec, lines: list[np.ndarray]) -> list[dict[str, np.ndarray]]:
    """Lines as TextRecognizer runs them: sorted by aspect ratio, rec_batch_num a batch, each batch padded to its own
    widest line — the feeds the bench judges, one batch each."""
    order = np.argsort([line.shape[1] / line.shape[0] for line in lines], kind="stable")
    ordered = [lines[i] for i in order]
    return [{"x": _rec_batch(rec, ordered[i:i + rec.rec_batch_num])}
            for i in range(0, len(ordered), rec.rec_batch_num)]


def _ppocr_rec(rng: np.random.Generator) -> Task:
    """Recognizer (PP-OCRv4, SVTR): printed lines read by TextRecognizer itself (its sorting by width, batches of
    rec_batch_num, resize_norm_img to the batch's widest aspect ratio, CTC decoding) around the given session; the
    calibration lines in one batch the same way."""
    rec = _rapidocr().text_rec
    lines, texts = zip(*(inputs.text_line(rng) for _ in range(112)))
    held_out = list(lines[48:])

    def answers(session):
        rec.session = _RecSession(session)
        return [text for text, _ in rec(held_out)[0]]
    return Task({"x": _rec_batch(rec, list(lines[:48]))}, {"x": _rec_batch(rec, held_out[:rec.rec_batch_num])},
                answers, "string agreement", truth=list(texts[48:]), verification=_deployed_batches(rec, held_out))


def _ppocr_det(rng: np.random.Generator) -> Task:
    """Detector (PP-OCRv4, DB): printed pages through TextDetector's DetPreProcess; the answer per page is its
    binarized text map at DB's threshold 0.3, compared pixel by pixel (agreement = IoU of the text pixels)."""
    det = _rapidocr().text_det
    pages = [inputs.page(rng) for _ in range(20)]
    x = np.concatenate([det.get_preprocess(max(p.shape[:2]))(p) for p in pages]).astype(np.float32)

    def answers(session):
        return [session.run(None, {"x": x[i:i + 1]})[0][0, 0] > 0.3 for i in range(10, len(x))]
    return Task({"x": x[:10]}, {"x": x[10:11]}, answers, "text-pixel IoU", verification={"x": x[10:]})


def _ddddocr(rng: np.random.Generator) -> Task:
    """Captcha reader (CNN + LSTM): rendered captchas through ddddocr's OCREngine preprocessing and decoding."""
    from ddddocr.core.ocr_engine import OCREngine
    engine = OCREngine(beta=True)  # common.onnx is ddddocr's beta model (DdddOcr(beta=True))
    captchas, texts = zip(*(inputs.captcha(rng) for _ in range(96)))
    images = [engine._preprocess_image(captcha, False) for captcha in captchas]
    x = np.concatenate([np.asarray(i, np.float32).reshape(1, 1, *np.asarray(i).shape[-2:]) for i in images])

    def answers(session):
        return [engine._process_text_output(session.run(None, {"input1": x[i:i + 1]})[0]) for i in range(48, len(x))]
    return Task({"input1": x[:48]}, {"input1": x[48:49]}, answers, "string agreement", truth=list(texts[48:]),
                verification={"input1": x[48:]})


def _silero(rng: np.random.Generator) -> Task:
    """VAD (CNN + LSTM): espeak-ng speech in 512-sample chunks at 16 kHz, streamed as silero-vad's OnnxWrapper does
    (its own code needs torch; the loop is the same): each chunk after the last 64 samples of the one before (zeros
    first), the state carried from chunk to chunk; speech = probability > 0.5, its threshold. Every silero file
    takes the context: fed 512 samples alone, the float model hears no speech in any of 1055 chunks (all agreements
    1.000 on all-silent answers)."""
    clips = [inputs.speech(rng) for _ in range(12)]
    chunks = [c[: len(c) // 512 * 512].reshape(-1, 512) for c in clips]
    rate = np.array(16000, np.int64)

    def with_context(clip):
        context = np.concatenate([np.zeros((1, 64), np.float32), clip[:-1, -64:]])
        return np.concatenate([context, clip], axis=1)

    def stream(session, clip):
        state, probs = np.zeros((2, 1, 128), np.float32), []
        for chunk in with_context(clip):
            out, state = session.run(None, {"input": chunk[None], "state": state, "sr": rate})
            probs.append(float(out[0, 0]))
        return probs
    calib = np.concatenate([with_context(c) for c in chunks[:4]])[::2]

    def answers(session):
        return [p > 0.5 for clip in chunks[4:] for p in stream(session, clip)]
    held = np.concatenate([with_context(c) for c in chunks[4:]])
    return Task({"input": calib, "state": np.zeros((2, len(calib), 128), np.float32), "sr": rate},
                {"input": with_context(chunks[4])[:1], "state": np.zeros((2, 1, 128), np.float32), "sr": rate},
                answers, "speech decision agreement", {"state": 1},
                verification={"input": held, "state": np.zeros((2, len(held), 128), np.float32), "sr": rate})


ZOO = (
    ZooModel("ppocr_cls", "CNN classifier", *_RAPIDOCR,
             "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", _ppocr_cls),
    ZooModel("ppocr_det", "detector (segmenter)", *_RAPIDOCR, "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx",
             _ppocr_det),
    ZooModel("ppocr_rec", "OCR recognizer (CNN + attention)", *_RAPIDOCR,
             "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx", _ppocr_rec),
    ZooModel("ddddocr", "captcha reader (CNN + LSTM)", *_DDDDOCR, "ddddocr/common.onnx", _ddddocr),
    ZooModel("silero_vad", "speech VAD (CNN + LSTM in If)", *_SILERO, "silero_vad/data/silero_vad_16k_op15.onnx",
             _silero),
    # The same network for 16 and 8 kHz in one file (the one OnnxWrapper loads by default): all of it sits in the
    # two branches of an If on the sample rate, so its Convs are subgraph nodes.
    ZooModel("silero_vad_rates", "speech VAD, whole network in If branches", *_SILERO,
             "silero_vad/data/silero_vad.onnx", _silero),
)
