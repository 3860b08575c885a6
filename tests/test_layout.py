"""The dependency rule of the layout, checked from the source (``silo/__init__.py`` draws it).

Every ``import`` statement of ``silo``, ``membership_tables``, ``testbed`` and ``benchmarks`` is
parsed (function-level imports and ``TYPE_CHECKING`` blocks included: a type-only import still
ties two modules together for a reader), and the rules below are checked on the resulting
module graph and on the graph of the parts (``silo.wire``, ``silo.work``, ...). A rule that
fails names the importing module, the imported one and, for transitive rules, the chain that
leads there.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("silo", "membership_tables", "testbed", "benchmarks")
BACKEND_MODULES = (
    "membership_tables.sql",
    "membership_tables.zookeeper",
    "membership_tables.consul",
    "membership_tables.dynamodb",
    "membership_tables.memory",
    "membership_tables.registry",
)
DRIVERS = ("grpc", "grpc_health", "sqlalchemy", "psycopg", "pymysql", "kazoo", "consul", "boto3", "botocore", "pyspark")
CLIENT_SIDE = ("silo.client", "silo.work", "silo.spark")
PROTOCOL_AND_RUNTIME = ("silo.membership", "silo.runtime", "silo.cli")

Graph = Mapping[str, frozenset[str]]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """Absolute names imported by ``source`` (``from a import b`` yields ``a.b`` when that is a module)."""
    found: set[str] = set()
    package = module if is_package else module.rpartition(".")[0]

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                found.update(f"{base}.{alias.name}" for alias in child.names)
            visit(child)

    visit(ast.parse(source))
    return found


def build_graph() -> dict[str, frozenset[str]]:
    """Module -> the modules of ``PACKAGES`` and the third-party top-level packages it imports."""
    files = {module_name(path): path for package in PACKAGES for path in (ROOT / package).rglob("*.py")}
    files = {name: path for name, path in files.items() if ".proto." not in f"{name}."}
    graph: dict[str, frozenset[str]] = {}
    for name, path in files.items():
        raw = imports_of(path.read_text(), name, path.name == "__init__.py")
        edges = set()
        for imported in raw:
            if imported.split(".")[0] in PACKAGES:
                # ``from a.b import name``: the edge goes to module ``a.b.name`` if it is one, else to ``a.b``
                while imported and imported not in files and ".proto." not in f"{imported}.":
                    imported = imported.rpartition(".")[0]
                if imported and imported != name and imported in files:
                    edges.add(imported)
            else:
                edges.add(imported.split(".")[0])
        graph[name] = frozenset(edges)
    return graph


def within(module: str, parts: Iterable[str]) -> bool:
    return any(module == part or module.startswith(f"{part}.") for part in parts)


def chain_to(graph: Graph, start: str, forbidden: tuple[str, ...]) -> list[str] | None:
    """The import chain from ``start`` to a module inside ``forbidden``, or None."""
    parents: dict[str, str | None] = {start: None}
    frontier = [start]
    while frontier:
        current = frontier.pop(0)
        for imported in sorted(graph.get(current, ())):
            if imported in parents:
                continue
            parents[imported] = current
            if within(imported, forbidden):
                path = [imported]
                step: str | None = current
                while step is not None:
                    path.append(step)
                    step = parents[step]
                return path[::-1]
            frontier.append(imported)
    return None


def cycles(graph: Graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph.get(node, ()):
            if nxt not in graph:
                continue
            if nxt not in index:
                connect(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return found


@dataclass(frozen=True)
class Violation:
    rule: str
    chain: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.rule}: {' -> '.join(self.chain)}"


def violations(graph: Graph) -> list[Violation]:
    """Every broken rule of the layout in ``graph``."""
    found: list[Violation] = []

    def direct(rule: str, sources: tuple[str, ...], forbidden: tuple[str, ...]) -> None:
        for module, imported in sorted(graph.items()):
            if within(module, sources):
                found.extend(Violation(rule, (module, i)) for i in sorted(imported) if within(i, forbidden))

    direct("membership_tables never imports silo", ("membership_tables",), ("silo",))
    direct(
        "the product never imports the test bench, the benchmarks or the tests",
        ("silo", "membership_tables"),
        ("testbed", "benchmarks", "tests"),
    )
    direct("the test bench and the benchmarks never import the tests", ("testbed", "benchmarks"), ("tests",))
    direct("the test bench never imports the benchmarks", ("testbed",), ("benchmarks",))
    direct(
        "the membership protocol imports no backend, driver, wire, client or runtime",
        ("silo.membership",),
        (*BACKEND_MODULES, *DRIVERS, "silo.wire", "silo.client", "silo.work", "silo.spark", "silo.runtime", "silo.cli"),
    )
    direct(
        "the wire imports no work, runtime, client or CLI",
        ("silo.wire",),
        ("silo.work", "silo.runtime", "silo.client", "silo.cli"),
    )
    direct(
        "observability imports no wire, runtime, client or CLI",
        ("silo.observability",),
        ("grpc", "silo.wire", "silo.runtime", "silo.client", "silo.work", "silo.spark", "silo.cli"),
    )
    direct(
        "the dashboard imports no wire, runtime, client or CLI",
        ("silo.dashboard",),
        ("grpc", "silo.wire", "silo.runtime", "silo.client", "silo.work", "silo.spark", "silo.cli"),
    )
    direct(
        "the membership protocol imports no exporter", ("silo.membership",), ("prometheus_client", "silo.observability")
    )
    direct("the runtime imports no client, Spark or CLI", ("silo.runtime",), ("silo.client", "silo.spark", "silo.cli"))
    for module in sorted(graph):
        if within(module, CLIENT_SIDE):
            chain = chain_to(graph, module, PROTOCOL_AND_RUNTIME)
            if chain is not None:
                found.append(Violation("client, work and Spark never load the protocol or the runtime", tuple(chain)))
    for module, imported in sorted(graph.items()):
        in_product = within(module, ("silo", "membership_tables"))
        if in_product and not within(module, ("silo.cli",)) and module != "silo.__main__":
            found.extend(
                Violation("nothing imports the CLI", (module, i)) for i in imported if within(i, ("silo.cli",))
            )
    for module, imported in sorted(graph.items()):
        found.extend(
            Violation("nothing outside a package imports its private modules", (module, i))
            for i in sorted(imported)
            if (owner := private_owner(i)) is not None and not within(module, (owner,))
        )
    found.extend(Violation("import cycle", tuple(cycle)) for cycle in cycles(graph))
    found.extend(Violation("parts import each other", tuple(cycle)) for cycle in cycles(parts_graph(graph)))
    return found


def private_owner(module: str) -> str | None:
    """The package a private module (a leading underscore: ``membership_tables.consul._keys``) belongs
    to, whose modules alone may import it; None for a public module. The tests may import any."""
    names = module.split(".")
    for index, name in enumerate(names):
        if name.startswith("_") and not name.startswith("__"):
            return ".".join(names[:index])
    return None


def part_of(module: str) -> str:
    """The part a module belongs to: ``silo.<part>`` (each top module of ``silo`` is one) or its top package."""
    names = module.split(".")
    return ".".join(names[:2]) if names[0] == "silo" else names[0]


def parts_graph(graph: Graph) -> dict[str, frozenset[str]]:
    """The graph of the parts: one part imports another if any of its modules imports one of the other's."""
    edges: dict[str, set[str]] = {}
    for module, imported in graph.items():
        edges.setdefault(part_of(module), set()).update(
            part_of(target) for target in imported if target in graph and part_of(target) != part_of(module)
        )
    return {part: frozenset(targets) for part, targets in edges.items()}


