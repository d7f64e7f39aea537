"""No secret is printed, logged, reported or exported (compatmatrix/redact.py; docs/guarantees.md).

An index URL with a password or a token, from each place compat takes one (a requirements file's --index-url,
--extra-index-url and -f; --index HOST=URL; COMPAT_INDEX_<HOST>; the config file's [indexes]), is run through every
command that shows or writes a URL: resolve -r, check -r, install --dry-run/--print, export requirements,
constraints, pip-command, pylock and dockerfile (text and --json), a usage error, the crash report, and download/
install from a FIXTURE index on 127.0.0.1 that demands those credentials (they must still reach compat's own
requests and pip). The secret appears in no stdout, stderr, JSON, written file or crash report; what is shown keeps
pip's form (user:****); what is exported has no credentials and says where pip/uv take them. A ${VAR}'s value is not
shown by check -r / resolve -r either: its name and file:line are.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from compatmatrix.redact import CREDENTIALS_NOTE, MASK, has_credentials, redact_text, redact_url, strip_credentials

from .cli.test_cli_fuzz import run_in_process

PASSWORD = "Pw-S3cr3t-7f4e"
TOKEN = "tok_9QxLr2VbN8"
SECRETS = (PASSWORD, TOKEN)
RUNNING = f"{sys.version_info.major}.{sys.version_info.minor}"


def _leaks(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


# --- the redaction rule itself ------------------------------------------------------------------------------------


def test_the_rule_is_pips():
    assert redact_url(f"https://alice:{PASSWORD}@mirror.example/simple") == f"https://alice:{MASK}@mirror.example/simple"
    assert redact_url(f"https://{TOKEN}@mirror.example/simple") == f"https://{MASK}@mirror.example/simple"
    assert redact_url("https://mirror.example/simple") == "https://mirror.example/simple"
    assert redact_url("git+https://github.com/org/repo@v1.0") == "git+https://github.com/org/repo@v1.0"  # an @ in the path is not a credential
    assert strip_credentials(f"https://alice:{PASSWORD}@[::1]:8443/simple") == "https://[::1]:8443/simple"
    assert redact_text(f"'--index pypi=https://a:{PASSWORD}@h/simple' refused") == f"'--index pypi=https://a:{MASK}@h/simple' refused"


HOSTS = ["mirror.example", "10.0.0.7", "[::1]", "[2001:db8::7]", "xn--bcher-kva.example"]
PATHS = ["", "/", "/simple", "/simple/", "/whl/cpu", "/a%20b/simple/?x=1#frag"]
USERS = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12)
SECRET_TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), min_size=6, max_size=24)


@st.composite
def credentialed_urls(draw):
    """(url, the secret as written in it, the secret decoded, the shape) for user only, user:pass, percent-encoded, token-only,
    IPv6 and ports."""
    host = draw(st.sampled_from(HOSTS))
    port = draw(st.sampled_from(["", ":8080", ":443", ":65535"]))
    path = draw(st.sampled_from(PATHS))
    scheme = draw(st.sampled_from(["https", "http", "git+https"]))
    secret = draw(SECRET_TEXT)
    written = urllib.parse.quote(secret, safe=draw(st.sampled_from(["", "!$&'()*+,;=-._~"])))
    shape = draw(st.sampled_from(["token", "user:pass", "user:", ":pass"]))
    user = urllib.parse.quote(draw(USERS), safe="")
    userinfo = {"token": written, "user:pass": f"{user}:{written}", "user:": f"{written}:", ":pass": f":{written}"}[shape]
    bare = f"{scheme}://{host}{port}{path}"
    assume(written not in bare and secret not in bare and (shape != "user:pass" or written not in user))
    return f"{scheme}://{userinfo}@{host}{port}{path}", written, secret, shape, bare


@settings(max_examples=200, deadline=None)
@given(case=credentialed_urls())
def test_no_shape_of_url_shows_its_secret(case):
    url, written, secret, shape, bare = case
    shown = redact_url(url)
    assert written not in shown.replace(MASK, "") and secret not in shown.replace(MASK, ""), (url, shown)
    assert MASK in shown
    assert strip_credentials(url) == bare and not has_credentials(bare) and has_credentials(url)
    shown_parts, parts = urllib.parse.urlsplit(shown), urllib.parse.urlsplit(url)
    assert (shown_parts.hostname, shown_parts.port, shown_parts.path, shown_parts.query) == (parts.hostname, parts.port, parts.path, parts.query)
    in_a_sentence = redact_text(f"compat: error: '{url}' (from --index) cannot be reached; also {url}.")
    assert written not in in_a_sentence.replace(MASK, ""), in_a_sentence


@pytest.mark.parametrize("url, shown, exported", [
    (f"https://h.example/simple?token={TOKEN}", f"https://h.example/simple?token={MASK}", "https://h.example/simple"),
    (f"https://h.example/simple/?x=1&access_token={TOKEN};y=2", f"https://h.example/simple/?x=1&access_token={MASK};y=2", "https://h.example/simple/?x=1&y=2"),
    (f"https://b.s3.example/links.html?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={TOKEN}&X-Amz-Security-Token={PASSWORD}",
     f"https://b.s3.example/links.html?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={MASK}&X-Amz-Security-Token={MASK}",
     "https://b.s3.example/links.html?X-Amz-Algorithm=AWS4-HMAC-SHA256"),
    (f"https://a.blob.example/c/links.html?sv=2024&sig={PASSWORD}", f"https://a.blob.example/c/links.html?sv=2024&sig={MASK}", "https://a.blob.example/c/links.html?sv=2024"),
    (f"https://h.example/s?api%5Fkey={TOKEN}#frag", f"https://h.example/s?api%5Fkey={MASK}#frag", "https://h.example/s#frag"),
    (f"https://alice:{PASSWORD}@h.example/s?key={TOKEN}", f"https://alice:{MASK}@h.example/s?key={MASK}", "https://h.example/s"),
    ("https://h.example/s?monkey=1&keys=2&key", "https://h.example/s?monkey=1&keys=2&key", "https://h.example/s?monkey=1&keys=2&key"),  # not secrets by name
    (f"https://h.example/s?accessToken={TOKEN}&x=1", f"https://h.example/s?accessToken={MASK}&x=1", "https://h.example/s?x=1"),  # camelCase
    (f"https://h.example/s?__token__={TOKEN}", f"https://h.example/s?__token__={MASK}", "https://h.example/s"),  # Akamai's
    # a URL with nothing secret stays exactly as written, whatever its separators
    ("https://h.example/p?a=1;b=2", "https://h.example/p?a=1;b=2", "https://h.example/p?a=1;b=2"),
    ("https://h.example/p?x=1&amp;y=2", "https://h.example/p?x=1&amp;y=2", "https://h.example/p?x=1&amp;y=2"),
    ("https://h.example/simple?", "https://h.example/simple?", "https://h.example/simple?"),
])
def test_a_secret_query_parameter_is_masked_where_shown_and_left_out_where_exported(url, shown, exported):
    assert redact_url(url) == shown and strip_credentials(url) == exported
    assert has_credentials(url) == (url != exported)
    assert redact_text(f"compat: error: {url} cannot be reached") == f"compat: error: {shown} cannot be reached"


# --- every command, every source -----------------------------------------------------------------------------------

PYPI = "https://pypi.org/simple"
TORCH_HOST = "https://download.pytorch.org/whl/cpu"


def _with_auth(url: str, userinfo: str) -> str:
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{userinfo}@{rest}"


def _source(kind: str, tmp_path: Path, monkeypatch) -> tuple[list[str], list[str]]:
    """(the arguments that name the secret URL, -r FILE arguments): one source of credentials at a time."""
    requirements = tmp_path / "requirements.txt"
    pins = "torch==2.7.0\n"
    if kind == "file --index-url":
        requirements.write_text(f"--index-url {_with_auth(PYPI, 'alice:' + PASSWORD)}\n{pins}")
    elif kind == "file --extra-index-url":
        requirements.write_text(f"--extra-index-url {_with_auth(TORCH_HOST, TOKEN)}\n{pins}")
    elif kind == "file query token":
        requirements.write_text(f"--extra-index-url {TORCH_HOST}?token={TOKEN}\n{pins}")
    elif kind == "file -f":
        requirements.write_text(f"-f {_with_auth('https://find.example/links/', 'bob:' + PASSWORD)}\n{pins}")
    else:
        requirements.write_text(pins)
    files = ["-r", str(requirements)]
    if kind == "--index":
        return ["--index", f"pytorch-cpu={_with_auth(TORCH_HOST, 'alice:' + PASSWORD)}"], files
    if kind == "--index signed URL":  # an S3-style presigned URL: its secrets are query parameters
        return ["--index", f"pytorch-cpu={TORCH_HOST}/?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={TOKEN}&X-Amz-Signature={PASSWORD}"], files
    if kind == "COMPAT_INDEX_*":
        monkeypatch.setenv("COMPAT_INDEX_PYPI", _with_auth("https://pypi.mirror.example/simple", TOKEN))
        monkeypatch.setenv("COMPAT_INDEX_PYTORCH_CPU", _with_auth(TORCH_HOST, "alice:" + PASSWORD))
    if kind == "config file":
        config = tmp_path / "config.toml"
        config.write_text(f'[indexes]\npytorch-cpu = "{_with_auth(TORCH_HOST, "alice:" + PASSWORD)}"\npypi = "{_with_auth(PYPI, TOKEN)}"\n')
        monkeypatch.setenv("COMPAT_CONFIG", str(config))
    return [], files


SOURCES = ["file --index-url", "file --extra-index-url", "file query token", "file -f", "--index", "--index signed URL", "COMPAT_INDEX_*", "config file"]
COMMANDS = {
    "resolve -r": (["resolve"], False),
    "resolve -r --json": (["resolve", "--json"], False),
    "check -r": (["check"], False),
    "check -r --json": (["check", "--json"], False),
    "install --dry-run": (["install", "--dry-run", "--python-version", RUNNING], True),
    "install --dry-run --json": (["install", "--dry-run", "--json", "--python-version", RUNNING], True),
    "install --print requirements": (["install", "--print", "requirements", "--python-version", RUNNING], True),
    "export requirements": (["export", "requirements", "--python-version", RUNNING], True),
    "export constraints": (["export", "constraints", "--python-version", RUNNING], True),
    "export pip-command": (["export", "pip-command", "--python-version", RUNNING], True),
    "export pylock": (["export", "pylock", "--python-version", RUNNING], True),
    "export dockerfile": (["export", "dockerfile", "--python-version", RUNNING], True),
}
EXPORTS = ("install --print requirements", "export requirements", "export constraints", "export pip-command", "export pylock")


def _run(argv, capsys) -> tuple[int, str, str]:
    return run_in_process(argv, capsys)


def test_the_document_rules_walk_keys_values_lists_and_tuples_alike():
    """redact_document, strip_document and console.json_safe: one walk (redact.map_strings), each its own rule."""
    from compatmatrix.console import json_safe
    from compatmatrix.redact import redact_document, strip_document

    url = "https://user:secret@example.org/simple"
    document = {url: [url, (url, 1), {"k": url, "n": None}], "name-\udcff": "\udcff"}
    assert redact_document(document) == {"https://user:****@example.org/simple": ["https://user:****@example.org/simple",
                                         ["https://user:****@example.org/simple", 1], {"k": "https://user:****@example.org/simple", "n": None}],
                                         "name-\udcff": "\udcff"}
    plain = "https://example.org/simple"
    assert strip_document(document) == {plain: [plain, [plain, 1], {"k": plain, "n": None}], "name-\udcff": "\udcff"}
    assert json_safe(document)["name-\\xff"] == "\\xff" and json_safe(document)[url][1] == [url, 1]


@pytest.mark.parametrize("source", SOURCES)
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_no_command_prints_or_exports_a_credential(command, source, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    monkeypatch.delenv("COMPAT_MATRIX", raising=False)
    words, _ = COMMANDS[command]
    index_args, files = _source(source, tmp_path, monkeypatch)
    argv = [*words, *files, *index_args]  # resolve/check have no --index: then the usage error quotes it, masked
    code, out, err = _run(argv, capsys)
    assert code in (0, 1, 2), (argv, err)
    assert "internal error" not in err, err
    assert not _leaks(out + err), (command, source, out[-1500:], err[-1500:])
    assert not list(tmp_path.glob("compat-crash-*"))
    if command.endswith("--json") and code in (0, 1):
        json.loads(out)  # still a document
    if command in EXPORTS and code == 0 and source in ("--index", "--index signed URL", "COMPAT_INDEX_*", "config file"):
        if command != "export constraints":  # constraints have no index lines
            assert "download.pytorch.org/whl/cpu" in out and CREDENTIALS_NOTE in out  # the URL stays, without credentials, and says where they come from
    if command in ("resolve -r", "resolve -r --json", "check -r --json") and source.startswith("file") and code in (0, 1):
        assert MASK in out + err  # shown as pip shows it


def test_a_pass_through_url_with_credentials_is_exported_without_them(tmp_path, capsys):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch==2.7.0\nmypkg @ https://alice:{PASSWORD}@files.example/mypkg-1.0-py3-none-any.whl\n")
    for kind in ("requirements", "constraints", "pip-command", "pylock", "dockerfile"):
        code, out, err = _run(["export", kind, "--python-version", RUNNING, "-r", str(requirements)], capsys)
        assert code == 0, err
        assert not _leaks(out + err), (kind, out)
        if kind != "dockerfile":
            assert CREDENTIALS_NOTE in out, kind


@pytest.mark.parametrize("left_raw", ["/", "?", "#"])
def test_a_password_with_an_unencoded_delimiter_is_masked_and_not_exported(left_raw, tmp_path, capsys):
    """The defect: a password holding '/', '?' or '#' not percent-encoded ends the URL's authority early (its "port" is
    no number), so neither the mask nor the export's stripping found the '@': the secret was printed by check/install
    and written into export requirements/pip-command/pylock."""
    secret = f"{PASSWORD[:4]}{left_raw}{PASSWORD[4:]}"
    url = f"https://alice:{secret}@files.example/mypkg-1.0-py3-none-any.whl"
    assert redact_url(url) == f"https://alice:{MASK}@files.example/mypkg-1.0-py3-none-any.whl"
    assert strip_credentials(url) == "https://files.example/mypkg-1.0-py3-none-any.whl"
    assert redact_url(f"git+https://alice:{secret}@github.com/o/r.git@v1") == f"git+https://alice:{MASK}@github.com/o/r.git@v1"
    for untouched in ("https://mirror.example:8080/p@ref", "git+https://github.com/org/repo@v1.0", "https://[::1]:80/a@b"):
        assert redact_url(untouched) == untouched == strip_credentials(untouched)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch==2.7.0\nmypkg @ {url}\n--extra-index-url https://bob:{secret}@mirror.example/simple\n")
    for argv in (["check"], ["resolve"], ["install", "--dry-run"], *(["export", kind] for kind in ("requirements", "constraints", "pip-command", "pylock"))):
        code, out, err = _run([*argv, "--python-version", RUNNING, "-r", str(requirements)], capsys)
        assert code in (0, 1), (argv, err)
        assert PASSWORD[4:] not in out + err, (argv, out + err)


def test_the_crash_report_and_its_sentence_mask_credentials(tmp_path, monkeypatch, capsys):
    import compatmatrix.cli as cli

    url = _with_auth(TORCH_HOST, "alice:" + PASSWORD)

    def broken(args):
        raise RuntimeError(f"injected by the test while reading {url}")

    monkeypatch.setitem(cli.COMMANDS, "install", broken)
    monkeypatch.setenv("COMPAT_CRASH_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "argv", ["compat", "install", "--dry-run", "--index", f"pytorch-cpu={url}"])
    code, out, err = _run(["install", "--dry-run", "--index", f"pytorch-cpu={url}"], capsys)
    assert code == 2 and "internal error" in err
    reports = list(tmp_path.glob("compat-crash-*.txt"))
    assert len(reports) == 1
    report = reports[0].read_text()
    assert "injected by the test" in report and f"alice:{MASK}@download.pytorch.org" in report
    assert not _leaks(out + err + report), (err, report)


def test_a_usage_error_that_quotes_the_url_masks_it(capsys):
    code, out, err = _run(["install", "--installer", _with_auth(TORCH_HOST, TOKEN)], capsys)  # argparse: "invalid choice: 'https://...'"
    assert code == 2 and "invalid choice" in err
    assert not _leaks(out + err) and MASK in err


def test_a_bad_url_with_credentials_is_refused_without_showing_them(capsys):
    code, out, err = _run(["install", "--dry-run", "--python-version", RUNNING, "--index", f"pytorch-cpu=ftp://alice:{PASSWORD}@host/x"], capsys)
    assert code == 2 and "ftp://" in err
    assert not _leaks(out + err)


# --- ${VAR} ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("line", ["torch==${SECRET_VALUE}", "-r ${SECRET_VALUE}", "mypkg @ https://files.example/x.whl?t=${SECRET_VALUE} --bogus",
                                  "--extra-index-url ${SECRET_VALUE} --bogus"])
@pytest.mark.parametrize("command", ["check", "resolve"])
def test_a_variables_value_is_not_shown_its_name_and_line_are(line, command, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SECRET_VALUE", f"2.7.0;{TOKEN}")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"# pins\n{line}\n")
    code, out, err = _run([command, "-r", str(requirements)], capsys)
    assert code == 2, (out, err)
    assert not _leaks(out + err), err
    assert "${SECRET_VALUE}" in err and f"{requirements}:2" in err


def test_an_index_line_from_a_variable_is_noted_by_its_name(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PRIVATE_INDEX", f"https://{TOKEN}@private.example/simple")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("--extra-index-url ${PRIVATE_INDEX}\n-f https://find.example/${PRIVATE_INDEX}\ntorch==2.7.0\n")
    for argv in (["resolve", "-r", str(requirements)], ["check", "-r", str(requirements), "--json"]):
        code, out, err = _run(argv, capsys)
        assert code in (0, 1), err
        assert not _leaks(out + err), out
        assert "${PRIVATE_INDEX}" in out


@pytest.mark.parametrize("line", ["mypkg @ https://files.example/mypkg-1.0-py3-none-any.whl?t=${SECRET_VALUE}", "${SECRET_VALUE}==1.0",
                                  "torch[${SECRET_VALUE}]==2.7.0", 'six==1.0 ; python_version == "${SECRET_VALUE}"',
                                  'six==1.0 ; platform_release == "${SECRET_VALUE}"', "numpy==1.0 -i ${SECRET_VALUE}"])
def test_a_line_that_reads_a_variable_is_said_and_exported_without_its_value(line, tmp_path, monkeypatch, capsys):
    """The defect: a line that reads well, with a ${VAR} in it, was shown with the value in check -r / resolve -r
    (pass-through lines, extras, markers, ignored options) and written with it into every export."""
    monkeypatch.setenv("SECRET_VALUE", f"x{TOKEN}")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text(f"torch==2.7.0\nsix==1.16.0\n{line}\n")
    kinds = [["export", kind] for kind in ("requirements", "constraints", "pip-command", "pylock", "dockerfile")]
    for argv in (["check"], ["check", "--json"], ["resolve"], ["resolve", "--json"], ["install", "--dry-run"], ["install", "--print", "requirements"], *kinds):
        code, out, err = _run([*argv, "--python-version", "3.11", "-r", str(requirements)], capsys)
        assert code in (0, 1), (argv, err)
        assert not _leaks(out + err), (argv, out + err)
        if argv[:1] == ["export"] and argv[1] in ("requirements", "constraints", "pip-command", "pylock"):
            assert "six" in out  # the other lines are still written


# --- an index that demands the credentials: they still reach compat's requests and pip, and nothing shows them ----------


@pytest.fixture()
def private_index(tmp_path):
    from .install_helpers import served, stack_index

    index = stack_index(tmp_path)
    index.auth = f"alice:{PASSWORD}"
    with served(index):
        yield index


def _authenticated_args(index) -> list[str]:
    return [arg for host in index.hosts for arg in ("--index", f"{host}={_with_auth(index.host_url(host), 'alice:' + PASSWORD)}")]


def _files_text(folder: Path) -> str:
    return "".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".whl"))


@pytest.mark.integration
@pytest.mark.parametrize("how", ["--index", "COMPAT_INDEX_*"])
def test_download_from_a_private_index_uses_the_credentials_and_shows_none(private_index, how, tmp_path):
    from .install_helpers import PLATFORM, STACK, compat

    house = tmp_path / "house"
    args = _authenticated_args(private_index)
    env = {}
    if how == "COMPAT_INDEX_*":
        env = {f"COMPAT_INDEX_{args[i + 1].split('=', 1)[0].upper().replace('-', '_')}": args[i + 1].split("=", 1)[1] for i in range(0, len(args), 2)}
        args = []
    crash = tmp_path / "crash"
    crash.mkdir()
    env["COMPAT_CRASH_DIR"] = str(crash)
    for extra in ([], ["--json"]):
        done = compat("download", "-d", str(house), *PLATFORM, *STACK, *args, *extra, env=env)
        assert done.returncode == 0, done.stdout + done.stderr
        assert not _leaks(done.stdout + done.stderr), done.stderr
    assert any(p.name.startswith("torch-2.7.0") for p in house.glob("*.whl"))
    assert any("/files/" in path for path in private_index.authorized)  # the wheels came with the credentials
    assert not _leaks(_files_text(house)) and not list(crash.iterdir())
    dry = compat("install", "--dry-run", *PLATFORM, *STACK, *args, env=env)
    assert dry.returncode == 0 and not _leaks(dry.stdout + dry.stderr), dry.stderr
    assert "pytorch-cpu" in dry.stderr and f"alice:{MASK}@" in dry.stderr


def test_pips_command_line_carries_no_credentials_its_environment_does():
    from compatmatrix.install.indexes import IndexLocation
    from compatmatrix.install.runner import _index_args, index_env

    private = IndexLocation("pypi", _with_auth(PYPI, "alice:" + PASSWORD), "index", "--index")
    assert not _leaks(" ".join(_index_args(private)))
    assert index_env(private) == {"PIP_INDEX_URL": private.url} and index_env(private, "uv") == {"UV_INDEX_URL": private.url}
    public = IndexLocation("pypi", PYPI, "index", "matrix")
    assert _index_args(public) == ["--index-url", PYPI] and index_env(public) == {}


@pytest.mark.integration
@pytest.mark.parametrize("installer", ["pip", "uv"])
def test_install_from_a_private_index_uses_the_credentials_and_shows_none(private_index, installer, tmp_path):
    from compatmatrix.install.runner import uv_binary

    from .install_helpers import STACK, compat, make_venv

    if installer == "uv" and uv_binary() is None:
        pytest.skip("uv is not installed (pip install uv)")
    venv = make_venv(tmp_path / "venv")
    cache = tmp_path / "cache"
    done = compat("install", "--python", str(venv), "--yes", "--installer", installer, *STACK, *_authenticated_args(private_index),
                  env={"XDG_CACHE_HOME": str(cache)})
    assert done.returncode == 0, done.stdout + done.stderr
    assert not _leaks(done.stdout + done.stderr), done.stderr
    assert not _leaks(_files_text(cache))  # the wheel store keeps the index URL without credentials
    wrong = compat("install", "--python", str(venv), "--dry-run", *STACK,
                   *[a.replace(PASSWORD, "wrong") for a in _authenticated_args(private_index)])
    assert not _leaks(wrong.stdout + wrong.stderr)


@pytest.mark.parametrize("content", [f"machine pypi.example login alice password {PASSWORD}\n", f"AWS_SECRET_ACCESS_KEY={TOKEN}\n",
                                     f"torch==2.7.0 ; {TOKEN}\n"])
@pytest.mark.parametrize("command", ["check", "resolve"])
def test_a_file_that_is_not_a_requirements_file_is_not_echoed(content, command, tmp_path, capsys):
    """`-r ~/.netrc` or a .env by mistake: the error names the file and line and the name the line starts with, not the rest."""
    wrong = tmp_path / "not-requirements.txt"
    wrong.write_text("# a comment\n" + content)
    code, out, err = _run([command, "-r", str(wrong)], capsys)
    assert code == 2, err
    assert f"{wrong}:2" in err and ("is not a requirement pip accepts" in err or "Write the marker with PEP 508 names" in err), err
    assert not _leaks(out + err), err


def test_a_line_under_the_progress_bars_is_masked_too(capsys):
    """On a terminal the install's lines go through rich's progress console, not cli._say_error."""
    from compatmatrix.install.progress import Bars

    bars = Bars(lambda line: None)
    bars.line(f"  preflight: {_with_auth(TORCH_HOST, 'alice:' + PASSWORD)} answers")
    out, err = capsys.readouterr()
    assert f"alice:{MASK}@download.pytorch.org" in out + err and not _leaks(out + err)


# --- pass-through lines reach pip by a private file, never its command line ----------------------------------------

_RECORDING_PIP = '''
import json, os, stat, sys
args = sys.argv[1:]
files = {}
for flag, value in zip(args, args[1:]):
    if flag == "-r":
        files[value] = {"text": open(value).read(), "mode": stat.S_IMODE(os.stat(value).st_mode),
                        "folder_mode": stat.S_IMODE(os.stat(os.path.dirname(value)).st_mode)}
    if flag == "--report":
        open(value, "w").write(json.dumps({"install": []}))
open(os.environ["RECORD_TO"], "w").write(json.dumps({"argv": args, "files": files}))
'''


def test_a_pass_through_line_with_credentials_reaches_pip_in_a_private_file_not_argv(tmp_path, monkeypatch):
    """Every user of the machine can read a command line (/proc/PID/cmdline): a pass-through requirement that names a
    URL with a password (``name @ https://user:pw@host/...``) goes to pip as ``-r FILE``, a file only this user can read,
    gone afterwards. A recording stand-in for pip (a FIXTURE script) keeps the arguments it was given."""
    from compatmatrix.install.indexes import IndexLocation
    from compatmatrix.install.planners import pip_report

    recorder = tmp_path / "recording_pip.py"
    recorder.write_text(_RECORDING_PIP)
    record = tmp_path / "record.json"
    monkeypatch.setenv("RECORD_TO", str(record))
    line = f"private-pkg @ https://alice:{PASSWORD}@wheels.example/private_pkg-1.0-py3-none-any.whl"
    index = IndexLocation("pypi", "https://pypi.org/simple", "index", "matrix")
    assert pip_report([sys.executable, str(recorder)], sys.executable, [], index, [line, "requests==2.31.0"]) == []
    seen = json.loads(record.read_text())
    assert not _leaks(" ".join(seen["argv"])), seen["argv"]
    assert "requests==2.31.0" not in seen["argv"]
    (path, written), = seen["files"].items()
    assert written["text"].splitlines() == [line, "requests==2.31.0"]
    assert written["mode"] == 0o600 and written["folder_mode"] == 0o700
    assert not Path(path).exists()
