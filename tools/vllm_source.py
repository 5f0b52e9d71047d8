"""A static index of a vLLM source tree: modules, classes, members and signatures via ``ast``.

Nothing is imported, so it reads trees that are not installed (an extracted wheel, a git
checkout of vLLM's main branch) and modules that need CUDA to import. ``VLLM_SRC_ENV``
names a directory holding ``vllm/``; unset, the installed vllm is read. A checkout has no
``vllm/_version.py`` (setuptools-scm writes it at build time): ``VLLM_LABEL_ENV`` then
names the tree, e.g. ``main@055e47c``.
"""

from __future__ import annotations

import ast
import copy
import hashlib
import importlib.util
import os
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

VLLM_SRC_ENV = "FROZEN_KV_MTP_VLLM_SRC"
VLLM_LABEL_ENV = "FROZEN_KV_MTP_VLLM_LABEL"

FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef
#: ``__version__ = "0.33.0"`` (or ``version: str = ...``) in vllm/_version.py
_VERSION = re.compile(r"""version\s*(?::\s*str\s*)?=\s*['"]([^'"]+)['"]""")


def vllm_root() -> Path:
    """The directory holding the ``vllm`` package: ``$FROZEN_KV_MTP_VLLM_SRC`` or installed."""
    env = os.environ.get(VLLM_SRC_ENV)
    if env:
        return Path(env)
    spec = importlib.util.find_spec("vllm")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"vllm is not installed; set {VLLM_SRC_ENV}")
    return Path(next(iter(spec.submodule_search_locations))).parent


@dataclass(frozen=True)
class ClassInfo:
    module: str
    name: str
    node: ast.ClassDef

    @property
    def path(self) -> str:
        return f"{self.module}.{self.name}"


@dataclass(frozen=True)
class Member:
    """Where a class attribute is defined: a def, a class-level assignment or ``self.x =``."""

    owner: ClassInfo
    kind: str  # "method" | "class_attr" | "instance_attr"
    node: ast.AST


@dataclass(frozen=True)
class Signature:
    positional: tuple[str, ...]  # after self/cls for methods
    kwonly: tuple[str, ...]
    n_required_positional: int
    required_kwonly: tuple[str, ...]
    varargs: bool
    varkw: bool

    def names(self) -> set[str]:
        return set(self.positional) | set(self.kwonly)

    def call_problems(self, n_positional: int, keywords: set[str], star: bool) -> list[str]:
        """Why a call with these arguments would not bind (``star``: it passes *args/**kw)."""
        problems = []
        if n_positional > len(self.positional) and not self.varargs:
            problems.append(f"{n_positional} positional arguments, takes {len(self.positional)}")
        unknown = keywords - self.names()
        if unknown and not self.varkw:
            problems.append(f"no parameter(s) {sorted(unknown)}")
        if not star:
            given = set(self.positional[:n_positional]) | keywords
            missing = [p for p in self.positional[: self.n_required_positional] if p not in given]
            missing += [p for p in self.required_kwonly if p not in keywords]
            if missing:
                problems.append(f"required parameter(s) {missing} not passed")
        return problems


def signature(fn: FunctionNode, is_method: bool = True) -> Signature:
    a = fn.args
    positional = [p.arg for p in (*a.posonlyargs, *a.args)]
    n_defaults = len(a.defaults)
    decorators = {d.id for d in fn.decorator_list if isinstance(d, ast.Name)}
    drop = 1 if is_method and "staticmethod" not in decorators and positional else 0
    required = len(positional) - n_defaults - drop
    return Signature(
        positional=tuple(positional[drop:]),
        kwonly=tuple(p.arg for p in a.kwonlyargs),
        n_required_positional=max(required, 0),
        required_kwonly=tuple(
            p.arg for p, d in zip(a.kwonlyargs, a.kw_defaults, strict=True) if d is None
        ),
        varargs=a.vararg is not None,
        varkw=a.kwarg is not None,
    )


