"""The code's shape, as docs/layout.md describes it: what imports what, and how long a module may grow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


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


def test_no_function_is_too_long() -> None:
    """Functions of one idea (tests/function_length.py, which `make lint` runs too): none in the package, the
    dashboard, the benchmarks or the docs' scripts is over 80 lines without its reason in its docstring. Modules are
    split by concept, not by a count of lines."""
    from function_length import long_functions

    assert not long_functions([REPO / folder for folder in ("capsnet", "dashboard", "benchmarks", "docs")])


def test_the_function_length_check_sees_a_long_function_and_its_reason(tmp_path: Path) -> None:
    from function_length import long_functions

    body = "".join(f"    x{n} = {n}\n" for n in range(85))
    (tmp_path / "long.py").write_text(f'def long():\n{body}\n\ndef said():\n    """Long: a table."""\n{body}')
    assert [line.split()[1] for line in long_functions([tmp_path])] == ["long"]


def test_no_module_warns_as_it_compiles() -> None:
    """No invalid escape sequence (a LaTeX command in a plain f-string): a DeprecationWarning today, an error in a
    later Python."""
    import warnings

    for path in modules("capsnet", "dashboard", "benchmarks", "tests", "docs"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            compile(path.read_text(encoding="utf-8"), str(path), "exec")


def test_the_core_does_not_know_the_dashboard() -> None:
    for path in modules("capsnet"):
        assert not any(name.startswith("dashboard") for name in imports(path)), path


def test_the_trainer_and_the_catalogue_do_not_touch_processes() -> None:
    for name in ("training/trainer", "runs/catalog", "training/checkpointer", "training/folder",
                 "training/options", "runs/estimate"):  # fmt: skip
        assert "capsnet.runs.processes" not in imports(REPO / "capsnet" / f"{name}.py"), name


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(folder: str = "capsnet") -> dict[str, set[str]]:
    """Each module of `folder` and the modules of `folder` it imports (a `from package import module` counts)."""
    names = {module_name(p) for p in modules(folder)}
    graph = {}
    for path in modules(folder):
        found = imports(path) & names
        graph[module_name(path)] = {n for n in found if (n + ".__init__") not in names} - {module_name(path)}
    return graph


def test_the_package_is_a_few_wings_with_no_import_circle() -> None:
    """capsnet/ shows its architecture: a few modules at the top and the rest in wings; no two modules import
    each other, directly or around a circle (also not by a function-level import)."""
    top = sorted(p.name for p in (REPO / "capsnet").glob("*.py"))
    assert len(top) <= 8, f"capsnet/ has {len(top)} top-level modules: put {top} in the wings"
    wings = sorted(p.name for p in (REPO / "capsnet").iterdir() if (p / "__init__.py").exists())
    assert wings == ["checkpoints", "cli", "data", "nn", "readings", "runs", "training"], wings
    assert_acyclic(import_graph())
    wing = {name: ".".join(name.split(".")[:2]) for name in import_graph()}  # capsnet.nn.layers -> capsnet.nn
    wings_graph: dict[str, set[str]] = {}
    for name, targets in import_graph().items():
        wings_graph.setdefault(wing[name], set()).update(wing[t] for t in targets if wing[t] != wing[name])
    assert_acyclic(wings_graph)  # the wings stand in floors: no wing imports one that imports it back


def assert_acyclic(graph: dict[str, set[str]]) -> None:
    """Depth-first search; an edge back to a node on the current path is a circle, named in the message."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for target in sorted(graph.get(node, ())):
            if state.get(target) == 1:
                raise AssertionError("import circle: " + " -> ".join([*path[path.index(target) :], target]))
            if target not in state:
                visit(target, [*path, target])
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])


def test_routing_has_a_room_of_its_own() -> None:
    """Procedure 1 lives in capsnet/nn/dynamic_routing.py; the layers call it and define no routing of their own."""
    import capsnet.nn.dynamic_routing as routing
    import capsnet.nn.layers as layers

    assert routing.dynamic_routing.__module__ == "capsnet.nn.dynamic_routing"
    assert layers.dynamic_routing is routing.dynamic_routing
    assert "def dynamic_routing" not in (REPO / "capsnet" / "nn" / "layers.py").read_text(encoding="utf-8")


