"""The layering, read from the source with `ast` (every import, those inside
functions too): algorithms/ imports no framework, its layers import only the layers
below them and no module of it is part of an import cycle; a wrapper imports no
sibling wrapper; the framework registry names real scripts and packages, and is
what the commands offer; and collecting tests/ imports no framework the main env may
lack (pycaffe before `make caffe`, the Theano family)."""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path


from algorithms.registry.frameworks import FRAMEWORKS, NAMES
from algorithms.paths import REPO_ROOT

ROOT = Path(REPO_ROOT)
FRAMEWORK_MODULES = {"tensorflow", "torch", "jax", "jaxlib", "keras", "theano", "lasagne", "caffe"}
# what the main env has only after `make caffe` (pycaffe), or never (.venv-legacy's Theano family)
NOT_IN_THE_MAIN_ENV = {"caffe", "theano", "lasagne"}
# besides the frameworks, what a wrapper may import from outside the project:
# numpy (the arrays it hands to algorithms/) and google.protobuf (Caffe's net format)
WRAPPER_THIRD_PARTY = {"numpy", "google"}
SHARED_PACKAGES = {"algorithms", "backends"}
# algorithms/'s layers, bottom up: a module imports from its own layer or one listed
# before it, never from one after it; "" is the foundation (algorithms/*.py). Layers in
# one tuple sit side by side (analysis/ and localisation/; studies/, bench/ and
# interconnect/ at the top) and import neither each other.
LAYERS = (
    "",
    "dataset",
    "network",
    "reference",
    "machine",
    "config",
    "contract",
    "session",
    "run",
    "registry",
    ("analysis", "localisation"),
    ("studies", "bench", "interconnect"),
)
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in (names if isinstance(names, tuple) else (names,))}


def imports(path: Path) -> list:
    """(line, level, module) for every import in the file; `from .x import y` gives
    (line, 1, "x") and `from . import y` gives (line, 1, "y")."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, 0, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.module:
                found.append((node.lineno, node.level, node.module))
            else:
                found += [(node.lineno, node.level, alias.name) for alias in node.names]
    return found


def where(path: Path, line: int) -> str:
    return f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{line}"


def algorithms_modules() -> list:
    return sorted((ROOT / "algorithms").rglob("*.py"))


def module_name(path: Path) -> str:
    """algorithms/session/run_session.py -> algorithms.session.run_session; a package's __init__.py -> the package."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute(path: Path, level: int, module: str) -> str:
    """An import as the absolute module name it loads (relative ones resolved)."""
    if level == 0:
        return module
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    return ".".join(package[: len(package) - (level - 1)] + [module])


def layer_of(module: str):
    """The layer of an algorithms module (its subpackage, or "" for the foundation), None outside algorithms."""
    parts = module.split(".")
    if parts[0] != "algorithms":
        return None
    return parts[1] if len(parts) > 1 and parts[1] in RANK else ""


def test_every_algorithms_subpackage_is_a_known_layer_with_a_docstring():
    packages = sorted(p.parent.name for p in (ROOT / "algorithms").glob("*/__init__.py"))
    assert set(packages) == set(RANK) - {""}, "algorithms/ subpackages and LAYERS differ"
    for name in ["", *packages]:
        init = ROOT / "algorithms" / name / "__init__.py"
        assert ast.get_docstring(ast.parse(init.read_text())), f"{init.relative_to(ROOT)} says what lives there"


def wrong_way_imports(paths: list) -> list:
    """'file:line: layer imports module (layer)' for every import of a layer at or above the importer's."""
    offending = []
    for path in paths:
        here = layer_of(module_name(path))
        for line, level, module in imports(path):
            target = absolute(path, level, module)
            there = layer_of(target)
            if there is not None and there != here and RANK[there] >= RANK[here]:
                offending.append(
                    f"{where(path, line)}: {here or 'foundation'} imports {target} ({there or 'foundation'})"
                )
    return offending


