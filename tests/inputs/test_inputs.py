"""compatmatrix.inputs: pip's requirements format as pip reads it, freeze lists and PEP 751 pylock.toml (pure unit tests)."""

from __future__ import annotations

import textwrap

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compatmatrix.inputs import InputError, read_inputs
from compatmatrix.inputs.read import logical_lines


def write(tmp_path, name, text):
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def pins(inputs):
    return {r.name: str(r.specifier) for r in inputs.requirements}


def test_comments_continuations_and_env_vars_as_pip_reads_them(tmp_path, monkeypatch):
    monkeypatch.setenv("IPEX_VERSION", "2.3.0")
    path = write(tmp_path, "r.txt", """\
        # a comment
        torch==2.3.0 \\
            # a comment line ends the continuation (pip)
        intel_extension_for_pytorch==${IPEX_VERSION}  # trailing comment
        oneccl-bind-pt\\
        ==2.3.0
        """)
    inputs = read_inputs([str(path)])
    assert pins(inputs) == {"torch": "==2.3.0", "intel_extension_for_pytorch": "==2.3.0", "oneccl-bind-pt": "==2.3.0"}
    assert [r.origin.line for r in inputs.requirements] == [2, 4, 5]


def test_index_lines_are_read_with_their_origin(tmp_path):
    path = write(tmp_path, "r.txt", """\
        -f https://download.pytorch.org/whl/torch_stable.html
        --extra-index-url https://pytorch-extension.intel.com/release-whl/stable/cpu/us/
        --index-url=https://pypi.org/simple
        -fhttps://developer.intel.com/ipex-whl-stable-cpu
        --pre
        --trusted-host pypi.org
        torch==1.12.1+cpu
        """)
    inputs = read_inputs([str(path)])
    assert [(i.kind, i.url, i.origin.line) for i in inputs.indexes] == [
        ("find-links", "https://download.pytorch.org/whl/torch_stable.html", 1),
        ("extra-index-url", "https://pytorch-extension.intel.com/release-whl/stable/cpu/us/", 2),
        ("index-url", "https://pypi.org/simple", 3),
        ("find-links", "https://developer.intel.com/ipex-whl-stable-cpu", 4),
    ]
    assert inputs.pre is True
    torch = inputs.requirements[0]
    assert torch.pinned == Version("1.12.1+cpu") and torch.local_label == "+cpu"


def test_includes_are_relative_to_the_including_file_and_constraints_are_marked(tmp_path):
    write(tmp_path, "sub/base.txt", "torch==2.7.0\n-c constraints.txt\n")
    write(tmp_path, "sub/constraints.txt", "transformers<4.50\n")
    top = write(tmp_path, "top.txt", "-r sub/base.txt\naccelerate\n")
    inputs = read_inputs([str(top)])
    assert [(r.name, r.constraint) for r in inputs.requirements] == [("torch", False), ("transformers", True), ("accelerate", False)]
    assert inputs.requirements[0].origin.path.endswith("sub/base.txt")


def test_an_include_loop_is_refused_by_name(tmp_path):
    write(tmp_path, "a.txt", "-r b.txt\n")
    write(tmp_path, "b.txt", "-r a.txt\n")
    with pytest.raises(InputError, match="the includes loop"):
        read_inputs([str(tmp_path / "a.txt")])


def test_a_remote_include_is_not_downloaded(tmp_path):
    path = write(tmp_path, "r.txt", "-r https://example.invalid/requirements.txt\n")
    with pytest.raises(InputError, match="names a remote file, which compat does not download"):
        read_inputs([str(path)])


def test_markers_are_evaluated_for_the_target_python(tmp_path):
    path = write(tmp_path, "r.txt", """\
        torch==1.13.1; python_version < "3.11"
        torch==2.3.0; python_version >= "3.11"
        pywin32==306; sys_platform == "win32"
        """)
    old = read_inputs([str(path)], python=Version("3.10"))
    new = read_inputs([str(path)], python=Version("3.12"))
    assert pins(old) == {"torch": "==1.13.1"} and pins(new) == {"torch": "==2.3.0"}
    assert any("pywin32 does not apply to Python 3.12" in line for line in new.skipped)


def test_hashes_extras_and_names_in_any_spelling(tmp_path):
    path = write(tmp_path, "r.txt", """\
        transformers[torch]==4.30.2 --hash=sha256:ABCDEF0123 \\
            --hash sha256:abcdef0124
        torch-ipex~=1.12.0
        oneccl_bind_pt==2.0.*
        """)
    inputs = read_inputs([str(path)])
    transformers = inputs.requirements[0]
    assert transformers.extras == frozenset({"torch"}) and transformers.hashes == ("sha256:abcdef0123", "sha256:abcdef0124")
    assert pins(inputs)["torch-ipex"] == "~=1.12.0" and pins(inputs)["oneccl_bind_pt"] == "==2.0.*"


