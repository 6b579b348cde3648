"""The code's shape, as the README's layout table describes it: what imports what, and how long a module may grow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_LINES = 450


def imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def modules(*folders: str) -> list[Path]:
    return sorted(p for folder in folders for p in (REPO / folder).rglob("*.py"))


@pytest.mark.parametrize("path", modules("capsnet", "dashboard"), ids=lambda p: str(p.relative_to(REPO)))
def test_no_module_is_too_long(path: Path) -> None:
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{path.relative_to(REPO)} has {lines} lines: split it by concept"


def test_the_core_does_not_know_the_dashboard() -> None:
    for path in modules("capsnet"):
        assert not any(name.startswith("dashboard") for name in imports(path)), path


def test_the_trainer_and_the_catalogue_do_not_touch_processes() -> None:
    for name in ("train", "catalog", "checkpointer", "run_folder", "options"):
        assert "capsnet.runs" not in imports(REPO / "capsnet" / f"{name}.py"), name


def test_docs_scripts_do_not_borrow_from_the_tests() -> None:
    for path in modules("docs", "benchmarks"):
        assert not any(n.split(".")[0] in ("tests", "browser_support", "conftest") for n in imports(path)), path


# drawn as colour emoji only with an emoji font (an empty box without one): the app uses Material icons instead
EMOJI = set("\ufe0f✅❌⭐⌛⏳⏩⏪⏸⏹⏺")


def test_the_dashboard_draws_no_emoji() -> None:
    for path in modules("dashboard"):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            found = [c for c in line if ord(c) >= 0x1F000 or c in EMOJI]
            assert not found, f"{path.relative_to(REPO)}:{number}: {found}: use a Material icon or a plain symbol"


def test_pages_are_layout_over_functions() -> None:
    """A page wires widgets to functions in capsnet/ and dashboard/: it computes nothing with torch itself."""
    for path in modules("dashboard/app_pages"):
        assert not any(n.split(".")[0] == "torch" for n in imports(path)), f"{path.relative_to(REPO)} imports torch"


DRAWING = {"caption", "error", "warning", "info", "success", "markdown", "write", "page_link", "toast", "image"}


def test_the_data_layer_never_draws() -> None:
    """dashboard.models, dashboard.baselines and dashboard.state return values and reasons; guards and pages draw."""
    for name in ("models", "baselines", "state"):
        tree = ast.parse((REPO / "dashboard" / f"{name}.py").read_text(encoding="utf-8"))
        drawn = [
            node.func.attr
            for node in ast.walk(tree)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DRAWING
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "st"
        ]  # fmt: skip
        assert not drawn, f"dashboard/{name}.py draws: st.{', st.'.join(drawn)}"


def test_pages_are_named_in_one_registry() -> None:
    """Every page file is in dashboard/pages.py, and no other module spells a page's path."""
    from dashboard import pages

    assert {p.path for p in pages.PAGES} == {
        f"app_pages/{p.name}" for p in (REPO / "dashboard" / "app_pages").glob("*.py")
    }
    for path in modules("dashboard"):
        if path.name != "pages.py":
            assert '"app_pages/' not in path.read_text(encoding="utf-8"), (
                f"{path.relative_to(REPO)}: use dashboard.pages"
            )


def test_shared_session_keys_go_through_typed_accessors() -> None:
    """The session keys that several modules share (the chosen checkpoint, the input, the followed run, the selected
    primary capsule) are read and written through dashboard.state's typed functions, never indexed elsewhere."""
    for path in modules("dashboard"):
        if path.name != "state.py":
            text = path.read_text(encoding="utf-8")
            found = re.findall(r"session_state(?:\.get\(|\[)\s*state\.[A-Z_]+", text)
            assert not found, f"{path.relative_to(REPO)}: {found[0]}: use dashboard.state's accessors"
