"""The acceptance zoo: real ONNX models shipped inside PyPI packages, each fed through its package's own
preprocessing on inputs made here, judged by its task's answers. Run with bench/bench_zoo.py."""