def test_algorithms_layers_import_only_downward():
    offending = wrong_way_imports(algorithms_modules())
    assert not offending, "an algorithms/ layer imports one at or above it:\n" + "\n".join(offending)


def test_the_layer_check_sees_a_wrong_way_import():
    module = ROOT / "algorithms" / "network" / "networks.py"
    assert absolute(module, 2, "session.run_session") == "algorithms.session.run_session"
    assert absolute(module, 1, "layers") == "algorithms.network.layers"
    assert absolute(module, 2, "dataset.data") == "algorithms.dataset.data"
    assert [layer_of(m) for m in ("algorithms.session.run_session", "algorithms.errors", "algorithms", "numpy")] == [
        "session",
        "",
        "",
        None,
    ]
    assert RANK["run"] > RANK["reference"] > RANK["network"] > RANK["dataset"]
    assert RANK["studies"] == RANK["bench"] == RANK["interconnect"]


def test_algorithms_imports_no_framework():
    offending = [
        f"{where(path, line)}: {module}"
        for path in algorithms_modules()
        for line, level, module in imports(path)
        if level == 0 and module.split(".")[0] in FRAMEWORK_MODULES
    ]
    assert not offending, "algorithms/ must not import a framework:\n" + "\n".join(offending)


def wrapper_packages() -> list:
    return sorted(path.parent.name for path in ROOT.glob("*_wrapper/__init__.py"))


def test_a_wrapper_imports_only_itself_algorithms_backends_the_stdlib_and_frameworks():
    allowed_outside = SHARED_PACKAGES | FRAMEWORK_MODULES | WRAPPER_THIRD_PARTY | set(sys.stdlib_module_names)
    offending = []
    for package in wrapper_packages():
        for path in sorted((ROOT / package).rglob("*.py")):
            depth = len(path.relative_to(ROOT / package).parts) - 1  # how far a relative import may climb
            for line, level, module in imports(path):
                if level > depth + 1:
                    offending.append(f"{where(path, line)}: {'.' * level}{module} (leaves {package})")
                elif level == 0 and module.split(".")[0] not in allowed_outside | {package}:
                    offending.append(f"{where(path, line)}: {module}")
    assert not offending, (
        "a wrapper imports outside itself, algorithms, backends, the stdlib and frameworks:\n" + "\n".join(offending)
    )


def test_backends_import_no_wrapper():
    """backends/ is the wrappers' shared home: it may import frameworks and algorithms/, never a wrapper."""
    offending = [
        f"{where(path, line)}: {module}"
        for path in sorted((ROOT / "backends").glob("*.py"))
        for line, level, module in imports(path)
        if level == 0 and module.split(".")[0].endswith("_wrapper")
    ]
    assert (ROOT / "backends" / "__init__.py").exists()
    assert not offending, "backends/ must not import a wrapper:\n" + "\n".join(offending)


def project_top_names() -> set:
    """The names an import of the project starts with: its packages and its top-level modules."""
    return {path.parent.name for path in ROOT.glob("*/__init__.py")} | {path.stem for path in ROOT.glob("*.py")}


def scripts_imports() -> tuple:
    """('file:line: module') for (algorithms/ modules outside interconnect/ that import scripts/,
    scripts/ modules that import the project beyond scripts/), and how many imports of
    scripts/ interconnect/ makes."""
    outside, interconnect = [], 0
    for path in algorithms_modules():
        for line, level, module in imports(path):
            if level == 0 and module.split(".")[0] == "scripts":
                if layer_of(module_name(path)) == "interconnect":
                    interconnect += 1
                else:
                    outside.append(f"{where(path, line)}: {module}")
    project = project_top_names() - {"scripts"}
    importing_project = [
        f"{where(path, line)}: {module}"
        for path in sorted((ROOT / "scripts").glob("*.py"))
        for line, level, module in imports(path)
        if level == 0 and module.split(".")[0] in project
    ]
    return outside, importing_project, interconnect


