"""The installed package is typed (PEP 561): it holds py.typed and the stub
of its C extension, qem._qem (_qem.pyi), and the stub agrees with the
extension. Names: every public name the stub declares exists at runtime,
on the module and on each class, and every public one at runtime is
declared. Signatures: parsed from the C sources (python/src/*.c: the
method tables, each function's PyArg format string and keyword list), so
a keyword renamed, added, reordered or made optional on either side
fails; a self-check shows the comparison does catch a wrong stub. With
mypy installed, mypy and stubtest run too (skipped, saying so, without)."""
import ast
import importlib.util
import inspect
import pathlib
import re
import subprocess
import sys

import pytest

import qem
from qem import _qem

REPO = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = pathlib.Path(qem.__file__).resolve().parent
SOURCES = sorted((REPO / "python" / "src").glob("*.c"))


def test_the_installed_package_is_typed():
    assert (PACKAGE / "py.typed").is_file(), sorted(p.name for p in PACKAGE.iterdir())
    assert (PACKAGE / "_qem.pyi").is_file(), sorted(p.name for p in PACKAGE.iterdir())
    # The stub installed is the one in the source tree.
    assert (PACKAGE / "_qem.pyi").read_text() == (REPO / "python/qem/_qem.pyi").read_text()


# --- the stub ------------------------------------------------------------------------------


def stub_tree(text=None):
    text = (PACKAGE / "_qem.pyi").read_text() if text is None else text
    return ast.parse(text)


def stub_api(tree):
    """{name: FunctionDef | {member: FunctionDef | 'property'} | 'constant'}"""
    api = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            api[node.name] = node
        elif isinstance(node, ast.ClassDef):
            members = {}
            for m in node.body:
                if isinstance(m, ast.FunctionDef):
                    props = [d for d in m.decorator_list
                             if isinstance(d, ast.Name) and d.id == "property"]
                    members[m.name] = "property" if props else m
            api[node.name] = members
        elif isinstance(node, ast.AnnAssign) and not node.target.id.startswith("_"):
            api[node.target.id] = "constant"
    return api


def stub_signature(fn, method):
    """(positional-only count, [(name, kind, has_default)]) without self."""
    a = fn.args
    pos = a.posonlyargs + a.args
    defaults = [False] * (len(pos) - len(a.defaults)) + [True] * len(a.defaults)
    params = [(p.arg, "posonly" if i < len(a.posonlyargs) else "pos", d)
              for i, (p, d) in enumerate(zip(pos, defaults))]
    params += [(p.arg, "kwonly", d is not None) for p, d in zip(a.kwonlyargs, a.kw_defaults)]
    assert not a.vararg and not a.kwarg, fn.name
    if method:
        assert params and params[0][0] == "self", fn.name
        params = params[1:]
    return params


# --- the C sources ---------------------------------------------------------------------------


def c_text():
    text = "\n".join(p.read_text() for p in SOURCES)
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    return re.sub(r"\\\n", " ", text)


def c_macros(text):
    """#define NAME "a" "b"... (string macros only) -> their string tokens."""
    macros = {}
    for name, body in re.findall(r"^#define\s+(\w+)\s+(.*)$", text, flags=re.M):
        if re.fullmatch(r'\s*"[^"]*"(\s*,?\s*"[^"]*")*\s*', body):
            macros[name] = body
    return macros


def expand(expr, macros):
    for _ in range(4):
        expr = re.sub(r"\b([A-Z_][A-Z0-9_]*)\b", lambda m: macros.get(m.group(1), m.group(1)),
                      expr)
    return expr


def balanced(text, start, open_="(", close=")"):
    """The text from text[start] (an opening bracket) to its match."""
    depth, k, in_str = 0, start, False
    while True:
        ch = text[k]
        if ch == '"' and text[k - 1] != "\\":
            in_str = not in_str
        elif not in_str and ch == open_:
            depth += 1
        elif not in_str and ch == close:
            depth -= 1
            if depth == 0:
                return text[start:k + 1]
        k += 1


def split_top(args):
    parts, depth, cur, in_str = [], 0, "", False
    for k, ch in enumerate(args):
        if ch == '"' and (k == 0 or args[k - 1] != "\\"):
            in_str = not in_str
        if not in_str and ch in "([{":
            depth += 1
        elif not in_str and ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0 and not in_str:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    return parts + [cur.strip()]


def function_body(text, name):
    m = re.search(r"\b" + re.escape(name) + r"\s*\([^;{)]*\)\s*\{", text)
    assert m, f"C function {name} not found"
    return balanced(text, m.end() - 1, "{", "}")


def format_string(expr, macros, pyname):
    """The format a (possibly ternary) format expression gives for pyname."""
    expr = expand(expr, macros)
    tokens = re.findall(r'"((?:[^"\\]|\\.)*)"|([?:])', expr)
    branches, cur = [], ""
    for literal, op in tokens:
        if op:
            branches.append(cur)
            cur = ""
        else:
            cur += literal
    branches.append(cur)
    branches = [b for b in branches if b]
    if len(branches) > 1:  # cond ? "...:name" : "...:other"
        branches = [b for b in branches if b.endswith(":" + pyname)]
    assert len(branches) == 1, (pyname, expr)
    return branches[0]