def test_the_layout_keeps_its_dependency_rule() -> None:
    broken = violations(build_graph())
    assert not broken, "layout rule broken (see silo/__init__.py):\n" + "\n".join(map(str, broken))


def test_the_graph_sees_real_imports() -> None:
    graph = build_graph()
    assert "silo.membership.snapshot" in graph["silo.membership.table_manager"]
    assert "silo.wire.codec" in graph["silo.wire.server"]
    assert "grpc" in graph["silo.wire.server"]
    assert "silo.client.membership_client" in graph["silo.spark.jobs"]  # a function-level import counts


@pytest.mark.parametrize(
    ("graph", "rule"),
    [
        ({"silo.membership.votes": frozenset({"grpc"})}, "the membership protocol imports no backend"),
        (
            {
                "silo.membership.votes": frozenset({"membership_tables.sql.table"}),
                "membership_tables.sql.table": frozenset(),
            },
            "the membership protocol imports no backend",
        ),
        (
            {"membership_tables.model": frozenset({"silo.errors"}), "silo.errors": frozenset()},
            "membership_tables never",
        ),
        (
            {
                "silo.spark.jobs": frozenset({"silo.work.routing"}),
                "silo.work.routing": frozenset({"silo.membership.options"}),
                "silo.membership.options": frozenset(),
            },
            "client, work and Spark never load",
        ),
        ({"silo.runtime.silo": frozenset({"silo.cli.status"}), "silo.cli.status": frozenset()}, "nothing imports"),
        (
            {"silo.wire.server": frozenset({"silo.work.execution"}), "silo.work.execution": frozenset()},
            "the wire imports no work",
        ),
        ({"silo.cli.a": frozenset({"silo.cli.b"}), "silo.cli.b": frozenset({"silo.cli.a"})}, "import cycle"),
        (
            {
                "silo.wire.server": frozenset({"silo.work.execution"}),
                "silo.work.execution": frozenset(),
                "silo.work.client": frozenset({"silo.wire.codec"}),
                "silo.wire.codec": frozenset(),
            },
            "parts import each other",
        ),
        ({"benchmarks.detection": frozenset({"tests"})}, "the test bench and the benchmarks never import the tests"),
        ({"testbed.net_cluster": frozenset({"tests"})}, "the test bench and the benchmarks never import the tests"),
        ({"testbed.net_cluster": frozenset({"benchmarks.common"})}, "the test bench never imports the benchmarks"),
        ({"silo.runtime.silo": frozenset({"testbed.scrape"})}, "the product never imports the test bench"),
        (
            {
                "silo.runtime.process": frozenset({"membership_tables.consul._keys"}),
                "membership_tables.consul._keys": frozenset(),
            },
            "nothing outside a package imports its private modules",
        ),
        (
            {"benchmarks.tables": frozenset({"silo.runtime._roles"}), "silo.runtime._roles": frozenset()},
            "nothing outside a package imports its private modules",
        ),
    ],
)
def test_a_broken_rule_is_reported(graph: dict[str, frozenset[str]], rule: str) -> None:
    assert any(str(v).startswith(rule) for v in violations(graph)), violations(graph)