def test_only_interconnect_imports_scripts_and_scripts_import_nothing_of_the_project():
    """scripts/'s network plumbing (the rehearsal cluster, the delay line, ping) imports nothing
    of the project, so it sits under algorithms/ as the standard library does; of algorithms/,
    only interconnect/, the studies that run on the cluster, uses it."""
    outside, importing_project, interconnect = scripts_imports()
    assert interconnect, "the check should see interconnect/'s imports of scripts/"
    assert not outside, "an algorithms/ layer besides interconnect/ imports scripts/:\n" + "\n".join(outside)
    assert not importing_project, "scripts/ imports the project:\n" + "\n".join(importing_project)


def import_graph() -> dict:
    """algorithms module path (session/run_session) -> {(module it imports, line)}, for imports of
    algorithms/ modules; `from algorithms.run import tuning` imports run/tuning."""
    paths = {module_name(path): path for path in algorithms_modules()}
    graph = {}
    for name, path in paths.items():
        loaded = modules_loaded(path, ast.walk(ast.parse(path.read_text(), str(path))))
        graph[name] = {(target, line) for line, target in loaded if target in paths}
    return {_short(name): {(_short(t), line) for t, line in edges if t != name} for name, edges in graph.items()}


def modules_loaded(path: Path, nodes) -> list:
    """(line, absolute module name) for every module the imports among `nodes` may load:
    `from a.b import c` gives a.b and a.b.c (c may be a module or a name in a.b)."""
    loaded = []
    for node in nodes:
        if isinstance(node, ast.Import):
            loaded += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = absolute(path, node.level, node.module or "").rstrip(".")
            loaded += [(node.lineno, module) for module in [base] + [f"{base}.{alias.name}" for alias in node.names]]
    return loaded


def _short(module: str) -> str:
    """algorithms.session.run_session -> session/run_session (a package -> its __init__)."""
    return "/".join(module.split(".")[1:]) or "__init__"


def find_cycle(graph: dict):
    """One import cycle as [a, b, ..., a] with the importing lines, or None."""
    state = {}  # name -> "open" while on the path, "done" after
    path = []

    def visit(name):
        state[name] = "open"
        path.append(name)
        for target, line in sorted(graph.get(name, ())):
            if state.get(target) == "open":
                cycle = path[path.index(target) :] + [target]
                return [
                    f"algorithms/{a}.py imports {b} (line {next(l for t, l in graph[a] if t == b)})"
                    for a, b in zip(cycle, cycle[1:])
                ]
            if target not in state:
                found = visit(target)
                if found:
                    return found
        path.pop()
        state[name] = "done"
        return None

    for name in sorted(graph):
        if name not in state:
            found = visit(name)
            if found:
                return found
    return None


def test_no_algorithms_module_is_part_of_an_import_cycle():
    graph = import_graph()
    assert graph["analysis/compare"] and graph["studies/suite"], "the graph should see the imports"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle:\n" + "\n".join(cycle)


def test_find_cycle_names_a_cycle():
    assert find_cycle({"a": {("b", 3)}, "b": {("c", 5)}, "c": {("a", 7)}}) == [
        "algorithms/a.py imports b (line 3)",
        "algorithms/b.py imports c (line 5)",
        "algorithms/c.py imports a (line 7)",
    ]
    assert find_cycle({"a": {("b", 1)}, "b": set(), "c": {("a", 2), ("b", 4)}}) is None


def test_the_registry_names_real_scripts_and_packages_once():
    assert len(set(NAMES)) == len(NAMES) == len(FRAMEWORKS)
    for framework in FRAMEWORKS:
        assert (ROOT / framework.script).is_file(), framework.script
        assert (ROOT / framework.package / "__init__.py").is_file(), framework.package
        assert framework.venv in ("main", "legacy"), framework.name
        assert os.path.basename(framework.python).startswith("python"), framework.python


def test_the_commands_offer_exactly_the_registry_in_its_order():
    from algorithms.bench import benchmark
    from algorithms.registry import capabilities
    from algorithms.studies import drift, suite

    assert suite.parse_suite_args([])[0] == list(NAMES)
    assert benchmark.parse_args([])[1] == list(NAMES)
    assert drift.parse_args([])[0] == list(NAMES)
    assert [row[0] for row in capabilities.capabilities()] == list(NAMES)


