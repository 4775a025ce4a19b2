"""Shared benchmark helpers: isolated quantizer runs (time, peak RSS), cosine, interleaved latency."""

from __future__ import annotations

import hashlib
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

SHARED = Path(__file__).resolve().parents[2] / "shared" / "models"


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def run_worker(script: Path, *args: str, max_rss_mb: float | None = None, max_seconds: float | None = None) -> dict:
    """Run one quantizer in a fresh process so that its peak RSS is its own.

    With limits, a watchdog kills the worker when its RSS or run time passes them (so that a quantizer that keeps
    every activation cannot take the machine down) and reports how far it got."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, str(script), "--worker", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    peak = 0.0
    while proc.poll() is None:
        peak = max(peak, _rss_mb(proc.pid))
        elapsed = time.perf_counter() - start
        if (max_rss_mb and peak > max_rss_mb) or (max_seconds and elapsed > max_seconds):
            proc.kill()
            proc.communicate()
            reason = f"RSS over {max_rss_mb:.0f} MB" if max_rss_mb and peak > max_rss_mb else f"over {max_seconds:.0f} s"
            return {"killed": reason, "seconds": elapsed, "peak_rss_mb": peak}
        time.sleep(0.2)
    out, err = proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"worker {args} failed:\n{err[-3000:]}")
    return json.loads(out.strip().splitlines()[-1])


def _rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def timed(fn) -> dict:
    """Call fn() and report its wall time and this process's peak RSS (before and after)."""
    base = peak_rss_mb()
    start = time.perf_counter()
    fn()
    return {"seconds": time.perf_counter() - start, "peak_rss_mb": peak_rss_mb(), "rss_before_mb": base}


def session(path: str | Path, threads: int = 2, optimize: bool = True) -> ort.InferenceSession:
    """optimize=False: ORT_DISABLE_ALL, the exact quantization (DequantizeLinear + float ops, no integer kernels)."""
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    # Idle sessions' threads must not spin: several sessions take turns on the same 2 cores.
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def mean_cosine(reference: np.ndarray, other: np.ndarray) -> float:
    a, b = reference.reshape(len(reference), -1), other.reshape(len(other), -1)
    return float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).mean())


def session_perplexity(s: ort.InferenceSession, windows: dict[str, np.ndarray]) -> float:
    """A language model's perplexity on token windows (predict token t+1 from tokens <= t), one window a run."""
    nll, count = 0.0, 0
    for i in range(len(windows["input_ids"])):
        feed = {k: windows[k][i:i + 1] for k in windows}
        logits = s.run(["logits"], feed)[0][0, :-1].astype(np.float64)
        targets = windows["input_ids"][i, 1:]
        logits -= logits.max(-1, keepdims=True)
        log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
        nll -= float(log_probs[np.arange(len(targets)), targets].sum())
        count += len(targets)
    return float(np.exp(nll / count))


def interleaved_latency_ms(paths: dict[str, Path], feed: dict[str, np.ndarray], rounds: int,
                           threads: int = 2) -> dict[str, float]:
    """Median latency per model; models take turns each round so that machine noise hits all alike, each round
    starting one model further on: in a fixed order [a, b, float] the first of each round — the one run right after
    the float model — ran 3–5 % slower than the same file run second (MiniLM 4-bit at batch 32, 12 rounds, both
    orders, 2-core Xeon, forty-fourth session), so a fixed order charged one model every round."""
    sessions = {name: session(p, threads) for name, p in paths.items()}
    for s in sessions.values():
        for _ in range(2):
            s.run(None, feed)
    times: dict[str, list[float]] = {name: [] for name in sessions}
    order = list(sessions)
    for round_index in range(rounds):
        shift = round_index % len(order)
        for name in order[shift:] + order[:shift]:
            start = time.perf_counter()
            sessions[name].run(None, feed)
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t) * 1000) for name, t in times.items()}


def fresh(path: str | Path) -> Path:
    """The path with no model or external data left from an earlier run (ORT appends to an existing .data)."""
    path = Path(path)
    for stale in (path, path.with_name(path.name + ".data")):
        stale.unlink(missing_ok=True)
    return path


def file_mb(path: str | Path) -> float:
    path = Path(path)
    extra = path.with_name(path.name + ".data")
    return (path.stat().st_size + (extra.stat().st_size if extra.exists() else 0)) / 1e6


def machine() -> str:
    """The CPU by name and flags (every figure is named with its machine), its cores, and onnxruntime."""
    from onnxq.targets import cpu_flags, cpu_model
    return (f"{cpu_model()} ({', '.join(sorted(cpu_flags()))}), {os.cpu_count()} cores, onnxruntime "
            f"{ort.__version__}")


def fetch_wheel(name: str, version: str, sha256: str, folder: Path) -> Path:
    """A package's wheel as a user would get it (`pip download`), fetched once into the folder; its sha256 must be
    the one recorded."""
    stem = f"{name.replace('-', '_')}-{version}-"
    wheel = next(folder.glob(f"{stem}*.whl"), None)
    if wheel is None:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(folder),
                        f"{name}=={version}"], check=True)
        wheel = next(folder.glob(f"{stem}*.whl"))
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    if digest != sha256:
        raise SystemExit(f"{wheel.name}: sha256 {digest}, expected {sha256}")
    return wheel