def test_url_requirements_take_version_and_label_from_the_wheel_name(tmp_path):
    path = write(tmp_path, "r.txt", """\
        oneccl_bind_pt @ https://example.invalid/xpu/oneccl_bind_pt-2.5.0%2Bxpu-cp310-cp310-linux_x86_64.whl
        https://example.invalid/cpu/intel_extension_for_pytorch-1.10.0%2Bcpu-cp38-cp38-linux_x86_64.whl
        """)
    ccl, ipex = read_inputs([str(path)]).requirements
    assert (ccl.name, ccl.pinned, ccl.local_label) == ("oneccl_bind_pt", Version("2.5.0+xpu"), "+xpu")
    assert (ipex.name, ipex.pinned, ipex.local_label) == ("intel_extension_for_pytorch", Version("1.10.0+cpu"), "+cpu")


def test_pip_freeze_output_is_recognised(tmp_path):
    path = write(tmp_path, "freeze.txt", "torch==2.8.0\nintel_extension_for_pytorch==2.8.0\n-e git+https://example.invalid/x.git@abc#egg=mytrainer\n")
    inputs = read_inputs([str(path)])
    assert inputs.kind == "freeze"
    assert inputs.requirements[-1].name == "mytrainer" and inputs.requirements[-1].url.startswith("git+")


@pytest.mark.parametrize(
    "line, message",
    [
        ("torch==>1", "is not a requirement pip accepts"),
        ("--frobnicate", "is not an option of pip's requirements format"),
        ("torch==2.7.0 --hash=md5", "is not ALGORITHM:HEX"),
        ("torch==2.7.0 --no-such-option", "is not an option pip takes after a requirement"),
        ("-r", "needs a value"),
        ("--index-url 'https://unclosed", "cannot be split into words"),
        ("torch 'unclosed", "is not a requirement pip accepts"),
    ],
)
def test_bad_lines_name_the_file_and_line(tmp_path, line, message):
    path = write(tmp_path, "r.txt", f"# first\n{line}\n")
    with pytest.raises(InputError, match=message) as caught:
        read_inputs([str(path)])
    assert f"{path}:2" in caught.value.message


def test_missing_and_binary_files_are_one_sentence(tmp_path):
    with pytest.raises(InputError, match=r"nope.txt does not exist \(no such file"):
        read_inputs([str(tmp_path / "nope.txt")])
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"torch==2.7.0\n\xff\xfe\n")
    with pytest.raises(InputError, match="is not UTF-8"):
        read_inputs([str(binary)])


def test_pylock_entries_become_exact_pins_with_index_and_hashes(tmp_path):
    path = write(tmp_path, "pylock.toml", """\
        lock-version = "1.0"
        created-by = "test"
        [[packages]]
        name = "torch"
        version = "2.7.0+cpu"
        index = "https://download.pytorch.org/whl/cpu"
        [[packages.wheels]]
        url = "https://download.pytorch.org/whl/cpu/torch-2.7.0%2Bcpu-cp311-cp311-manylinux_2_28_x86_64.whl"
        hashes = {sha256 = "AB12"}
        [[packages]]
        name = "numpy"
        version = "2.1.0"
        marker = "python_version >= '3.10'"
        """)
    inputs = read_inputs([str(path)], python=Version("3.9"))
    assert inputs.kind == "pylock"
    torch, = inputs.requirements
    assert torch.pinned == Version("2.7.0+cpu") and torch.local_label == "+cpu" and torch.hashes == ("sha256:ab12",)
    assert torch.index == "https://download.pytorch.org/whl/cpu"
    assert any("numpy does not apply" in s for s in inputs.skipped)


def test_a_file_that_is_not_a_lock_is_refused(tmp_path):
    path = write(tmp_path, "pylock.toml", "[tool]\nx = 1\n")
    with pytest.raises(InputError, match="not a PEP 751 lock file"):
        read_inputs([str(path)])


def test_logical_lines_keep_the_first_line_number():
    assert logical_lines("a \\\nb\n\n# c\nd") == [(1, "a b"), (5, "d")]


# --- from files to the resolver's request (compatmatrix.inputs.request) ---------------------------------------