def test_every_command_is_an_installed_script() -> None:
    """Every command of `python -m capsnet` is a module of capsnet/cli and a `capsnet-NAME` script."""
    import tomllib

    from capsnet.cli import COMMANDS

    scripts = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["scripts"]
    assert scripts.pop("capsnet") == "capsnet.__main__:main"
    assert scripts == {f"capsnet-{name}": f"{module}:main" for name, (module, _) in COMMANDS.items()}
    assert {f"capsnet.cli.{p.stem}" for p in (REPO / "capsnet" / "cli").glob("[!_]*.py")} == {
        module for module, _ in COMMANDS.values()
    }


def test_the_layout_table_names_every_module() -> None:
    """docs/layout.md, the page the README points to for the code's layout, names every module of capsnet/."""
    table = (REPO / "docs" / "layout.md").read_text(encoding="utf-8")
    for path in modules("capsnet"):
        if path.name == "__init__.py" and path.parent.name not in ("capsnet", "cli"):
            continue
        rel = path.relative_to(REPO / "capsnet")
        assert f"`{rel}`" in table or f"`capsnet/{rel}`" in table, f"docs/layout.md's table misses capsnet/{rel}"


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
    """Every page file is in dashboard/pages.py (a page, or a page's view for a network routed another way), and no
    other module spells a page's path."""
    from dashboard import pages

    assert {p.path for p in pages.PAGES} | {path for p in pages.PAGES for _, path in p.views} == {
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


def test_the_public_api_is_reexported() -> None:
    """`from capsnet import NAME` gives each public name from the module that defines it."""
    import importlib

    import capsnet

    for name, module in capsnet.PUBLIC.items():
        assert getattr(capsnet, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        capsnet.nope  # noqa: B018


SESSION_KEY = re.compile(
    r"""session_state(?:\.get\(|\[|\.pop\(|\.setdefault\()\s*["']([\w-]+)["']"""
    r"""|["']([\w-]+)["']\s+(?:not\s+)?in\s+st\.session_state"""
    r"""|\bkey\s*=\s*["']([\w-]+)["']"""
)
DEFAULT_KEY = re.compile(r"""^\s+["']([\w-]+)["']\s*:""")  # a key of dashboard.state's defaults


def test_session_keys_shared_between_modules_are_named_once() -> None:
    """A session-state key (or widget key) that two modules use is a constant of dashboard.state, never a string
    literal written in each: a typo would otherwise split one piece of state in two."""
    used: dict[str, set[str]] = {}
    for path in modules("dashboard"):
        for line in path.read_text(encoding="utf-8").splitlines():
            matches = [*SESSION_KEY.finditer(line), *(DEFAULT_KEY.finditer(line) if path.name == "state.py" else [])]
            for match in matches:
                key = next(g for g in match.groups() if g)
                used.setdefault(key, set()).add(str(path.relative_to(REPO)))
    shared = {key: sorted(where) for key, where in used.items() if len(where) > 1}
    assert not shared, f"string keys shared between modules (make each a dashboard.state constant): {shared}"


def test_what_kind_of_example_is_asked_of_the_task() -> None:
    """No module compares an image size with 28, nor a dataset's pairs flag, outside capsnet/data: it asks the
    dataset's `Task` (capsnet.data.tasks) whether a drawing can be its input, whether it is a pair, its size."""
    asked_elsewhere = re.compile(r"[!=]= ?28\b|[<>] ?28\b|\binfo\.pairs\b|dataset_info\([^)]*\)\.pairs")
    for path in modules("capsnet", "dashboard"):
        if path.parent.name == "data":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            assert not asked_elsewhere.search(line), f"{path.relative_to(REPO)}:{number}: ask the task: {line.strip()}"


def test_the_routing_algorithms_share_one_contract_and_import_neither_sibling() -> None:
    """What both routing algorithms share (the bound on r, its check, the backward choice, the float32 guard) lives in
    capsnet/nn/routing.py; neither algorithm imports the other, the configs import no algorithm, and every network
    that redraws its input uses the one decoder of capsnet/nn/decoder.py."""
    nn = REPO / "capsnet" / "nn"
    algorithms = {"dynamic_routing": "capsnet.nn.em_routing", "em_routing": "capsnet.nn.dynamic_routing"}
    for name, sibling in algorithms.items():
        found = imports(nn / f"{name}.py")
        assert "capsnet.nn.routing" in found, name
        assert not any(n.startswith(sibling) for n in found), f"{name} imports {sibling}"
    for config in ("config", "em_capsnet", "cnn"):
        found = imports(nn / f"{config}.py")
        assert not any(n.startswith(("capsnet.nn.dynamic_routing", "capsnet.nn.em_routing.em")) for n in found), config
    assert "capsnet.nn.routing" in imports(nn / "config.py")  # the bound on r, from the contract
    for network in ("capsnet", "em_capsnet"):
        found = imports(nn / f"{network}.py")
        assert "capsnet.nn.decoder.Decoder" in found and "capsnet.nn.capsnet.Decoder" not in found, network
    for path in modules("capsnet", "dashboard"):
        text = path.read_text(encoding="utf-8")
        assert "def check_iterations" not in text or path.name == "routing.py", path
        assert "MAX_ROUTING_ITERATIONS =" not in text or path.name == "routing.py", path


FAMILY_NAMES = {"capsnet", "cnn", "em"}
FAMILY_CLASSES = {"CapsNet", "BaselineCNN", "EMCapsNet", "CapsNetConfig", "CNNConfig", "EMCapsNetConfig",
                  "CapsNetOutput", "CNNOutput", "EMCapsNetOutput"}  # fmt: skip


def family_branches(path: Path) -> list[int]:
    """The lines of `path` that branch on a network's family: a family's name compared (==, !=, in), isinstance or
    issubclass with a family's class, or a read of `.capsules` / `.em` (the flags that once stood for a family)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            found = [s for s in sides if isinstance(s, ast.Constant)]
            found += [e for s in sides if isinstance(s, (ast.Tuple, ast.List, ast.Set)) for e in s.elts]
            if any(isinstance(c, ast.Constant) and c.value in FAMILY_NAMES for c in found):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("isinstance", "issubclass"):
            kinds = node.args[1:2]
            kinds += [e for k in kinds if isinstance(k, ast.Tuple) for e in k.elts]
            if any(getattr(k, "id", getattr(k, "attr", None)) in FAMILY_CLASSES for k in kinds):
                lines.append(node.lineno)
        elif isinstance(node, ast.Attribute) and node.attr in ("capsules", "em") and isinstance(node.ctx, ast.Load):
            lines.append(node.lineno)
    return sorted(lines)


def test_nothing_outside_the_networks_branches_on_a_family() -> None:
    """Callers ask a network what it can do (`capsnet.nn.family`: routing, redraws, scores, margins, parameter
    groups), never which family it is: no family name compared and no isinstance with a family's class in capsnet/
    outside capsnet/nn/, nor in dashboard/ (a page's view for a routing is declared in the page registry, and its
    texts and views are tables keyed by the routing)."""
    for path in modules("capsnet", "dashboard"):
        if path.parent != REPO / "capsnet" / "nn":
            where = family_branches(path)
            assert not where, f"{path.relative_to(REPO)} branches on a family at lines {where}"


def test_the_detector_of_family_branches_finds_each_kind(tmp_path: Path) -> None:
    """The layout rule above sees a family's name compared, an isinstance with a family's class, and the old flags;
    not a question of a capability or a table keyed by the routing."""
    probe = tmp_path / "probe.py"
    probe.write_text(
        'if net.name == "em": pass\nif kind in ("capsnet", "cnn"): pass\nif isinstance(config, EMCapsNetConfig): pass\n'
        "if model.em: pass\nif net.capsules: pass\nif net.routing is None: pass\nview = VIEWS[model.routing]\n",
        encoding="utf-8",
    )
    assert family_branches(probe) == [1, 2, 3, 4, 5]


def test_links_to_a_page_find_the_view_the_navigation_serves() -> None:
    """A page may be served by its view for the chosen model's routing (`PageInfo.views`): every link and switch names
    a page through `dashboard.state.page_path`, never by a page's own `.path` (which is the CapsNet's view)."""
    for path in modules("dashboard"):
        if path.name not in ("pages.py", "state.py", "app.py"):
            found = re.findall(r"\b(?:pages\.[A-Z_]+|page|p|info|step\.page)\.path\b", path.read_text(encoding="utf-8"))
            assert not found, f"{path.relative_to(REPO)}: {found[0]}: use state.page_path(...)"
