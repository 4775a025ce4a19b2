"""Shared benchmark helpers: isolated quantizer runs (time, peak RSS), cosine, interleaved latency, and the result
file every script writes (bench/results/<script>.json: its tables, figures, command, machine and versions)."""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "results"
SHARED = BENCH.parents[1] / "shared" / "models"
# The CPU flags that decide which integer kernel ONNX Runtime runs (x86; ARM's dot-product and i8mm).
ISA = ("avx2", "avx512_vnni", "avx_vnni", "amx_int8", "asimddp", "i8mm")


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
            over_rss = max_rss_mb and peak > max_rss_mb
            reason = f"RSS over {max_rss_mb:.0f} MB" if over_rss else f"over {max_seconds:.0f} s"
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
    orders, 2-core Xeon), so a fixed order charged one model every round."""
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
    """The CPU by name, family / model and flags (every figure is named with its machine), its cores, and
    onnxruntime."""
    info = machine_info()
    family = f", family {info['cpu_family']} model {info['cpu_model']}" if info["cpu_family"] is not None else ""
    return (f"{info['cpu']}{family} ({', '.join(info['isa']) or 'no int8 ISA flag'}), {info['cores']} cores, "
            f"onnxruntime {ort.__version__}")


def _cpuinfo_fields() -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    fields: dict[str, str] = {}
    for line in text.split("\n\n")[0].splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    return fields


def _gpus() -> list[str]:
    try:
        listed = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                                text=True, check=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.strip()]


def machine_info() -> dict:
    """The machine a figure belongs to: CPU name, family and model (x86; None elsewhere), the ISA flags that decide
    ORT's integer kernels, cores, GPUs (an empty list: none) and the execution providers onnxruntime offers."""
    fields = _cpuinfo_fields()
    flags = set((fields.get("flags") or fields.get("Features") or "").split())
    number = lambda key: int(fields[key]) if fields.get(key, "").isdigit() else None  # noqa: E731
    return {"cpu": fields.get("model name") or platform.processor() or platform.machine(),
            "cpu_family": number("cpu family"), "cpu_model": number("model"),
            "isa": [flag for flag in ISA if flag in flags], "arch": platform.machine(), "cores": os.cpu_count(),
            "gpus": _gpus(), "providers": ort.get_available_providers()}


def versions(*packages: str) -> dict[str, str]:
    """onnxq's, onnxruntime's, onnx's, onnx_ir's, numpy's and Python's versions, and those of `packages`."""
    from importlib import metadata

    import onnxq

    found = {"onnxq": onnxq.__version__, "onnxruntime": ort.__version__, "python": platform.python_version()}
    for name in ("onnx", "onnx-ir", "numpy", *packages):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found


def bench_command(argv: list[str] | None = None) -> str:
    """The command line that ran this script, as a user would type it from the repository root."""
    argv = sys.argv if argv is None else argv
    script = Path(argv[0]).resolve()
    shown = script.relative_to(BENCH.parent) if script.is_relative_to(BENCH.parent) else script
    return shlex.join(["python", str(shown), *argv[1:]])


@dataclass(frozen=True)
class Table:
    """One table of a result, its cells as the script printed them (the raw figures sit beside it in the file)."""

    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    caption: str = ""  # what the table shows, above it
    note: str = ""  # how to read it, below it

    def markdown(self) -> str:
        lines = [self.caption, ""] if self.caption else []
        lines += ["| " + " | ".join(self.columns) + " |", "|" + "---|" * len(self.columns)]
        lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in self.rows]
        return "\n".join(lines + (["", self.note] if self.note else []))

    def to_dict(self) -> dict:
        return {"caption": self.caption, "columns": list(self.columns), "rows": [list(r) for r in self.rows],
                "note": self.note}


def add_results_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--results", type=Path, default=RESULTS,
                        help="folder of the result file (default bench/results; 'none': write none)")


def write_result(folder: Path | str, script: str, title: str, tables: list[Table], figures: dict, *,
                 variant: str = "", headline: Table | None = None, packages: tuple[str, ...] = ()) -> Path | None:
    """Print the tables and write folder/<script>[.<variant>].json: a short title, what was measured (the script's
    docstring), the tables, the raw figures, the command, the machine (and its load average as the run ends: other
    work on the machine slows milliseconds more than the ratios of one run), the versions (and those of `packages`)
    and the date. folder 'none' writes nothing."""
    for table in tables:
        print("\n" + table.markdown(), flush=True)
    if str(folder) == "none":
        return None
    doc = ast.get_docstring(ast.parse(Path(script).read_text())) or ""
    name = Path(script).stem + (f".{variant}" if variant else "")
    result = {"script": f"bench/{Path(script).name}", "variant": variant, "title": title, "measured": doc,
              "command": bench_command(), "date": datetime.date.today().isoformat(),
              "machine": machine_info(), "load_average": [round(load, 2) for load in os.getloadavg()],
              "versions": versions(*packages),
              "tables": [t.to_dict() for t in tables], "headline": headline.to_dict() if headline else None,
              "figures": figures}
    path = Path(folder) / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, ensure_ascii=False, default=_plain) + "\n")
    print(f"\nwrote {path}", flush=True)
    return path


def _plain(value):
    """numpy scalars and paths as JSON values."""
    if isinstance(value, np.generic):
        return value.item()
    return str(value)


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
