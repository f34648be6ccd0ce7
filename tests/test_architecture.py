"""The package's shape: no import cycles among its modules (imports inside functions included), the layer rule
of docs/architecture.md (federation, the engine's ground floor, imports none of the packages above it; no cycle
between subpackages), no module over ~400 lines, and at most about ten top-level modules."""
import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "fl_lightning"
CALLBACKS = ROOT / "callbacks"  # installed as fl_lightning.callbacks


def modules() -> dict[str, Path]:
    found = {}
    for base, prefix in ((PACKAGE, "fl_lightning"), (CALLBACKS, "fl_lightning.callbacks")):
        for path in base.rglob("*.py"):
            parts = list(path.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([prefix, *parts])] = path
    return found


def imported(path: Path, name: str, known: dict[str, Path]) -> set[str]:
    """The package's modules that ``path`` imports anywhere in it (a ``from X import Y`` of a submodule Y counts as Y)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base)
    return {t for t in targets if t in known and t != "fl_lightning"}


def test_no_import_cycles():
    known = modules()
    graph = {name: imported(path, name, known) - {name} for name, path in known.items()}
    state, stack, cycles = {}, [], []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == "open":
                cycles.append(stack[stack.index(target):] + [target])
            elif target not in state:
                visit(target)
        stack.pop()
        state[node] = "done"

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles: " + "; ".join(" -> ".join(c) for c in cycles)


# docs/architecture.md, "Layers": top first. A package imports only packages of the layers below its own (imports
# inside functions and import_module("fl_lightning.…") strings included).
LAYERS = (
    ("fl_lightning",),  # the package's public names (fl_lightning/__init__.py, imported on first use)
    ("deploy",),  # Flower: a ServerApp runs the fit through the command line
    ("cli",),  # the fl-lightning command
    ("module",),  # the LightningModule
    ("module_options",),  # its options, resolved and checked
    ("assembly",),  # chooses and builds the fit's parts
    ("runs",),  # what a run is and where it goes
    ("aggregation", "systems", "privacy", "algorithms"),
    ("attacks", "data", "models"),
    ("personalization",),
    ("callbacks",),
    ("compression",),
    ("federation",),  # the engine's ground floor
    ("resolve",),
    ("class_paths", "registry"),
    ("errors",),
)
# The one edge up, declared: `fl-lightning flower-local` is dispatched to deploy.local, imported on use.
DECLARED_UPWARD = {("cli", "deploy")}
KEPT_IMPORT_PATHS = {"fl_lightning.federation.toy"}  # a re-export of a moved module, for existing imports


def package_of(name: str) -> str:
    """fl_lightning.federation.loop → federation; fl_lightning.callbacks.x → callbacks; fl_lightning.module → module."""
    parts = name.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def string_imports(path: Path, known: dict[str, Path]) -> set[str]:
    """Modules named in ``import_module("fl_lightning.…")`` calls: a literal, or an f-string's literal head
    (``f"fl_lightning.runs.{name}"`` → the package runs)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "import_module":
            arg = node.args[0] if node.args else None
            text = arg.value if isinstance(arg, ast.Constant) and isinstance(arg.value, str) else \
                arg.values[0].value if isinstance(arg, ast.JoinedStr) and arg.values and \
                isinstance(arg.values[0], ast.Constant) else ""
            if text.startswith("fl_lightning."):
                found.add(text.rstrip("."))
    return found


def package_graph() -> dict[str, set[str]]:
    known = modules()
    graph: dict[str, set[str]] = {}
    for name, path in known.items():
        if name in KEPT_IMPORT_PATHS:
            continue
        targets = {package_of(t) for t in imported(path, name, known)} | \
            {package_of(t) for t in string_imports(path, known)}
        graph.setdefault(package_of(name), set()).update(targets)
    return {package: targets - {package} for package, targets in graph.items()}


def test_every_package_imports_only_the_layers_below_it():
    layer = {package: depth for depth, packages in enumerate(LAYERS) for package in packages}
    graph = package_graph()
    assert set(graph) <= set(layer), f"packages missing from LAYERS: {sorted(set(graph) - set(layer))}"
    upward = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                    if layer[b] <= layer[a] and (a, b) not in DECLARED_UPWARD)
    assert not upward, upward


def test_the_layer_test_sees_string_imports():
    graph = package_graph()
    assert "deploy" in graph["cli"] and "runs" in graph["cli"]  # import_module("fl_lightning.deploy.local"), f"…runs.{…}"


def test_the_layers_in_the_docs_are_the_tested_ones():
    docs = (ROOT / "docs" / "architecture.md").read_text()
    rule = " → ".join("/".join(f"`{p}`" for p in packages) for packages in LAYERS)
    assert rule in docs, rule


def test_no_cycle_between_subpackages():
    graph = package_graph()
    cycles = sorted(f"{a} <-> {b}" for a in graph for b in graph[a] if a < b and a in graph.get(b, set()))
    assert cycles == ["cli <-> deploy"], cycles  # the declared flower-local dispatch


def test_the_module_imports_at_most_twelve_internal_modules():
    known = modules()
    own = imported(known["fl_lightning.module"], "fl_lightning.module", known)
    assert len(own) <= 12, sorted(own)