def format_units(fmt):
    """[(kind)] of each argument a PyArg format takes: 'req', 'opt', 'kwonly'."""
    fmt = fmt.split(":")[0].split(";")[0]
    units, state, k = [], "req", 0
    while k < len(fmt):
        ch = fmt[k]
        if ch == "|":
            state = "opt"
        elif ch == "$":
            state = "kwonly"
        elif ch == "(":
            k += len(balanced(fmt, k)) - 1
            units.append(state)
        else:
            while k + 1 < len(fmt) and fmt[k + 1] in "&!*#":
                k += 1
            units.append(state)
        k += 1
    return units


def c_parse(text, macros, cfunc, pyname, seen=()):
    """(format, keyword list or None) the C function `cfunc` parses, following a
    call that hands its args on (part_product, inspect_as)."""
    body = function_body(text, cfunc)
    m = re.search(r"PyArg_ParseTuple(AndKeywords)?\s*\(", body)
    if not m:
        for callee in re.findall(r"\b(\w+)\s*\([^;]*\bargs\b", body):
            if callee not in seen and callee != cfunc and re.search(
                    r"\b" + callee + r"\s*\([^;{)]*\)\s*\{", text):
                return c_parse(text, macros, callee, pyname, seen + (cfunc,))
        raise AssertionError(f"{cfunc} parses no arguments")
    args = split_top(balanced(body, m.end() - 1)[1:-1])
    if not m.group(1):
        return format_string(args[1], macros, pyname), None
    kw_name = args[3]
    kw = re.search(r"\b" + kw_name + r"\s*\[\]\s*=\s*\{(.*?)\};", body, flags=re.S)
    assert kw, (cfunc, kw_name)
    names = re.findall(r'"(\w+)"', expand(kw.group(1), macros))
    return format_string(args[2], macros, pyname), names


def c_api():
    """{pyname: (flags, format, kwlist)} for the module, {type: {...}} for types;
    properties as 'property'."""
    text = c_text()
    macros = c_macros(text)

    def table(name):
        body = re.search(r"PyMethodDef\s+" + name + r"\s*\[\]\s*=\s*\{(.*?)\{\s*NULL", text,
                         flags=re.S).group(1)
        out = {}
        for py, cf, flags in re.findall(
                r'\{\s*"(\w+)"\s*,\s*(?:\(PyCFunction\)\s*)?(?:\(void\s*\(\*\)\(void\)\))?\s*(\w+)\s*,'
                r'\s*([A-Z_ |]+)', body):
            flags = set(f.strip() for f in flags.split("|"))
            if "METH_NOARGS" in flags:
                out[py] = ("noargs", None, None)
            else:
                fmt, kw = c_parse(text, macros, cf, py)
                out[py] = ("keywords" if "METH_KEYWORDS" in flags else "varargs", fmt, kw)
        return out

    api = {}
    module = re.search(r'PyModuleDef_HEAD_INIT\s*,\s*"qem\._qem"\s*,.*?,\s*-1\s*,\s*(\w+)',
                       text, flags=re.S)
    api.update(table(module.group(1)))
    for m in re.finditer(r"PyTypeObject\s+\w+\s*=\s*\{", text):
        body = balanced(text, m.end() - 1, "{", "}")
        tp = re.search(r'tp_name\s*=\s*"qem\._qem\.(\w+)"', body).group(1)
        members = {}
        methods = re.search(r"\.tp_methods\s*=\s*(\w+)", body)
        if methods:
            members.update(table(methods.group(1)))
        getset = re.search(r"\.tp_getset\s*=\s*(\w+)", body)
        if getset:
            gs = re.search(r"PyGetSetDef\s+" + getset.group(1) + r"\s*\[\]\s*=\s*\{(.*?)\{\s*NULL",
                           text, flags=re.S).group(1)
            members.update({n: "property" for n in re.findall(r'\{\s*"(\w+)"', gs)})
        init = re.search(r"\.tp_init\s*=\s*\(initproc\)\s*(\w+)", body)
        if init:
            fmt, kw = c_parse(text, macros, init.group(1), tp)
            members["__init__"] = ("keywords", fmt, kw)
        api[tp] = members
    return api


def mismatches(stub, c, method):
    """What differs between a stub FunctionDef and the C parse of it."""
    kind, fmt, kw = c
    got = stub_signature(stub, method)
    if kind == "noargs":
        return [] if not got else [f"takes no arguments, stub has {got}"]
    units = format_units(fmt)
    if kind == "varargs":  # positional only
        want = [("posonly", u != "req") for u in units]
        have = [(k, d) for _, k, d in got]
        return [] if want == have else [f"format {fmt!r}: {want}, stub {have}"]
    assert len(kw) == len(units), (fmt, kw)
    want = [(n, "kwonly" if u == "kwonly" else "pos", u != "req") for n, u in zip(kw, units)]
    return [] if want == got else [f"keywords {want}, stub {got}"]