def test_private_modules_are_seen_and_may_be_imported_inside_their_package() -> None:
    graph = build_graph()
    assert "membership_tables.consul._keys" in graph["membership_tables.consul._table"]
    assert "silo.runtime._roles" in graph["silo.runtime.silo"]
    assert private_owner("membership_tables.dynamodb._items") == "membership_tables.dynamodb"
    assert private_owner("silo.runtime.silo") is None
    assert private_owner("silo.__main__") is None
    inside = {"membership_tables.consul._table": frozenset({"membership_tables.consul._keys"})}
    assert not [v for v in violations(inside) if v.rule.startswith("nothing outside")]


def test_the_parts_export_the_names_users_import() -> None:
    """The names the README and the docs import from a part, not from its modules."""
    moved = {
        "silo.client": ["MembershipClient", "AsyncMembershipClient", "ClusterView", "ViewUpdate"],
        "silo.spark": ["route_to_silos", "read_view", "local_session", "encode_payload"],
        "silo.work": ["HandlerRegistry", "load_handler"],
        "silo.runtime": ["Silo", "assemble", "run_process", "SiloProcessConfig"],
        "silo.cli": ["main"],
    }
    for module_path, names in moved.items():
        module = importlib.import_module(module_path)
        missing = [name for name in names if not hasattr(module, name)]
        assert not missing, f"{module_path} lost {missing}"


def test_the_top_of_silo_holds_only_what_every_part_shares() -> None:
    top = sorted(path.stem for path in (ROOT / "silo").glob("*.py") if not path.stem.startswith("__"))
    assert len(top) <= 4, f"modules at the top of silo/ (at most 4; put the rest in a part): {top}"


def test_every_part_says_what_it_may_import() -> None:
    for part in ("membership", "wire", "client", "work", "spark", "runtime", "cli"):
        doc = importlib.import_module(f"silo.{part}").__doc__ or ""
        assert "import" in doc, f"silo/{part}/__init__.py should say what it may import"


def test_every_public_package_declares_its_public_names() -> None:
    packages = sorted(
        module_name(path)
        for package in ("silo", "membership_tables")
        for path in (ROOT / package).rglob("__init__.py")
        if ".proto" not in f"{module_name(path)}." and not any(part.startswith("_") for part in path.parts[-3:-1])
    )
    assert "silo.membership" in packages
    undeclared = [name for name in packages if not hasattr(importlib.import_module(name), "__all__")]
    assert not undeclared, f"packages without __all__: {undeclared}"
    for name in packages:
        module = importlib.import_module(name)
        missing = [exported for exported in module.__all__ if not hasattr(module, exported)]
        assert not missing, f"{name}.__all__ names what it does not define: {missing}"