def _strip_docstrings(node: ast.AST) -> ast.AST:
    node = copy.deepcopy(node)
    for n in ast.walk(node):
        body = getattr(n, "body", None)
        if (
            isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            n.body = body[1:] or [ast.Pass()]
    return node


def normalised_source(fn: FunctionNode) -> str:
    """The method as code only: comments, docstrings and formatting dropped."""
    return ast.unparse(_strip_docstrings(fn))


def source_sha256(fn: FunctionNode) -> str:
    return hashlib.sha256(normalised_source(fn).encode()).hexdigest()


def _top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """Module-level statements, descending into if/try/with blocks (not defs)."""
    out: list[ast.stmt] = []
    for stmt in body:
        out.append(stmt)
        if isinstance(stmt, (ast.If, ast.Try, ast.With)):
            for block in ("body", "orelse", "finalbody", "handlers"):
                for sub in getattr(stmt, block, []):
                    out.extend(
                        _top_level(sub.body if isinstance(sub, ast.ExceptHandler) else [sub])
                    )
    return out


def _targets(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.Assign):
        names = []
        for t in stmt.targets:
            elts = t.elts if isinstance(t, ast.Tuple) else [t]
            names += [e.id for e in elts if isinstance(e, ast.Name)]
        return names
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


class VllmSource:
    """One vLLM source tree, read statically."""

    def __init__(self, root: Path | None = None) -> None:
        self.root = Path(root) if root is not None else vllm_root()
        if not (self.root / "vllm" / "__init__.py").is_file():
            raise RuntimeError(f"{self.root} holds no vllm package")
        self._trees: dict[str, ast.Module | None] = {}

    @property
    def version(self) -> str:
        """``X.Y.Z`` of the tree (local suffixes such as ``+cpu`` dropped), or for a
        tree without ``_version.py`` (a git checkout, whose version.py says "dev") the
        label in ``$FROZEN_KV_MTP_VLLM_LABEL``."""
        path = self.root / "vllm" / "_version.py"
        m = _VERSION.search(path.read_text()) if path.is_file() else None
        if m:
            return re.split(r"[+]", m.group(1))[0]
        label = os.environ.get(VLLM_LABEL_ENV)
        if label:
            return label
        raise RuntimeError(
            f"no vllm/_version.py under {self.root} (a checkout?): set {VLLM_LABEL_ENV}"
        )

    # ---- modules ---------------------------------------------------------------

    def module_file(self, module: str) -> Path | None:
        base = self.root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        return None

    def tree(self, module: str) -> ast.Module | None:
        if module not in self._trees:
            path = self.module_file(module)
            self._trees[module] = ast.parse(path.read_text()) if path else None
        return self._trees[module]

    def _absolute(self, module: str, node: ast.ImportFrom) -> str:
        if not node.level:
            return node.module or ""
        is_pkg = self.module_file(module) == self.root.joinpath(*module.split("."), "__init__.py")
        parts = module.split(".")[: len(module.split(".")) - node.level + (1 if is_pkg else 0)]
        return ".".join([*parts, *([node.module] if node.module else [])])

    @cache  # noqa: B019 - one index per tree, kept for the process
    def bindings(self, module: str) -> dict[str, tuple[str, ast.AST]]:
        """Top-level names of ``module``: name -> ("def"|"class"|"assign", node) or
        ("from:<module>:<name>", node) for imports."""
        tree = self.tree(module)
        out: dict[str, tuple[str, ast.AST]] = {}
        if tree is None:
            return out
        for stmt in _top_level(tree.body):
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[stmt.name] = ("def", stmt)
            elif isinstance(stmt, ast.ClassDef):
                out[stmt.name] = ("class", stmt)
            elif isinstance(stmt, ast.ImportFrom):
                src = self._absolute(module, stmt)
                for alias in stmt.names:
                    out[alias.asname or alias.name] = (f"from:{src}:{alias.name}", stmt)
            elif isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    out[alias.asname or alias.name.split(".")[0]] = ("import", stmt)
            else:
                for name in _targets(stmt):
                    out[name] = ("assign", stmt)
        return out

    def _lazy_names(self, module: str) -> set[str]:
        """Names a module serves through ``__getattr__`` (string keys of its dicts)."""
        tree = self.tree(module)
        if tree is None or "__getattr__" not in self.bindings(module):
            return set()
        return {
            k.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Dict)
            for k in n.keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str)
        }

    def resolve(self, module: str, name: str, _depth: int = 0) -> tuple[str, str, ast.AST | None]:
        """Follow re-exports to where ``module.name`` is defined: (module, kind, node);
        kind "module" for a submodule, "external" for a name imported from outside vllm,
        "lazy" for a ``__getattr__`` name, "missing" when it is not there."""
        binding = self.bindings(module).get(name)
        if binding is not None:
            kind, node = binding
            if kind.startswith("from:") and _depth < 20:
                _, src, orig = kind.split(":")
                if src.split(".")[0] != "vllm":
                    return src, "external", node
                if self.module_file(f"{src}.{orig}") is not None:
                    return f"{src}.{orig}", "module", None
                return self.resolve(src, orig, _depth + 1)
            return module, kind, node
        if self.module_file(f"{module}.{name}") is not None:
            return f"{module}.{name}", "module", None
        if name in self._lazy_names(module):
            return module, "lazy", None
        return module, "missing", None

    def exists(self, dotted: str) -> bool:
        """``vllm.a.b`` (a module) or ``vllm.a.b.Name[.attr...]`` (a name, then members)."""
        parts = dotted.split(".")
        for i in range(len(parts), 0, -1):
            module = ".".join(parts[:i])
            if self.module_file(module) is None:
                continue
            rest = parts[i:]
            if not rest:
                return True
            _, kind, _ = self.resolve(module, rest[0])
            if kind == "missing":
                return False
            if len(rest) == 1:
                return True
            cls = self.get_class(module, rest[0])
            return cls is not None and all(self.member(cls, a) is not None for a in rest[1:2])
        return False

    # ---- classes ---------------------------------------------------------------

    def get_class(self, module: str, name: str) -> ClassInfo | None:
        mod, kind, node = self.resolve(module, name)
        return ClassInfo(mod, node.name, node) if isinstance(node, ast.ClassDef) else None

    def cls(self, dotted: str) -> ClassInfo:
        module, _, name = dotted.rpartition(".")
        info = self.get_class(module, name)
        if info is None:
            raise LookupError(f"class {dotted} not found in vLLM {self.version}")
        return info

    def _base(self, module: str, expr: ast.expr) -> ClassInfo | None:
        if isinstance(expr, ast.Subscript):  # Generic[T], Builder[Metadata]
            expr = expr.value
        if isinstance(expr, ast.Name):
            return self.get_class(module, expr.id)
        if isinstance(expr, ast.Attribute):
            dotted = ast.unparse(expr)
            head, _, attr = dotted.rpartition(".")
            mod, kind, _ = self.resolve(module, head.split(".")[0])
            if kind == "module":
                target = ".".join([mod, *head.split(".")[1:]])
                return self.get_class(target, attr)
        return None

    def bases(self, info: ClassInfo) -> list[ClassInfo]:
        return [b for b in (self._base(info.module, e) for e in info.node.bases) if b]

    def mro(self, info: ClassInfo) -> list[ClassInfo]:
        """C3 linearisation over the bases found in the tree (outside bases are dropped)."""
        seqs = [self.mro(b) for b in self.bases(info)] + [self.bases(info)]
        out = [info]
        while any(seqs):
            for seq in seqs:
                if not seq:
                    continue
                head = seq[0]
                if not any(head in s[1:] for s in seqs):
                    break
            else:  # inconsistent (should not happen): fall back to depth-first
                head = next(s[0] for s in seqs if s)
            out.append(head)
            seqs = [[c for c in s if c != head] for s in seqs]
        return out

    def own_member(self, info: ClassInfo, name: str) -> Member | None:
        for stmt in info.node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                return Member(info, "method", stmt)
            if name in _targets(stmt):
                return Member(info, "class_attr", stmt)
        for fn in info.node.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for n in ast.walk(fn):
                target = n.target if isinstance(n, (ast.AnnAssign, ast.AugAssign)) else None
                targets = n.targets if isinstance(n, ast.Assign) else [target] if target else []
                for t in targets:
                    for e in t.elts if isinstance(t, ast.Tuple) else [t]:
                        if (
                            isinstance(e, ast.Attribute)
                            and e.attr == name
                            and isinstance(e.value, ast.Name)
                            and e.value.id == "self"
                        ):
                            return Member(info, "instance_attr", n)
        return self._registered(info, name)

    def _registered(self, info: ClassInfo, name: str) -> Member | None:
        """``register_buffer("name", ...)`` / ``register_parameter`` anywhere in the class's
        module (vLLM registers layer buffers from module-level helpers too)."""
        tree = self.tree(info.module)
        for n in ast.walk(tree) if tree is not None else ():
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr in ("register_buffer", "register_parameter")
                and n.args
                and isinstance(n.args[0], ast.Constant)
                and n.args[0].value == name
            ):
                return Member(info, "instance_attr", n)
        return None

    def member(self, info: ClassInfo, name: str) -> Member | None:
        for c in self.mro(info):
            found = self.own_member(c, name)
            if found is not None:
                return found
        return None

    def method(self, info: ClassInfo, name: str) -> tuple[ClassInfo, FunctionNode] | None:
        for c in self.mro(info):
            found = self.own_member(c, name)
            if found is not None and found.kind == "method":
                assert isinstance(found.node, (ast.FunctionDef, ast.AsyncFunctionDef))
                return c, found.node
            if found is not None and found.kind == "class_attr":
                return None
        return None

    def function(self, dotted: str) -> FunctionNode | None:
        module, _, name = dotted.rpartition(".")
        _, kind, node = self.resolve(module, name)
        return node if kind == "def" and isinstance(node, FunctionNode) else None
