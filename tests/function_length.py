"""Functions of one idea: none longer than MAX_LINES outside the tests unless its docstring says why ("Long:").

    python tests/function_length.py capsnet dashboard benchmarks docs   # `make lint` runs it

Prints each function over the limit, as path:line name (lines), and exits 1 where there is one.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

MAX_LINES = 80
REASON = "Long:"  # a docstring line that starts so says why the function is one piece


def long_functions(paths: list[Path]) -> list[str]:
    """Every function over MAX_LINES lines in `paths` (.py files, or folders of them) without a stated reason."""
    found = []
    files = sorted(f for p in paths for f in ([p] if p.is_file() else p.rglob("*.py")))
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            reasoned = any(line.strip().startswith(REASON) for line in (ast.get_docstring(node) or "").splitlines())
            if lines > MAX_LINES and not reasoned:
                found.append(f"{path}:{node.lineno} {node.name} ({lines} lines)")
    return found


if __name__ == "__main__":
    too_long = long_functions([Path(p) for p in sys.argv[1:]])
    for said in too_long:
        print(f"{said}: over {MAX_LINES} lines; split it, or say why in its docstring ({REASON} ...)")
    sys.exit(1 if too_long else 0)