def compare(tree):
    stub, c = stub_api(tree), c_api()
    problems = []
    for name, want in c.items():
        if name not in stub:
            problems.append(f"{name}: not in the stub")
        elif isinstance(want, dict):
            for member, w in want.items():
                s = stub[name].get(member)
                if s is None:
                    problems.append(f"{name}.{member}: not in the stub")
                elif (w == "property") != (s == "property"):
                    problems.append(f"{name}.{member}: property on one side only")
                elif w != "property":
                    problems += [f"{name}.{member}: {p}" for p in mismatches(s, w, True)]
            problems += [f"{name}.{m}: not in the extension" for m in stub[name]
                         if m not in want]
        else:
            problems += [f"{name}: {p}" for p in mismatches(stub[name], want, False)]
    return problems


def test_stub_names_are_the_runtime_names():
    stub = stub_api(stub_tree())
    runtime = {n for n in dir(_qem) if not n.startswith("_")}
    assert set(stub) == runtime, (sorted(set(stub) - runtime), sorted(runtime - set(stub)))
    for name, members in stub.items():
        obj = getattr(_qem, name)
        if isinstance(members, dict):
            assert inspect.isclass(obj), name
            public = {n for n in vars(obj) if not n.startswith("_")}
            declared = {n for n in members if not n.startswith("_")}
            assert declared == public, (name, sorted(declared ^ public))
            for member, what in members.items():
                assert hasattr(obj, member), (name, member)
                if what == "property":
                    assert inspect.isdatadescriptor(vars(obj)[member]), (name, member)
                else:
                    assert callable(getattr(obj, member)), (name, member)
        elif members == "constant":
            assert not callable(obj), name
        else:
            assert callable(obj) and not inspect.isclass(obj), name


def test_stub_signatures_are_the_extension_s():
    api = c_api()
    # The parse found what the extension has (it is no empty comparison).
    assert set(api) == {n for n in dir(_qem) if not n.startswith("_")} - {
        "LIBRARY_VERSION", "MAX_THREADS"}, sorted(api)
    assert api["Writer"]["__init__"][2][:3] == ["dest", "dtype", "shape"]
    assert "raw_frame_header" in api["save_file"][2]
    assert compare(stub_tree()) == []


@pytest.mark.parametrize("old, new", [
    ("expect_sha256: Optional[str] = ...", "expected_sha256: Optional[str] = ..."),
    ("source_format: Optional[str] = ..., progress", "progress"),
    ("def frame(self, scan: SupportsIndex, /)", "def frame(self, scan: SupportsIndex = ..., /)"),
    ("def pack_produce(src: _Path, dest: _Path, *,", "def pack_produce(src: _Path, *, dest: _Path,"),
    ("    def abort(self) -> None: ...\n", ""),
])
def test_the_comparison_catches_a_wrong_stub(old, new):
    text = (PACKAGE / "_qem.pyi").read_text()
    assert old in text
    tree = stub_tree(text.replace(old, new, 1))
    assert compare(tree) != []


def test_mypy_and_stubtest():
    if importlib.util.find_spec("mypy") is None:
        reason = "mypy is not installed (Debian: python3-mypy); mypy and stubtest not run"
        print("\n" + reason, file=sys.__stderr__)
        pytest.skip(reason)
    stubtest = subprocess.run([sys.executable, "-m", "mypy.stubtest", "qem._qem"],
                              capture_output=True, text=True)
    assert stubtest.returncode == 0, stubtest.stdout + stubtest.stderr
    use = ("import numpy as np\nimport qem\nfrom qem import _qem\n"
           "w = _qem.Writer('x.qem', 'uint16', (1, 1, 2, 2), chunk_scans=1)\n"
           "w.append(np.zeros((1, 2, 2), np.uint16))\nn: int = w.appended\n"
           "kind: str = _qem.identify('x')\n")
    checked = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "-c", use],
                             capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_the_public_entry_points_are_annotated():
    """The pure-Python modules are typed inline (no .pyi beside them): the
    entry points say what they return."""
    import typing

    import qem.pack
    want = {qem.open: qem.File, qem.session: qem.Session, qem.identify: str,
            qem.save: typing.Union[str, bytes], qem.convert: typing.Union[str, bytes],
            qem.inspect: typing.Dict[str, typing.Any],
            qem.pack.inspect: typing.Dict[str, typing.Any],
            qem.pack.produce: typing.Dict[str, typing.Any]}
    for fn, returns in want.items():
        assert typing.get_type_hints(fn).get("return") == returns, fn.__qualname__
    # Only the extension has a stub: a .pyi beside a .py would hide its annotations.
    assert sorted(p.name for p in PACKAGE.glob("*.pyi")) == ["_qem.pyi"]