def test_modelled_pins_go_to_the_resolver_constraints_limit_and_the_rest_passes_through(tmp_path, matrix):
    from compatmatrix.inputs.request import file_request
    from compatmatrix.matrix.model import Component

    write(tmp_path, "c.txt", "transformers<4.50\nnumpy<2\n")
    path = write(tmp_path, "r.txt", "-c c.txt\ntorch-ipex==2.3.0\ntransformers[torch]\nnumpy==1.26.4\ndatasets>=2\n")
    files = file_request(matrix, read_inputs([str(path)]))
    assert files.requirements == ("torch-ipex==2.3.0", "transformers")
    assert files.constraints == {Component.TRANSFORMERS: SpecifierSet("<4.50")}
    assert files.passthrough_lines == ("numpy==1.26.4", "datasets>=2")
    assert any("extras [torch] of transformers are left to pip" in note for note in files.notes)
    assert files.pinned == {"torch-ipex": "2.3.0", "numpy": "1.26.4"}  # names as written


def test_an_index_that_cannot_serve_a_pin_is_said(tmp_path, matrix):
    from compatmatrix.inputs.request import file_request

    # oneccl_bind_pt 2.3.0 lives on Intel's index only; a file that names only the PyTorch CPU index cannot get it
    path = write(tmp_path, "r.txt", "--index-url https://download.pytorch.org/whl/cpu\ntorch==2.3.0\noneccl_bind_pt==2.3.0\n")
    files = file_request(matrix, read_inputs([str(path)]))
    assert any("none of the file's indexes (pytorch-cpu) has oneccl_bind_pt 2.3.0" in w and "intel-cpu-us" in w for w in files.index_warnings)
    assert not any("torch 2.3.0" in w for w in files.index_warnings)


def test_an_extra_index_exposes_a_name_pypi_does_not_have(tmp_path, matrix):
    from compatmatrix.inputs.request import file_request

    path = write(tmp_path, "r.txt", "--extra-index-url https://pytorch-extension.intel.com/release-whl/stable/cpu/us/\noneccl_bind_pt==2.3.0\n"
                                    "intel-extension-for-pytorch==2.3.0\n")
    files = file_request(matrix, read_inputs([str(path)]))
    confusion = [w for w in files.index_warnings if "dependency confusion" in w]
    assert len(confusion) == 1 and "oneccl_bind_pt is not on PyPI" in confusion[0]  # IPEX is on PyPI itself: no warning for it
    assert any("is the matrix host 'intel-cpu-us'" in note for note in files.notes)


def test_an_unknown_index_is_named_and_no_guess_is_made(tmp_path, matrix):
    from compatmatrix.inputs.request import file_request

    path = write(tmp_path, "r.txt", "--index-url https://mirror.example.invalid/simple\noneccl_bind_pt==2.3.0\n")
    files = file_request(matrix, read_inputs([str(path)]))
    assert files.index_warnings == ()  # a private mirror may well serve it: compat does not guess
    assert any("is not a host in the matrix" in note for note in files.notes)


def test_a_constraint_pinning_a_gpu_build_is_refused(tmp_path, matrix):
    from compatmatrix.errors import UsageError
    from compatmatrix.inputs.request import file_request
    from compatmatrix.resolve import build_request, with_constraints
    from compatmatrix.target import Platform, PythonTarget

    write(tmp_path, "c.txt", "oneccl_bind_pt==2.5.0+xpu\n")
    path = write(tmp_path, "r.txt", "-c c.txt\noneccl_bind_pt\n")
    files = file_request(matrix, read_inputs([str(path)]))
    request = build_request(matrix, PythonTarget.parse("3.11"), Platform.from_tag("manylinux_2_28_x86_64"), None, (), files.requirements)
    with pytest.raises(UsageError, match="XPU build"):
        with_constraints(matrix, request, files.constraints)


# --- issue 30 item 6: read as pip reads it ---------------------------------------------------------------------------

ONECCL_38 = ("https://intel-extension-for-pytorch.s3.amazonaws.com/torch_ccl/cpu/"
             "oneccl_bind_pt-1.13.0%2Bcpu-cp38-cp38-linux_x86_64.whl#sha256=" + "ab" * 32)


@pytest.mark.parametrize("line", [
    f"oneccl_bind_pt @ {ONECCL_38}; python_version=='3.8'",  # no space before ';': pip splits a non-URL line at ';'
    f"oneccl_bind_pt @ {ONECCL_38} ; python_version=='3.8'",
    f"oneccl_bind_pt @ {ONECCL_38};python_version=='3.8'",
])
def test_a_url_requirement_with_its_marker_right_after_the_url_is_read_as_pip_reads_it(tmp_path, line):
    """pip/_internal/req/constructors.py parse_req_from_line (pypa/pip 6d30920): a line that is not itself a URL is
    split at its first ';' before packaging reads the requirement; packaging alone refuses the first form."""
    path = write(tmp_path, "r.txt", line + "\n")
    wrote = read_inputs([str(path)])
    (item,) = wrote.requirements
    assert item.name == "oneccl_bind_pt" and str(item.pinned) == "1.13.0+cpu" and item.url == ONECCL_38
    assert str(item.marker) == 'python_version == "3.8"'
    assert read_inputs([str(path)], Version("3.11")).requirements == ()  # the marker decides it, as for pip


