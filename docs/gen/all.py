"""Writes every generated page of the documentation from the code, so that none can drift from it.

    python docs/gen/all.py           rewrite the pages that differ from what the code gives
    python docs/gen/all.py --check   write nothing; exit 1 naming each page that differs

tests/docs/test_generated_pages.py runs the check. Each generator is a module beside this file whose pages() gives
{path: the page's text}: cli_reference (the command line's parsers), config_reference (QuantConfig's schema and
its comments), api_reference (onnxq.__all__, rendered by mkdocstrings), schema_reference (report_schema.json)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
GENERATORS = ("cli_reference", "config_reference", "api_reference", "schema_reference")


def _generator(name: str):
    spec = importlib.util.spec_from_file_location(f"onnxq_docs_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # a dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def expected_pages() -> dict[Path, str]:
    """Every generated page as the code gives it now (onnxq imported from this checkout)."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    pages: dict[Path, str] = {}
    for name in GENERATORS:
        pages.update(_generator(name).pages())
    return pages


def stale_pages() -> list[Path]:
    """The generated pages whose file differs from what the code gives (or is missing)."""
    return [path for path, text in expected_pages().items()
            if not path.is_file() or path.read_text(encoding="utf-8") != text]


def main(argv: list[str]) -> int:
    pages = expected_pages()
    stale = [p for p, text in pages.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if "--check" in argv:
        for path in stale:
            print(f"{path.relative_to(ROOT)} is stale: run python docs/gen/all.py", file=sys.stderr)
        return 1 if stale else 0
    for path in stale:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(pages[path], encoding="utf-8")
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
