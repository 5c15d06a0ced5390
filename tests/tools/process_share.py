"""How much of the test suite starts processes: lines of test code in functions that start one.

    python tests/tools/process_share.py [--by-file] [TESTS_DIR]

A function "starts a process" if its body calls a process starter (``subprocess.run``/``Popen``/
``check_output``/``call``, ``os.fork``, ``multiprocessing.Process``...) or a function of the test
tree that does (a bare name resolved in its own module or through ``from tests.x import name``,
to a fixed point), or if it takes a pytest fixture that does (as pytest finds
them: the test's module, then the nearest ``conftest.py``). Lines
are source lines of functions (decorators included; a nested def counts once, inside its
parent) over all functions of the test tree; module-level code counts in neither side.

The target (a pyramid, not a diamond): process lines at most 15 % of all function lines.
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Attribute or bare names whose call starts a process, whatever module they are reached through.
STARTERS = frozenset(
    {"Popen", "check_call", "check_output", "fork", "spawnv", "execv", "execvp", "create_subprocess_exec"}
)
# ``run``/``call`` start a process only as ``subprocess.run``/``subprocess.call``.
SUBPROCESS_ATTRS = frozenset({"run", "call"})


@dataclass
class Func:
    key: tuple[Path, str]
    span: range
    calls: set[tuple[Path, str]] = field(default_factory=set)
    params: set[str] = field(default_factory=set)
    fixtures: set[tuple[Path, str]] = field(default_factory=set)  # the fixtures its parameters name, resolved
    direct: bool = False
    fixture: bool = False


def _module_path(root: Path, dotted: str) -> Path | None:
    parts = dotted.split(".")
    if parts[0] != root.name:
        return None
    candidate = root.parent.joinpath(*parts).with_suffix(".py")
    return candidate if candidate.exists() else None


def _imports(root: Path, tree: ast.Module) -> dict[str, tuple[Path, str]]:
    found: dict[str, tuple[Path, str]] = {}
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module:
            path = _module_path(root, node.module)
            if path is not None:
                for alias in node.names:
                    found[alias.asname or alias.name] = (path, alias.name)
    return found


def _is_fixture(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in fn.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute | ast.Name) and getattr(target, "attr", getattr(target, "id", "")) == (
            "fixture"
        ):
            return True
    return False


def _scan(fn: ast.AST, resolve) -> tuple[set[tuple[Path, str]], bool]:
    calls: set[tuple[Path, str]] = set()
    direct = False
    for sub in ast.walk(fn):
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
            # a call or a function passed as a value (``Thread(target=helper)``)
            key = resolve(sub.id)
            if key is not None:
                calls.add(key)
            direct |= sub.id in STARTERS
        elif isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute):
            direct |= sub.func.attr in STARTERS
            if sub.func.attr in SUBPROCESS_ATTRS and isinstance(sub.func.value, ast.Name):
                direct |= sub.func.value.id == "subprocess"
    return calls, direct


def _resolve_fixtures(root: Path, funcs: list[Func], aliases: dict[Path, dict[str, tuple[Path, str]]]) -> None:
    """A parameter names the fixture of its own module (or one it imports), else of the nearest conftest.py."""
    fixtures = {f.key for f in funcs if f.fixture}
    for f in funcs:
        path = f.key[0]
        for name in f.params:
            own = aliases.get(path, {}).get(name, (path, name))
            if own in fixtures:
                f.fixtures.add(own)
                continue
            for folder in path.parents:
                conftest = (folder / "conftest.py", name)
                if conftest in fixtures:
                    f.fixtures.add(conftest)
                    break
                if folder == root.parent:
                    break


def collect(root: Path) -> list[Func]:
    funcs: list[Func] = []
    aliases: dict[Path, dict[str, tuple[Path, str]]] = {}
    for path in sorted(root.rglob("*.py")):
        if "tools" in path.relative_to(root).parts:
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        imported = _imports(root, tree)
        aliases[path] = dict(imported)
        for node in tree.body:  # ``sim = sim_fixture``: a fixture of another module under a local name
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in imported:
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        aliases[path][target.id] = imported[node.value.id]
        local = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}

        def resolve(name: str, path: Path = path, imported=imported, local=local) -> tuple[Path, str] | None:
            if name in local:
                return (path, name)
            return imported.get(name)

        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            calls, direct = _scan(node, resolve)
            params = {a.arg for a in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]}
            funcs.append(
                Func(
                    (path, node.name),
                    range(first, node.end_lineno + 1),
                    calls,
                    params,
                    direct=direct,
                    fixture=_is_fixture(node),
                )
            )
    _resolve_fixtures(root, funcs, aliases)
    return funcs


def starting(funcs: list[Func]) -> set[tuple[Path, str]]:
    """Keys of the test tree's functions that start a process, directly or through others."""
    keys = {f.key for f in funcs if f.direct}
    changed = True
    while changed:
        changed = False
        for f in funcs:
            if f.key not in keys and (f.calls & keys or f.fixtures & keys):
                keys.add(f.key)
                changed = True
    return keys


def share(root: Path) -> tuple[int, int, dict[Path, tuple[int, int]]]:
    """(process lines, all function lines, per file (process, all))."""
    funcs = collect(root)
    keys = starting(funcs)
    all_lines: dict[Path, set[int]] = {}
    proc_lines: dict[Path, set[int]] = {}
    for f in funcs:
        path = f.key[0]
        all_lines.setdefault(path, set()).update(f.span)
        if f.key in keys:
            proc_lines.setdefault(path, set()).update(f.span)
    per_file = {p: (len(proc_lines.get(p, ())), len(lines)) for p, lines in all_lines.items()}
    return sum(p for p, _ in per_file.values()), sum(t for _, t in per_file.values()), per_file


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("root", nargs="?", default=str(Path(__file__).resolve().parents[1]))
    parser.add_argument("--by-file", action="store_true", help="list the files by process lines")
    args = parser.parse_args(argv)
    root = Path(args.root).resolve()
    proc, total, per_file = share(root)
    if args.by_file:
        for path, (p, t) in sorted(per_file.items(), key=lambda kv: -kv[1][0]):
            if p:
                print(f"{p:6d} / {t:6d}  {path.relative_to(root)}")
    print(f"process lines: {proc} of {total} function lines under {root.name}/ = {100 * proc / total:.1f} %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
