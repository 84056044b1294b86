"""The layer check: imports between Ratchet's packages go down the layer order, and no imports go in a circle.

ARCHITECTURE.md "Layers" states the order; :data:`LAYERS` holds it. Every module of the product packages is parsed
(never imported) and every import counts: at module level, inside functions, under ``if TYPE_CHECKING:``, and
``importlib.import_module("x")`` / ``__import__("x")`` with a literal name. (A module named in a table and imported
later by variable, like ``ratchet_cli.main.COMMANDS``, is not seen.) The rules:

- layer: a module imports only its own package or packages in a lower layer (the gateway and the control plane
  never import each other; the CLI and the agents sit on top, apart); product code never imports ``tests`` or
  ``benchmarks``;
- module cycle: no two modules reach each other through imports;
- package cycle: within each package, its children (sub-packages and modules) do not reach each other in a
  circle either, e.g. ``ratchet_assets.night`` -> ``ratchet_assets.governance`` -> ``ratchet_assets.night``;
- sealed: a package of :data:`SEALED` is imported from outside only as itself (``from ratchet_assets.effects
  import EffectLedger``), never through one of its modules (``ratchet_assets.effects.ledger``), by product code,
  tests and benchmarks alike: its modules are private and may move.

Run ``python -m tests.layers`` (``make lint`` does) or tests/test_layers.py (``make test``). Each problem is
one message naming the file and line of the import and the rule it breaks. ``python -m tests.layers --sizes``
first draws the house: each layer, top first, its packages, their sub-packages and own modules with files and
lines, and which packages each imports.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

# Lowest layer first; a package may import only packages whose layer is lower than its own.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("ratchet_stats",),
    ("ratchet_core",),
    ("ratchet_gateway", "ratchet_assets"),
    ("ratchet_cli", "ratchet_agents"),
)
# Test tooling lives in these top-level folders; product code never imports them.
TOOLING = ("tests", "benchmarks")
# Circles known and owned elsewhere, each with why it is allowed for now (none today). The check fails when one of
# them is gone (remove its line then) or grows (a new module joined it).
ALLOWED_CYCLES: dict[frozenset[str], str] = {}
# Packages whose modules are private: code outside them imports the package itself (its __init__ exports the rest).
SEALED: tuple[str, ...] = ("ratchet_assets.effects",)


@dataclass(frozen=True)
class Import:
    """One import in ``source`` (a module's dotted name) of ``target`` (a module of the tree), at path:line."""

    source: str
    target: str
    path: Path
    line: int

    def where(self, root: Path) -> str:
        try:
            return f"{self.path.relative_to(root)}:{self.line}"
        except ValueError:
            return f"{self.path}:{self.line}"


def _module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def find_modules(root: Path, packages: Iterable[str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``: dotted name -> file."""
    modules: dict[str, Path] = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            modules[_module_name(path, root)] = path
    return modules


def _literal_import(call: ast.Call) -> str | None:
    """The module named by ``importlib.import_module("x")`` or ``__import__("x")``, when it is a literal."""
    func = call.func
    named = (isinstance(func, ast.Attribute) and func.attr == "import_module") or (
        isinstance(func, ast.Name) and func.id in ("import_module", "__import__")
    )
    if named and call.args and isinstance(call.args[0], ast.Constant) and isinstance(call.args[0].value, str):
        return call.args[0].value
    return None


def _named(tree: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, int]]:
    """Every dotted name ``module`` imports, with its line.

    ``from x import y`` yields ``x.y`` (a submodule, or a name that resolves to ``x``); relative imports are
    resolved against ``module``'s package.
    """
    package = module.split(".") if is_package else module.split(".")[:-1]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = ".".join(package[: len(package) - (node.level - 1)])
                base = f"{anchor}.{base}" if base else anchor
            for alias in node.names:
                yield (base if alias.name == "*" else f"{base}.{alias.name}"), node.lineno
        elif isinstance(node, ast.Call) and (name := _literal_import(node)):
            yield name, node.lineno


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest module of the tree that ``name`` names (``a.b.Class`` -> ``a.b``), or None if outside it."""
    parts = name.split(".")
    while parts:
        if (candidate := ".".join(parts)) in modules:
            return candidate
        parts.pop()
    return None


def collect_imports(root: Path, packages: Iterable[str]) -> tuple[list[Import], list[str]]:
    """(every import between modules of ``packages``, messages for imports of test tooling)."""
    modules = find_modules(root, packages)
    found: dict[tuple[str, str], Import] = {}
    tooling: list[str] = []
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for name, line in _named(tree, module, path.name == "__init__.py"):
            if name.split(".")[0] in TOOLING:
                tooling.append(
                    f"{path.relative_to(root)}:{line}: layer: {module} imports {name} "
                    f"(test tooling: product code never imports {' or '.join(TOOLING)})"
                )
                continue
            target = _resolve(name, modules)
            if target is not None and target != module:
                found.setdefault((module, target), Import(module, target, path, line))
    return sorted(found.values(), key=lambda i: (i.source, i.target)), sorted(tooling)


def _layer_of(module: str, layers: tuple[tuple[str, ...], ...]) -> tuple[int, str] | None:
    top = module.split(".")[0]
    for rank, names in enumerate(layers):
        if top in names:
            return rank, top
    return None


def layer_violations(imports: Iterable[Import], layers: tuple[tuple[str, ...], ...], root: Path) -> list[str]:
    """Each import that goes sideways or up the layer order, as ``file:line: layer: ...``."""
    order = " < ".join("{" + ", ".join(names) + "}" if len(names) > 1 else names[0] for names in layers)
    problems = []
    for imp in imports:
        source, target = _layer_of(imp.source, layers), _layer_of(imp.target, layers)
        if source is None or target is None or source[1] == target[1] or target[0] < source[0]:
            continue
        way = "sideways" if target[0] == source[0] else "upwards"
        problems.append(
            f"{imp.where(root)}: layer: {imp.source} imports {imp.target} ({way}; {source[1]} may import "
            f"only the layers below its own: {order})"
        )
    return sorted(problems)


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one node (Tarjan's algorithm, iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    nodes = sorted(set(edges) | {t for out in edges.values() for t in out})
    for start in nodes:
        if start in index:
            continue
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        work = [(start, iter(sorted(edges.get(start, ()))))]
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def _describe(kind: str, component: list[str], edges: dict[str, dict[str, Import]], root: Path) -> str:
    members = set(component)
    lines = [
        f"{imp.where(root)}: {kind}: {source} imports {target}"
        for source in component
        for target, imp in sorted(edges.get(source, {}).items())
        if target in members
    ]
    return f"{kind}: {' <-> '.join(component)} import each other (break one of these):\n  " + "\n  ".join(
        lines
    )


def module_cycles(imports: Iterable[Import], root: Path, allowed: Iterable[frozenset[str]] = ()) -> list[str]:
    """Each set of modules that import each other in a circle (but an allowed one), with the imports in it;
    an allowed circle that is gone or changed is a problem too (the allowance is stale)."""
    edges: dict[str, dict[str, Import]] = {}
    for imp in imports:
        edges.setdefault(imp.source, {})[imp.target] = imp
    components = strongly_connected({s: set(out) for s, out in edges.items()})
    allowed = set(allowed)
    problems = [_describe("module cycle", c, edges, root) for c in components if frozenset(c) not in allowed]
    found = {frozenset(c) for c in components}
    problems += [
        f"stale allowance: the cycle {' <-> '.join(sorted(a))} is gone or changed; remove it from ALLOWED_CYCLES"
        for a in sorted(allowed - found, key=sorted)
    ]
    return problems


def package_cycles(imports: Iterable[Import], packages: set[str], root: Path) -> list[str]:
    """Each circle between the children of one package that passes through a sub-package (a circle of plain
    modules is already a module cycle), at every depth."""
    by_parent: dict[str, dict[str, dict[str, Import]]] = {}
    for imp in imports:
        source, target = imp.source.split("."), imp.target.split(".")
        shared = 0
        while shared < min(len(source), len(target)) and source[shared] == target[shared]:
            shared += 1
        # children of the deepest package both sit in; a module and its own package are not two children
        if shared == 0 or shared >= min(len(source), len(target)):
            continue
        a, b = ".".join(source[: shared + 1]), ".".join(target[: shared + 1])
        by_parent.setdefault(".".join(source[:shared]), {}).setdefault(a, {}).setdefault(b, imp)
    problems = []
    for parent, edges in sorted(by_parent.items()):
        for component in strongly_connected({s: set(out) for s, out in edges.items()}):
            if any(child in packages for child in component):
                problems.append(_describe(f"package cycle in {parent}", component, edges, root))
    return problems


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def sealed_violations(root: Path, packages: Iterable[str], sealed: Iterable[str] = SEALED) -> list[str]:
    """Each import, from product code, tests or benchmarks outside a sealed package, of one of its modules."""
    packages = list(packages)
    modules = find_modules(root, packages)
    sealed = [s for s in sealed if s in modules]
    problems = []
    for folder in (*packages, *TOOLING):
        if not (root / folder).is_dir():
            continue
        for path in sorted((root / folder).rglob("*.py")):
            module = _module_name(path, root)
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for name, line in _named(tree, module, path.name == "__init__.py"):
                target = _resolve(name, modules)
                for package in sealed:
                    if (
                        target
                        and target != package
                        and _inside(target, package)
                        and not _inside(module, package)
                    ):
                        problems.append(
                            f"{path.relative_to(root)}:{line}: sealed: {module} imports {target} (a private "
                            f"module of {package}: import its names from {package} itself)"
                        )
    return sorted(problems)


def check(
    root: Path,
    layers: tuple[tuple[str, ...], ...] = LAYERS,
    allowed_cycles: Iterable[frozenset[str]] = ALLOWED_CYCLES,
    sealed: Iterable[str] = SEALED,
) -> list[str]:
    """Every broken rule in the tree under ``root``, one message each; empty when the layers hold."""
    names = [name for row in layers for name in row if (root / name).is_dir()]
    imports, tooling = collect_imports(root, names)
    packages = {m for m, path in find_modules(root, names).items() if path.name == "__init__.py"}
    return (
        layer_violations(imports, layers, root)
        + tooling
        + module_cycles(imports, root, allowed_cycles)
        + package_cycles(imports, packages, root)
        + sealed_violations(root, names, sealed)
    )


@dataclass(frozen=True)
class Part:
    """A package or one of its direct sub-packages (``modules``: the package's own top-level files): its size."""

    name: str
    files: int
    lines: int


def _size(paths: Iterable[Path]) -> tuple[int, int]:
    paths = list(paths)
    return len(paths), sum(len(p.read_text(encoding="utf-8").splitlines()) for p in paths)


def sizes(
    root: Path, layers: tuple[tuple[str, ...], ...] = LAYERS
) -> list[tuple[int, Part, list[Part], list[str]]]:
    """Per package, top layer first: (layer number as ARCHITECTURE.md "Layers" counts, from 0, the package's size, its sub-packages' sizes and the package's
    own modules as ``(modules)``, the packages it imports)."""
    names = [name for row in layers for name in row if (root / name).is_dir()]
    imports, _ = collect_imports(root, names)
    uses: dict[str, set[str]] = {}
    for imp in imports:
        a, b = imp.source.split(".")[0], imp.target.split(".")[0]
        if a != b:
            uses.setdefault(a, set()).add(b)
    out = []
    for rank in range(len(layers) - 1, -1, -1):
        for package in layers[rank]:
            folder = root / package
            if not folder.is_dir():
                continue
            parts = [
                Part(child.name, *_size(sorted(child.rglob("*.py"))))
                for child in sorted(folder.iterdir())
                if child.is_dir() and (child / "__init__.py").is_file()
            ]
            own = sorted(folder.glob("*.py"))
            if own:
                parts.append(Part("(modules)", *_size(own)))
            whole = Part(package, *_size(sorted(folder.rglob("*.py"))))
            out.append((rank, whole, parts, sorted(uses.get(package, ()))))
    return out


def draw_sizes(root: Path, layers: tuple[tuple[str, ...], ...] = LAYERS) -> str:
    """The house drawn by imports: each layer, top first, its packages and their parts with files and lines."""
    lines = []
    total_files = total_lines = 0
    for rank, whole, parts, uses in sizes(root, layers):
        total_files, total_lines = total_files + whole.files, total_lines + whole.lines
        imports = ", ".join(uses) if uses else "nothing of Ratchet"
        lines.append(
            f"layer {rank}  {whole.name:<22}{whole.files:>5} files {whole.lines:>8,} lines  imports {imports}"
        )
        lines += [f"           {'.' + p.name:<20}{p.files:>5} files {p.lines:>8,} lines" for p in parts]
    lines.append(f"{'':9}{'total':<22}{total_files:>5} files {total_lines:>8,} lines")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    show_sizes = "--sizes" in args
    args = [a for a in args if a != "--sizes"]
    root = Path(args[0]) if args else Path(__file__).resolve().parent.parent
    if show_sizes:
        print(draw_sizes(root) + "\n")
    problems = check(root)
    for problem in problems:
        print(problem)
    if problems:
        print(f'\n{len(problems)} layer problem(s); ARCHITECTURE.md "Layers" says which way imports go.')
        return 1
    print(
        "layers hold: every import goes down the layer order, none goes in a circle, and no private module of "
        + ", ".join(SEALED)
        + " is imported from outside it"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
