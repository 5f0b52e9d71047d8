"""What the plugin takes from vLLM, read from its sources with ``ast``: imports, subclasses,
overridden methods, ``self.`` attributes and calls into vLLM. Checked against a
:class:`tools.vllm_source.VllmSource` (no import of either side).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tools.vllm_source import ClassInfo, FunctionNode, Signature, VllmSource, signature

PACKAGE = Path(__file__).resolve().parents[1] / "vllm_frozen_kv_mtp"
#: the package's modules that import vLLM's private names for the rest of it
ADAPTERS = "vllm_frozen_kv_mtp.adapters."

#: classes the plugin builds at run time over a vLLM class it receives as an argument
DYNAMIC_BASES = {
    "SplitDecodeTritonImpl": "vllm.v1.attention.backends.triton_attn.TritonAttentionImpl",
}


@dataclass(frozen=True)
class VllmImport:
    where: str  # plugin module:line
    module: str
    name: str | None  # None for ``import vllm.x``


@dataclass
class PluginClass:
    """A plugin class with a vLLM base."""

    where: str
    node: ast.ClassDef
    bases: list[str]  # dotted vLLM class paths
    imports: dict[str, str] = field(default_factory=dict)  # local name -> dotted vLLM path


def plugin_modules(package: Path = PACKAGE, adapter: str | None = None) -> dict[str, ast.Module]:
    """The plugin's modules by dotted name. With ``adapter`` (a package name such as
    ``vllm_0_34``), those a vLLM that adapter serves runs: the other adapter packages'
    modules are left out unless this one imports them, and so is every module that
    reads, at import, a role this adapter does not have (the V1 drafter's, from 0.34), or
    imports such a module at import."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = ast.parse(path.read_text(), filename=str(path))
    return out if adapter is None else _serving(out, adapter)


def _import_time_nodes(tree: ast.Module) -> Iterator[ast.AST]:
    """The nodes of a module that run when it is imported (function bodies do not)."""
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imported_plugin_modules(tree: ast.Module, modules: dict[str, ast.Module]) -> set[str]:
    """Plugin modules a module imports at import (``from x import y``: x, and x.y where
    y is a module)."""
    out = set()
    for node in _import_time_nodes(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module in modules:
            out.add(node.module)
            out |= {f"{node.module}.{a.name}" for a in node.names} & set(modules)
    return out


def _serving(modules: dict[str, ast.Module], adapter: str) -> dict[str, ast.Module]:
    own = f"{ADAPTERS}{adapter}"
    roles = {m.removeprefix(f"{own}.") for m in modules if m.startswith(f"{own}.")}
    # other adapters' modules: only those this one imports, transitively
    keep = {m for m in modules if not m.startswith(ADAPTERS + "vllm_") or m.startswith(own)}
    todo = [m for m in keep if m.startswith(own)]
    while todo:
        for dep in _imported_plugin_modules(modules[todo.pop()], modules):
            if dep not in keep:
                keep.add(dep)
                todo.append(dep)
    # modules that read a role this adapter lacks at import, and their importers
    gone = set()
    for name in keep:
        for node in _import_time_nodes(modules[name]):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id in ("active", "bound_drafters")
                and node.attr not in roles
                and not node.attr.startswith("_")
            ):
                gone.add(name)
    changed = True
    while changed:
        changed = False
        for name in keep - gone:
            if _imported_plugin_modules(modules[name], modules) & gone:
                gone.add(name)
                changed = True
    return {m: t for m, t in modules.items() if m in keep - gone}


def vllm_imports(modules: dict[str, ast.Module]) -> list[VllmImport]:
    """Every ``from vllm... import`` / ``import vllm...`` in the plugin, at any depth."""
    out = []
    for mod, tree in modules.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and not node.level and node.module:
                if node.module == "vllm" or node.module.startswith("vllm."):
                    for alias in node.names:
                        out.append(VllmImport(f"{mod}:{node.lineno}", node.module, alias.name))
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == "vllm" or alias.name.startswith("vllm."):
                        out.append(VllmImport(f"{mod}:{node.lineno}", alias.name, None))
    return out


def import_problems(src: VllmSource, imports: list[VllmImport]) -> list[str]:
    problems = []
    for imp in imports:
        if src.module_file(imp.module) is None:
            problems.append(f"{imp.where}: module {imp.module} is gone")
        elif imp.name is not None and src.resolve(imp.module, imp.name)[1] == "missing":
            problems.append(f"{imp.where}: {imp.module} has no {imp.name}")
    return problems


def adapter_table(package: Path = PACKAGE, name: str = "ADAPTERS") -> dict[str, str]:
    """``adapters.ADAPTERS`` (vLLM minor release -> adapter package), or another table of
    that module (``UNTESTED_ADAPTERS``), read from its source."""
    tree = ast.parse((package / "adapters" / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign | ast.Assign):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                assert node.value is not None
                return dict(ast.literal_eval(node.value))
    raise LookupError(f"adapters/__init__.py defines no {name} table")


def _release_key(release: str) -> tuple[int, int]:
    major, minor = release.split(".")[:2]
    return int(major), int(minor)


def all_adapters(package: Path = PACKAGE) -> dict[str, str]:
    """Every release with an adapter, tested or not (``ADAPTERS`` and
    ``UNTESTED_ADAPTERS``), oldest first."""
    table = {**adapter_table(package), **adapter_table(package, "UNTESTED_ADAPTERS")}
    return dict(sorted(table.items(), key=lambda kv: _release_key(kv[0])))


def adapter_for_tree(version: str, package: Path = PACKAGE) -> str:
    """The adapter package (``vllm_0_34``) whose release a vLLM tree of ``version`` is, or
    the newest adapter for a tree of another or no release (``main@<commit>``, 0.35.0):
    a port starts from the newest adapter."""
    table = all_adapters(package)
    try:
        release = ".".join(version.split("+")[0].split(".")[:2])
        _release_key(release)
    except ValueError:
        release = ""
    return table.get(release) or table[list(table)[-1]]


def newest_adapter(package: Path = PACKAGE) -> str:
    """The newest adapter package (untested ones included), dotted."""
    table = all_adapters(package)
    return f"{ADAPTERS}{table[list(table)[-1]]}"


def _adapter_of(modules: dict[str, ast.Module]) -> str:
    """The adapter ``active`` stands for in ``modules``: the newest adapter package they
    hold (:func:`plugin_modules` with an adapter holds it and the older ones it imports;
    without, every adapter)."""
    present = [
        f"{ADAPTERS}{a}"
        for a in dict.fromkeys(all_adapters().values())
        if f"{ADAPTERS}{a}" in modules
    ]
    return present[-1] if present else newest_adapter()


def _active_read(node: ast.expr, active: set[str]) -> tuple[str, str] | None:
    """``(role, name)`` of an ``active.<role>.<name>`` expression, ``active`` being one of
    the local names bound to the ``adapters.active`` module."""
    if (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id in active
    ):
        return node.value.attr, node.attr
    return None


def _local_imports(
    tree: ast.Module, modules: dict[str, ast.Module] | None = None
) -> dict[str, str]:
    """Local name -> dotted vLLM path of every name a module imports from vLLM, straight
    or through an adapter module (``vllm_frozen_kv_mtp/adapters/``, the one place that
    imports vLLM's private names and hands them on under the same names): by name, or
    read from the active adapter (read here as the newest adapter), keyed by the
    expression (``active.scheduler.Scheduler``) or by the module-level name bound to it
    (``apply_top_k_top_p = active.proposer_helpers.apply_top_k_top_p``)."""
    out = {}
    active: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and not node.level and node.module:
            if node.module.split(".")[0] == "vllm":
                for alias in node.names:
                    out[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif modules is not None and node.module.startswith(ADAPTERS):
                handed_on = _local_imports(modules[node.module])
                for alias in node.names:
                    if alias.name in handed_on:
                        out[alias.asname or alias.name] = handed_on[alias.name]
            if f"{node.module}." == ADAPTERS:
                active |= {a.asname or a.name for a in node.names if a.name == "active"}
    if modules is None or not active:
        return out
    adapter = _adapter_of(modules)

    def resolve(node: ast.expr) -> str | None:
        read = _active_read(node, active)
        if read is None:
            return None
        role, name = read
        if f"{adapter}.{role}" not in modules:  # a role this release lacks (V1, 0.34)
            return None
        return _local_imports(modules[f"{adapter}.{role}"], modules).get(name)

    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and (path := resolve(node)) is not None:
            out[ast.unparse(node)] = path
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, path = node.targets[0], resolve(node.value)
            if isinstance(target, ast.Name) and path is not None:
                out[target.id] = path
    return out


def _name(node: ast.expr) -> str | None:
    """``x`` or ``a.b.c``: how :func:`_local_imports` keys a name read by a base or a call."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and _name(node.value) is not None:
        return ast.unparse(node)
    return None


def _plugin_bases(
    mod: str, tree: ast.Module, modules: dict[str, ast.Module]
) -> dict[str, tuple[str, ast.ClassDef]]:
    """Plugin classes a module can name as a base, with the module defining each: its
    own, those it imports from another plugin module (a version-neutral drafter mixin,
    for an adapter's class), and ``alias.Class`` of a plugin module it imports as
    ``alias`` (the previous adapter's class, for the next adapter's)."""

    def defs(module: str) -> dict[str, ast.ClassDef]:
        return {n.name: n for n in modules[module].body if isinstance(n, ast.ClassDef)}

    out = {n.name: (mod, n) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and not node.level and node.module):
            continue
        for alias in node.names:
            local = alias.asname or alias.name
            submodule = f"{node.module}.{alias.name}"
            if submodule in modules:
                for cls_name, cls in defs(submodule).items():
                    out[f"{local}.{cls_name}"] = (submodule, cls)
            elif node.module in modules and node.module != mod:
                found = defs(node.module).get(alias.name)
                if found is not None:
                    out[local] = (node.module, found)
    return out


def _base_classes(
    node: ast.ClassDef, mod: str, modules: dict[str, ast.Module]
) -> list[tuple[str, ast.ClassDef]]:
    """The plugin classes ``node`` (defined in ``mod``) names as bases."""
    local = _plugin_bases(mod, modules[mod], modules)
    return [local[n] for b in node.bases if (n := _name(b)) in local]


def _with_mixins(node: ast.ClassDef, mod: str, modules: dict[str, ast.Module]) -> ast.ClassDef:
    """``node`` with the bodies of its plugin bases (mixins, or the previous adapter's
    class) folded in, less the methods the class overrides, the class's own definitions
    last so that they win."""
    mixins = _base_classes(node, mod, modules)
    if not mixins:
        return node
    own = set(methods(node))
    body = [
        stmt
        for base_mod, base in reversed(mixins)
        for stmt in _with_mixins(base, base_mod, modules).body
        if not (isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef) and stmt.name in own)
    ]
    merged = ast.ClassDef(
        name=node.name,
        bases=node.bases,
        keywords=node.keywords,
        body=[*body, *node.body],
        decorator_list=node.decorator_list,
    )
    return ast.copy_location(merged, node)


def _vllm_bases(
    node: ast.ClassDef, mod: str, modules: dict[str, ast.Module]
) -> tuple[list[str], dict[str, str]]:
    """The dotted vLLM classes ``node`` subclasses, straight or through its plugin bases,
    and the vLLM names its module and its plugin bases' modules import."""
    imports = _local_imports(modules[mod], modules)
    bases = [imports[n] for b in node.bases if (n := _name(b)) in imports]
    for base_mod, base in _base_classes(node, mod, modules):
        more, more_imports = _vllm_bases(base, base_mod, modules)
        bases += [b for b in more if b not in bases]
        imports = {**more_imports, **imports}
    return bases, imports


def plugin_classes(modules: dict[str, ast.Module]) -> list[PluginClass]:
    """The plugin classes with a vLLM base. An older adapter's class that the adapter of
    ``modules`` subclasses is read through that subclass only (alone it never runs there)."""
    out = []
    adapter = _adapter_of(modules)
    for mod, tree in modules.items():
        if mod.startswith(ADAPTERS + "vllm_") and not mod.startswith(f"{adapter}."):
            continue
        own = {n.name: n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
        for node in own.values():
            bases, imports = _vllm_bases(node, mod, modules)
            if node.name in DYNAMIC_BASES:
                bases.append(DYNAMIC_BASES[node.name])
            if bases:
                merged = _with_mixins(node, mod, modules)
                out.append(PluginClass(f"{mod}.{node.name}", merged, bases, imports))
    return out


def methods(node: ast.ClassDef) -> dict[str, FunctionNode]:
    return {s.name: s for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}


def own_attrs(node: ast.ClassDef) -> set[str]:
    """Names the plugin class defines itself: methods, class attributes, ``self.x`` stores."""
    names = set(methods(node))
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            names.add(stmt.target.id)
        elif isinstance(stmt, ast.Assign):
            names |= {t.id for t in stmt.targets if isinstance(t, ast.Name)}
    for n in ast.walk(node):
        if (
            isinstance(n, ast.Attribute)
            and isinstance(n.ctx, ast.Store)
            and isinstance(n.value, ast.Name)
            and n.value.id == "self"
        ):
            names.add(n.attr)
    return names


def self_reads(node: ast.ClassDef) -> set[str]:
    return {
        n.attr
        for n in ast.walk(node)
        if isinstance(n, ast.Attribute)
        and isinstance(n.ctx, ast.Load)
        and isinstance(n.value, ast.Name)
        and n.value.id == "self"
    }


@dataclass(frozen=True)
class Call:
    where: str
    target: str  # description for messages
    n_positional: int
    keywords: frozenset[str]
    star: bool


def _call(where: str, target: str, call: ast.Call, drop_first: bool = False) -> Call:
    star = any(isinstance(a, ast.Starred) for a in call.args) or any(
        k.arg is None for k in call.keywords
    )
    n = len([a for a in call.args if not isinstance(a, ast.Starred)]) - (1 if drop_first else 0)
    return Call(where, target, n, frozenset(k.arg for k in call.keywords if k.arg), star)


def parent_calls(cls: PluginClass) -> Iterator[tuple[str, Call]]:
    """(method name, call) for ``super().m(...)``, ``self.m(...)`` of a method the class
    does not define, and ``VllmBase.m(self, ...)``."""
    own = methods(cls.node)
    for n in ast.walk(cls.node):
        if not (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)):
            continue
        f = n.func
        where = f"{cls.where}:{n.lineno}"
        if (
            isinstance(f.value, ast.Call)
            and isinstance(f.value.func, ast.Name)
            and f.value.func.id == "super"
        ):
            yield f.attr, _call(where, f"super().{f.attr}", n)
        elif isinstance(f.value, ast.Name) and f.value.id == "self" and f.attr not in own:
            yield f.attr, _call(where, f"self.{f.attr}", n)
        elif isinstance(f.value, ast.Name) and f.value.id in cls.imports:
            yield f.attr, _call(where, f"{f.value.id}.{f.attr}", n, drop_first=True)


def function_calls(modules: dict[str, ast.Module]) -> Iterator[tuple[str, Call]]:
    """(dotted vLLM function, call) for calls of functions imported from vLLM."""
    for mod, tree in modules.items():
        imports = _local_imports(tree, modules)
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and (name := _name(n.func)) in imports:
                yield imports[name], _call(f"{mod}:{n.lineno}", name, n)


def override_problems(ours: Signature, parent: Signature) -> list[str]:
    """Why a call that binds to ``parent`` might not bind to ``ours``."""
    problems = []
    for i, name in enumerate(parent.positional):
        if i < len(ours.positional):
            if ours.positional[i] != name:
                problems.append(
                    f"parameter {i + 1} is {name!r} upstream, {ours.positional[i]!r} here"
                )
        elif not ours.varargs and name not in ours.kwonly:
            problems.append(f"upstream parameter {name!r} is missing")
    for name in parent.kwonly:
        if name not in ours.names() and not ours.varkw:
            problems.append(f"upstream keyword {name!r} is missing")
    required = set(ours.positional[: ours.n_required_positional]) | set(ours.required_kwonly)
    extra = required - parent.names()
    if extra:
        problems.append(f"{sorted(extra)} required here but not upstream")
    return problems


def parent_method(
    src: VllmSource, cls: PluginClass, name: str
) -> tuple[ClassInfo, FunctionNode] | None:
    for base in cls.bases:
        found = src.method(src.cls(base), name)
        if found is not None:
            return found
    return None


def signature_of(fn: FunctionNode) -> Signature:
    return signature(fn, is_method=True)
