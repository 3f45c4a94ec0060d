"""The `laya` shim end to end, as a user meets it: a fresh venv, `kime shim install`, then
packages that require laya (fixtures of our own, never real third-party ones) installed by pip
offline. No torch arrives, `pip check` is clean, the fixtures answer as kime's own API does,
laya's three console scripts answer as `kime decide`/`kime route`, `kime serve` and `kime mcp` do
and as laya's goldens say, and `pip uninstall laya` leaves kime working.

The venv has no pip and no packages of its own: a `.pth` shows it this checkout and the running
interpreter's site-packages (kime's dependencies, pip, the mcp SDK), as `.ci/run` does for its
CrewAI venv, so the test costs seconds, not a build of kime's wheel.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
import sysconfig
import textwrap
import time
import urllib.request
import venv
import zipfile
from pathlib import Path
from typing import Dict, List

import pytest

import kime
from kime.shim.wheel import shim_version

from ..hub_cache import bundle_cache
from ..paths import GOLDENS, ROOT, TINY

pytestmark = [pytest.mark.slow, pytest.mark.filterwarnings("ignore:kime. this checkpoint")]

SERVE = json.loads((GOLDENS / "serve.json").read_text(encoding="utf-8"))
ECOSYSTEM = json.loads((GOLDENS / "ecosystem.json").read_text(encoding="utf-8"))
QUESTIONS = ECOSYSTEM["rebound"]["questions"]
LONG_STATE = ECOSYSTEM["rebound"]["state"]

ROUTER_FIXTURE = '''
import laya
from laya import agent, common, hooks, serve, mcp


def answer(path, state, questions):
    """What a gateway does: laya.load, predict, and the tokenizer's count."""
    a = laya.load(path, device="cpu")
    return {"result": a.predict(state, questions), "tokens": len(a.tok(state)["input_ids"]),
            "mask": a.tok.mask_token, "version": laya.__version__,
            "noul_labels": tuple(int(p) for p in laya.__version__.split(".")[:3]) >= (0, 3, 8)}
'''
TAIL_FIXTURE = '''
from laya import agent as laya_agent
from laya.router import Router  # noqa: F401


def keep_tail():
    """What one MCP server does for --truncate-left: rebind laya.agent.build_sequence."""
    original = laya_agent.build_sequence

    def build_sequence(*args, **kwargs):
        if len(args) < 7:
            kwargs["truncate_left"] = True
        return original(*args, **kwargs)

    laya_agent.build_sequence = build_sequence