def test_a_bare_wheel_url_takes_its_marker_after_a_semicolon_and_a_space(tmp_path):
    """pip: a line that is a URL is split at '; ' only (a ';' inside a URL stays part of it)."""
    path = write(tmp_path, "r.txt", ONECCL_38 + "; python_version=='3.8'\n")
    (item,) = read_inputs([str(path)]).requirements
    assert item.url == ONECCL_38 and str(item.marker) == 'python_version == "3.8"'
    assert read_inputs([str(path)], Version("3.11")).requirements == ()


def test_a_direct_wheel_url_gets_no_dependency_confusion_warning(tmp_path, matrix):
    """pip never asks an index for a `name @ URL` requirement (the old code warned about PyPI competing for it)."""
    from compatmatrix.inputs.request import file_request

    url = ("https://intel-extension-for-pytorch.s3.amazonaws.com/torch_ccl/cpu/oneccl_bind_pt-2.3.0%2Bcpu-cp311-cp311-linux_x86_64.whl")
    path = write(tmp_path, "r.txt", "--extra-index-url https://pytorch-extension.intel.com/release-whl/stable/cpu/us/\n"
                                    f"oneccl_bind_pt @ {url}\n{url}\n")
    files = file_request(matrix, read_inputs([str(path)]))
    assert not [w for w in files.index_warnings if "dependency confusion" in w], files.index_warnings


# --- issue 35: NAME[OP VERSION,...] lines are read without packaging.requirements; the same records as through it ----

SIMPLE_LINES = ["torch", "torch==2.7.0+cpu", "oneccl_bind_pt==2.7.0+cpu", "accelerate>=0.30,<1.13", "transformers<5.1,>=4.40",
                "Intel_Extension.For-PyTorch~=2.5.0", "torch ==2.7.0", "torch===2.7.0", "torch!=2.7.*,>=2", "torch==2.7.*",
                "torch>=2.7.0.dev1", "torch==1!2.0.post1", "a", "a1==0", "torch==2.7.0+CPU.1"]
NOT_SIMPLE = ["torch[extra]==2.7.0", "torch (==2.7.0)", "torch==2.7.0 ,<3", "torch==2.7.0, <3", "torch== 2.7.0", "torch @ https://h/t.whl",
              "torch==2.7.*+cpu", "torch==2.7.0+", "torch=<2", "-torch==1", "torch-==1", "torch==2.7.0,", "torch,==2", "torch==2..7"]


def _through_requirement(monkeypatch, text):
    from compatmatrix.inputs import read as module

    class Never:
        @staticmethod
        def fullmatch(text):
            return None

    with monkeypatch.context() as patch:
        patch.setattr(module, "_SIMPLE", Never)
        try:
            return module.parse_requirement(text, module.Origin("r.txt", 1))
        except InputError as exc:
            return ("error", str(exc), exc.fix)


@pytest.mark.parametrize("text", SIMPLE_LINES + NOT_SIMPLE)
def test_a_line_read_on_the_fast_path_is_what_requirement_reads(monkeypatch, text):
    from compatmatrix.inputs import read as module

    expected = _through_requirement(monkeypatch, text)
    try:
        got = module.parse_requirement(text, module.Origin("r.txt", 1))
    except InputError as exc:
        got = ("error", str(exc), exc.fix)
    assert got == expected
    if text in SIMPLE_LINES:
        assert module._SIMPLE.fullmatch(text) is not None and not isinstance(got, tuple)
    else:
        assert module._SIMPLE.fullmatch(text) is None or isinstance(got, tuple)  # a bad specifier: Requirement words the error


def test_any_name_and_specifier_line_reads_as_requirement_reads_it(monkeypatch):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from compatmatrix.inputs import read as module

    piece = st.text(alphabet="aZ09._-=<>!~*+,@[]() ;", min_size=1, max_size=18)

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._-]{0,6}", fullmatch=True), piece)
    def same(name, rest):
        text = (name + rest).strip()
        try:
            got = module.parse_requirement(text, module.Origin("r.txt", 1))
        except InputError as exc:
            got = ("error", str(exc), exc.fix)
        assert got == _through_requirement(monkeypatch, text)

    same()
