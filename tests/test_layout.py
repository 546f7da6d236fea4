"""The repository's layout rules (docs/architecture.md, "Repository and import layout"), checked on the source.

* hdl/, sim/ and tb/ hold packages only (``lib``, ``packet``, one per mechanism), each with its twin in the other
  two layers, so a block's RTL, golden model and testbench are found under one mechanism name.
* Imports go downward: :mod:`lbpipe.protocol` imports nothing of the project; ``hdl.lib`` nothing above it; hdl
  never imports sim, tb or the tools; sim never imports tb or the tools; relative imports stay inside a package.
* No ``elaborate`` is longer than 200 lines.
"""

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
LAYERS = {"hdl": "lbpipe.hdl", "sim": "lbpipe.sim", "tb": "lbpipe.tb", "boards": "lbpipe.boards", "lbpipe": "lbpipe",
          "formal": "lbpipe.formal"}
MAX_ELABORATE = 200


def _sources():
    for layer in LAYERS:
        for path in sorted((ROOT / layer).rglob("*.py")):
            yield path


def _module(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join([LAYERS[parts[0]]] + parts[1:])


def _imports(path):
    """Absolute names of the project modules ``path`` imports, and its relative imports' level."""
    tree = ast.parse(path.read_text())
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                out.append(("relative", node.level, node.module))
            elif node.module and node.module.startswith("lbpipe"):
                out.append(("absolute", node.module, [a.name for a in node.names]))
        elif isinstance(node, ast.Import):
            out += [("absolute", a.name, []) for a in node.names if a.name.startswith("lbpipe")]
    return out


@pytest.mark.parametrize("layer", ["hdl", "sim", "tb"])
def test_layers_hold_packages_only(layer):
    loose = [p.name for p in (ROOT / layer).glob("*.py") if p.name != "__init__.py"]
    assert not loose, f"{layer}/ holds modules outside its packages: {loose}"


def test_every_hdl_package_has_its_golden_models_and_benches():
    packages = {p.name for p in (ROOT / "hdl").iterdir() if (p / "__init__.py").exists()}
    assert {"lib", "packet", "themis"} <= packages
    for layer in ("sim", "tb"):
        twins = {p.name for p in (ROOT / layer).iterdir() if (p / "__init__.py").exists()}
        assert packages <= twins, f"{layer}/ lacks {sorted(packages - twins)}"


def _allowed(importer, imported):
    """Whether module ``importer`` may import ``imported`` (both absolute names)."""
    if importer == "lbpipe.protocol":
        return False
    if imported == "lbpipe.protocol" or imported.startswith(importer.rsplit(".", 1)[0] + "."):
        return True
    if importer.startswith("lbpipe.hdl.lib"):
        return imported.startswith("lbpipe.hdl.lib")
    if importer.startswith("lbpipe.hdl.packet"):
        return imported.startswith(("lbpipe.hdl.lib", "lbpipe.hdl.packet"))
    if importer.startswith("lbpipe.hdl"):
        return imported.startswith("lbpipe.hdl")
    if importer.startswith("lbpipe.sim"):
        return imported.startswith(("lbpipe.hdl", "lbpipe.sim"))
    if importer.startswith("lbpipe.boards"):
        return imported.startswith(("lbpipe.hdl", "lbpipe.boards"))
    if importer.startswith("lbpipe.formal"):
        return imported.startswith(("lbpipe.hdl", "lbpipe.formal"))
    return True   # tb and the tools use every layer


def test_imports_go_downward():
    bad = []
    for path in _sources():
        importer = _module(path)
        for entry in _imports(path):
            if entry[0] == "relative":
                if entry[1] > 1:
                    bad.append(f"{path.relative_to(ROOT)}: 'from {'.' * entry[1]}{entry[2] or ''}' leaves its package")
                continue
            _, imported, names = entry
            targets = [imported] if imported != "lbpipe" else [f"lbpipe.{n}" for n in names]
            bad += [f"{path.relative_to(ROOT)}: imports {t}" for t in targets if not _allowed(importer, t)]
    assert not bad, "\n".join(bad)


def test_protocol_module_imports_nothing_of_the_project():
    assert _imports(ROOT / "lbpipe" / "protocol.py") == []


def test_layout_checker_fails_on_a_bad_import():
    # The rule above must be able to fail: an hdl primitive importing a golden model, a golden model importing a
    # testbench, the protocol module importing hardware.
    assert not _allowed("lbpipe.hdl.lib.ring", "lbpipe.sim.lib.ring")
    assert not _allowed("lbpipe.hdl.packet.parser", "lbpipe.hdl.themis.themis_d")
    assert not _allowed("lbpipe.sim.packet.parser", "lbpipe.tb.lib.packets")
    assert not _allowed("lbpipe.protocol", "lbpipe.hdl.lib.meta")
    assert not _allowed("lbpipe.formal.lib.stream", "lbpipe.sim.lib.ring")
    assert _allowed("lbpipe.sim.packet.parser", "lbpipe.hdl.packet.parser")


def test_no_elaborate_is_longer_than_200_lines():
    long = []
    for path in sorted((ROOT / "hdl").rglob("*.py")) + sorted((ROOT / "boards").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef) and node.name == "elaborate":
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_ELABORATE:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} elaborate is {lines} lines")
    assert not long, "\n".join(long)


def test_every_package_ships():
    """Every package directory is listed in pyproject.toml, so ``pip install .`` (not only an editable install,
    which finds subpackages by path) ships it."""
    import re
    listed = set(re.findall(r'^\s*"(lbpipe(?:\.\w+)*)",\s*$', (ROOT / "pyproject.toml").read_text(), re.M))
    present = {_module(init) for layer in LAYERS for init in (ROOT / layer).rglob("__init__.py")}
    missing = sorted(present - listed)
    assert not missing, f"packages missing from pyproject.toml [tool.setuptools] packages: {missing}"