'''


def _wheel(directory: Path, name: str, requires: List[str], source: str) -> None:
    """A minimal pure-Python wheel of one module, `name` (dashes as underscores)."""
    module, version = name.replace("-", "_"), "1.0"
    info = "%s-%s.dist-info" % (module, version)
    files = [("%s.py" % module, source.encode()),
             (info + "/METADATA", ("Metadata-Version: 2.1\nName: %s\nVersion: %s\n%s" % (
                 name, version, "".join("Requires-Dist: %s\n" % r for r in requires))).encode()),
             (info + "/WHEEL", b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\n"
                               b"Tag: py3-none-any\n")]
    record = ["%s,sha256=%s,%d" % (n, base64.urlsafe_b64encode(hashlib.sha256(d).digest())
                                   .rstrip(b"=").decode(), len(d)) for n, d in files]
    files.append((info + "/RECORD", ("\n".join(record + [info + "/RECORD,,"]) + "\n").encode()))
    with zipfile.ZipFile(directory / ("%s-%s-py3-none-any.whl" % (module, version)), "w") as z:
        for n, d in files:
            z.writestr(n, d)


class Venv:
    def __init__(self, root: Path, env: Dict[str, str]):
        venv.EnvBuilder(with_pip=False).create(root)
        self.bin = root / "bin"
        self.python = str(self.bin / "python")
        site = subprocess.run([self.python, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True,
                              check=True).stdout.strip()
        self.site = Path(site)
        here = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
        (self.site / "kime-checkout.pth").write_text("\n".join([str(ROOT), *sorted(here)]) + "\n")
        self.env = env

    def run(self, *args: str, check: bool = True, timeout: float = 180,
            **extra: str) -> subprocess.CompletedProcess:
        done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout,
                              env=dict(self.env, **extra))
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def py(self, code: str, **extra: str) -> str:
        return self.run(self.python, "-c", textwrap.dedent(code), **extra).stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def shimmed(tmp_path_factory):
    root = tmp_path_factory.mktemp("shim")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("KIME_", "LAYA_", "PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(HF_HUB_CACHE=str(bundle_cache(root / "hub")), HF_HUB_OFFLINE="1",
               PYTHONWARNINGS="ignore", PIP_DISABLE_PIP_VERSION_CHECK="1")
    v = Venv(root / "venv", env)
    installed = v.run(v.python, "-m", "kime.cli", "shim", "install")
    assert shim_version() in installed.stdout
    fixtures = root / "fixtures"
    fixtures.mkdir()
    _wheel(fixtures, "fixture-gateway", ["laya>=0.4"], ROUTER_FIXTURE)
    _wheel(fixtures, "fixture-tail", ["laya[serve]>=0.4"], TAIL_FIXTURE)
    _wheel(fixtures, "fixture-pinned", ["laya==0.3.4"], "")
    v.fixtures = fixtures
    v.run(v.python, "-m", "pip", "install", "--no-index", "--find-links", str(fixtures),
          "fixture-gateway", "fixture-tail")
    return v


def test_no_torch_and_pip_check_is_clean(shimmed):
    said = json.loads(shimmed.py("""
        import importlib.metadata as m, importlib.util, json
        print(json.dumps({"torch": importlib.util.find_spec("torch") is not None,
                          "dists": sorted(d.metadata["Name"].lower() for d in m.distributions()
                                          if d.metadata["Name"]),
                          "laya": m.version("laya"),
                          "requires": m.requires("laya")}))"""))
    assert not said["torch"] and "torch" not in said["dists"]
    assert "transformers" not in said["dists"]
    assert said["laya"] == shim_version()
    assert "kime==%s" % kime.__version__ in said["requires"]
    check = shimmed.run(shimmed.python, "-m", "pip", "check")
    assert "No broken requirements" in check.stdout
    status = shimmed.run(shimmed.python, "-m", "kime.cli", "shim", "status")
    assert "served from kime in this interpreter" in status.stdout


def test_a_pin_to_another_laya_is_not_met(shimmed):
    done = shimmed.run(shimmed.python, "-m", "pip", "install", "--no-index", "--find-links",
                       str(shimmed.fixtures), "fixture-pinned", check=False)
    assert done.returncode != 0
    assert "laya==0.3.4" in done.stdout + done.stderr


def test_the_fixtures_answer_as_kimes_own_api(shimmed):
    said = json.loads(shimmed.py("""
        import json, fixture_gateway, fixture_tail
        qs = %r
        state = %r
        plain = fixture_gateway.answer(%r, state, qs)
        fixture_tail.keep_tail()
        tail = fixture_gateway.answer(%r, state, qs)
        print(json.dumps({"plain": plain, "tail": tail["result"]}))
    """ % (QUESTIONS, LONG_STATE, str(TINY), str(TINY))))
    agent = kime.load(str(TINY), device="cpu")
    plain = said["plain"]
    assert plain["result"] == agent.predict(LONG_STATE, QUESTIONS)
    assert plain["tokens"] == len(agent.tok(LONG_STATE)["input_ids"])
    assert plain["mask"] == agent.tok.mask_token
    assert plain["version"] == "0.4.15" and plain["noul_labels"]
    assert said["tail"]["answers"] != plain["result"]["answers"]
    assert said["tail"]["usage"] == plain["result"]["usage"]
    agent.close()


def test_laya_script_answers_as_kime_and_as_laya(shimmed):
    route = SERVE["cli"][0]
    done = shimmed.run(str(shimmed.bin / "laya"), *route["argv"])
    assert done.stdout == route["stdout"]
    kime_route = shimmed.run(shimmed.python, "-m", "kime.cli", "route", *route["argv"])
    assert kime_route.stdout == route["stdout"]
    predict = ECOSYSTEM["cli"][1]  # --predict --json
    done = shimmed.run(str(shimmed.bin / "laya"), *predict["argv"])
    assert done.stdout == predict["stdout"]
    for script in ("laya-train", "laya-evals"):
        refused = shimmed.run(str(shimmed.bin / script), check=False)
        assert refused.returncode == 2 and script in refused.stderr


def test_laya_serve_answers_as_kime_serve(shimmed):
    port = _free_port()
    server = subprocess.Popen([str(shimmed.bin / "laya-serve")], stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(shimmed.env, LAYA_PORT=str(port), LAYA_HOST="127.0.0.1",
                                       LAYA_MODELS="english"))
    try:
        url = "http://127.0.0.1:%d" % port
        deadline = time.monotonic() + 120
        while True:
            try:
                health = json.loads(urllib.request.urlopen(url + "/health", timeout=2).read())
                break
            except OSError:
                assert server.poll() is None, server.stderr.read() if server.stderr else ""
                assert time.monotonic() < deadline, "laya-serve did not come up"
                time.sleep(0.3)
        assert health["loaded"] == ["english"]
        body = json.dumps({"state": "Please refund me", "questions": QUESTIONS,
                           "model": "english"}).encode()
        request = urllib.request.Request(url + "/v1/systemone", data=body,
                                         headers={"Content-Type": "application/json"})
        got = json.loads(urllib.request.urlopen(request, timeout=60).read())
    finally:
        server.terminate()
        server.wait(timeout=30)
    agent = kime.load(str(TINY), device="cpu")
    want = agent.predict("Please refund me", QUESTIONS)
    agent.close()
    assert got["routing"]["model"] == "english"
    for qid, answer in want["answers"].items():  # the server adds Jev's keys, changes none
        assert {k: got["answers"][qid][k] for k in answer} == answer


def test_laya_mcp_server_lists_kime_mcps_tools(shimmed):
    anyio = pytest.importorskip("anyio")
    pytest.importorskip("mcp")
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    from kime.mcp.server import TOOL_NAMES

    params = StdioServerParameters(command=str(shimmed.bin / "laya-mcp-server"),
                                   env=dict(shimmed.env, LAYA_PRELOAD="0"))
    seen: Dict[str, object] = {}

    async def main() -> None:
        with open(os.devnull, "w") as quiet:
            async with stdio_client(params, errlog=quiet) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    seen["tools"] = sorted(t.name for t in (await session.list_tools()).tools)
                    route = await session.call_tool("laya_route", {
                        "state": {"text": SERVE["cli"][0]["argv"][0]}, "questions": QUESTIONS})
                    seen["route"] = route.content[0].text

    anyio.run(main)
    assert seen["tools"] == sorted(TOOL_NAMES)
    assert json.loads(str(seen["route"]))["model"] == "english", seen["route"]


def test_pip_uninstall_laya_leaves_kime_working(shimmed):
    # last in this module: the venv loses its laya
    shimmed.run(shimmed.python, "-m", "pip", "uninstall", "-y", "laya")
    said = json.loads(shimmed.py("""
        import importlib.util, json, kime
        print(json.dumps({"kime": kime.__version__,
                          "laya": importlib.util.find_spec("laya") is not None}))"""))
    assert said == {"kime": kime.__version__, "laya": False}
    assert not (shimmed.bin / "laya").exists() and not (shimmed.site / "laya_kime.pth").exists()
    status = shimmed.run(shimmed.python, "-m", "kime.cli", "shim", "status", check=False)
    assert status.returncode == 1 and "not installed" in status.stdout