# what a framework helper must not load: the flags, the entry point, the session, the loops
RUN_CORE = ("config/run_config", "run/entry", "session/run_session", "run/loop")


def algorithms_reached(starts: set, graph: dict) -> set:
    """Every algorithms module (session/run_session form) that importing `starts` loads, transitively."""
    reached, todo = set(), list(starts)
    while todo:
        name = todo.pop()
        if name in graph and name not in reached:
            reached.add(name)
            todo += [target for target, _ in graph[name]]
    return reached


def backends_algorithms_imports() -> set:
    """The algorithms modules backends/ imports (session/run_session form), `from algorithms.machine import x`
    as machine/x too."""
    found = set()
    for path in sorted((ROOT / "backends").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            found |= {_short(name) for name in names if name.split(".")[0] == "algorithms"}
    return found


def test_backends_load_no_run_core_and_no_benchmark_from_algorithms():
    """backends/ is loaded in every framework process by the wrappers' own modules: what it takes
    from algorithms/ is small pure helpers (tables.py's shape_text), never the run core nor the
    benchmark's probe, which loads all of it."""
    graph = import_graph()
    reached = algorithms_reached(backends_algorithms_imports(), graph)
    assert "tables" in reached, "the check should see backends/'s imports"
    heavy = sorted(module for module in reached if module in RUN_CORE or module.startswith("bench/"))
    assert not heavy, f"backends/ loads {', '.join(heavy)} of algorithms/"
    assert algorithms_reached({"tables"}, graph) == {"tables"}, "tables.py imports nothing of the project"


def test_the_reach_check_sees_the_probe_load_the_run_core():
    assert set(RUN_CORE) <= algorithms_reached({"run/probe"}, import_graph())


def files_run_by_importing(module: str) -> list:
    """The project's files `import module` runs: each package's __init__.py, then the module."""
    parts, files = module.split("."), []
    for end in range(1, len(parts) + 1):
        base = ROOT.joinpath(*parts[:end])
        found = [path for path in (base / "__init__.py", base.with_suffix(".py")) if path.is_file()]
        if not found:
            break
        files.append(found[0])
    return files


def absent_frameworks_imported(path: Path, seen: set) -> list:
    """'file:line: module' for every import of a NOT_IN_THE_MAIN_ENV framework that importing
    `path` runs: its module-level imports, followed through the project's own modules."""
    if path in seen:
        return []
    seen.add(path)
    found = []
    # module level only: a test that imports a framework inside itself is collected without it
    for line, module in modules_loaded(path, ast.parse(path.read_text(), str(path)).body):
        if module.split(".")[0] in NOT_IN_THE_MAIN_ENV:
            found.append(f"{where(path, line)}: {module}")
        for file in files_run_by_importing(module):
            found += absent_frameworks_imported(file, seen)
    return found


def test_collecting_the_main_envs_tests_imports_no_framework_it_may_lack():
    """`make test-fast` builds neither pycaffe nor .venv-legacy, and pytest imports every
    file of tests/ (tests/legacy/ aside) to collect it: a test that needs Caffe or Theano
    imports it inside itself."""
    seen, offending = set(), []
    for path in sorted((ROOT / "tests").glob("*.py")):
        offending += absent_frameworks_imported(path, seen)
    assert not offending, "imported when pytest collects tests/:\n" + "\n".join(offending)


def test_the_collection_check_follows_the_projects_modules_to_a_framework(tmp_path):
    probe = tmp_path / "test_probe.py"
    probe.write_text("import numpy\nfrom caffe_wrapper.model import build_model\n\n\ndef test():\n    import theano\n")
    found = absent_frameworks_imported(probe, set())
    # through caffe_wrapper/model.py's own module-level import; theano, imported inside a test, is not collected
    assert found and all(line.startswith("caffe_wrapper/model.py:") and ": caffe.proto" in line for line in found), (
        found
    )