def test_the_round_core_names_no_feature():
    """fl_lightning/federation/ learns of features only through its parts and the fit's traits."""
    pattern = re.compile(r"asynchronous|fedbuff|client_dropout|model\.system|__name__ ==")
    found = [f"{path.relative_to(ROOT)}:{i}" for path in (PACKAGE / "federation").rglob("*.py")
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found


def test_no_part_reaches_into_another():
    """No module outside federation/ touches the received sums' private state (``._add``, ``._records``,
    ``._sums``; a subclass uses ``on_added``), none assigns the loop's runner after the loop is built (it is
    passed in), no part decides by a class's name (a trait or ``isinstance`` does), and deploy/ reads none of the
    loop's parts (its transports send what fl_lightning.deploy.protocol makes of the runner's trainer)."""
    private = re.compile(r"\._(add|records|sums)\b|loop\.runner\s*=|type\([^)]*\)\.__name__\s*(==|in\b)")
    found = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}" for path in [*PACKAGE.rglob("*.py"), *CALLBACKS.rglob("*.py")]
             for i, line in enumerate(path.read_text().splitlines(), 1)
             if private.search(line) and not (path.is_relative_to(PACKAGE / "federation") and "type(" not in line)]
    assert not found, found
    loop_state = re.compile(r"\bloop\.(flat|clients|runner|callbacks)\b")  # the transports read the protocol's parts
    deployed = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}" for path in (PACKAGE / "deploy").rglob("*.py")
                for i, line in enumerate(path.read_text().splitlines(), 1) if loop_state.search(line)]
    assert not deployed, deployed
    built = [f"{path.relative_to(ROOT)}:{i}" for path in [*PACKAGE.rglob("*.py"), *CALLBACKS.rglob("*.py")]
             if path.name != "contexts.py" for i, line in enumerate(path.read_text().splitlines(), 1)
             if re.search(r"\bClientContext\(", line)]
    assert not built, built  # one constructor: a ClientContext classmethod per way a context arises



PARTS = ("algorithms", "compression", "aggregation", "attacks", "callbacks", "privacy", "systems", "personalization",
         "deploy")
BASES = {"FLCallback", "Algorithm", "Codec", "Aggregator", "Attack", "Sampler", "ClientRunner", "RoundSchedule"}


def test_no_part_decides_by_another_parts_class():
    """Outside a part's own package, ``isinstance`` names only an extension point's base class, never another part's
    concrete class: a part declares a trait (``HookTraits``, ``Codec.within_norm``) and the reader asks for it."""
    found = []
    for path in [*PACKAGE.rglob("*.py"), *CALLBACKS.rglob("*.py")]:
        own = path.relative_to(ROOT).parts[1] if path.is_relative_to(PACKAGE) else "callbacks"
        tree = ast.parse(path.read_text())
        origin = {alias.asname or alias.name: node.module for node in ast.walk(tree)
                  if isinstance(node, ast.ImportFrom) and node.module and not node.level for alias in node.names}
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "isinstance" and len(node.args) == 2:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                for kind in kinds:
                    name = getattr(kind, "id", "")
                    source = origin.get(name, "").split(".")
                    part = source[1] if source[0] == "fl_lightning" and len(source) > 1 else \
                        "callbacks" if source[0] == "callbacks" else None
                    if part in PARTS and part != own and name not in BASES:
                        found.append(f"{path.relative_to(ROOT)}:{node.lineno}: isinstance(..., {name})")
    assert not found, found

def test_files_stay_small_and_the_top_level_is_short():
    sizes = {path: len(path.read_text().splitlines()) for path in modules().values()}
    assert not [f"{p.relative_to(ROOT)}: {n}" for p, n in sizes.items() if n > 420]
    top_level = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top_level) <= 10, top_level


def test_the_simulation_never_imports_flower():
    """Flower is an optional extra; only fl_lightning.deploy imports it. ``import fl_lightning``
    and a whole ``fit`` (one round of the quickstart's data) run without it, in a fresh process."""
    outside = [name for name, path in modules().items() if not name.startswith("fl_lightning.deploy")
               and any(alias.startswith("flwr") for alias in imported_names(path))]
    assert not outside
    script = ("import sys, fl_lightning\n"
              "from fl_lightning.cli import main\n"
              "assert main(['fit', '--config', sys.argv[1], '--trainer.max_epochs', '1', '--data.num_clients', '4',"
              " '--model.clients_per_round', '2', '--trainer.enable_progress_bar', 'false', '--threads', '1']) == 0\n"
              "assert not [m for m in sys.modules if m.split('.')[0] == 'flwr'], 'flwr imported'\n")
    done = subprocess.run([sys.executable, "-c", script, str(ROOT / "configs" / "quickstart.yaml")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]


def imported_names(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module or "")
    return names


def test_no_comment_names_a_feature_by_its_tracker_number():
    """Comments and names say what a thing is, never which issue added it."""
    pattern = re.compile(r"\bissues? \d+", re.IGNORECASE)
    scripts = [path for folder in ("benchmarks", "tests", "examples", "docs") for path in (ROOT / folder).rglob("*.py")]
    found = [f"{path.relative_to(ROOT)}:{i}" for path in [*modules().values(), *scripts]
             for i, line in enumerate(path.read_text().splitlines(), 1) if pattern.search(line)]
    assert not found, found
