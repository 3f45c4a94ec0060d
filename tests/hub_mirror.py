"""A Hugging Face Hub mirror on loopback, serving Laya's bundle repo made of the committed test
checkpoints: what `HF_ENDPOINT` points huggingface_hub at, so a download runs for real (its
requests, its cache layout, its progress bars) without the network.

It answers the requests `snapshot_download` makes: the repo's revision (`/api/models/{repo}/
revision/{rev}`: its commit and files), its file tree (`/api/models/{repo}/tree/{rev}`), and
`HEAD`/`GET` of each file (`/{repo}/resolve/{rev}/{path}`, with the commit and ETag headers the
Hub sends). Anything else
is a 404, which huggingface_hub reports as the Hub would. `requests` lists what was asked.
"""
from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Dict, List, Tuple

from .paths import CHECKPOINTS

REPO = "convaiinnovations/laya"
COMMIT = "89abcdef0123456789abcdef0123456789abcdef"


def bundle_files() -> Dict[str, Path]:
    """The bundle repo's files by path: english (root) and typed-decisions are the tiny
    checkpoint, multilingual the multilingual-tiny one."""
    files: Dict[str, Path] = {}
    for prefix, source in (("", "tiny"), ("multilingual/", "multilingual-tiny"),
                           ("typed-decisions/", "tiny")):
        root = CHECKPOINTS / source
        for path in sorted(root.rglob("*")):
            if path.is_file():
                files[prefix + path.relative_to(root).as_posix()] = path
    return files


class HubMirror:
    """The mirror on a free 127.0.0.1 port until `stop`; `endpoint` is its HF_ENDPOINT."""

    def __init__(self) -> None:
        self.files = bundle_files()
        self.requests: List[Tuple[str, str]] = []
        mirror = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                mirror.requests.append(("HEAD", self.path))
                self._answer(body=False)

            def do_GET(self) -> None:
                mirror.requests.append(("GET", self.path))
                self._answer(body=True)

            def _answer(self, body: bool) -> None:
                path = self.path.split("?", 1)[0]
                info = "/api/models/%s/revision/" % REPO
                tree = "/api/models/%s/tree/" % REPO
                resolve = "/%s/resolve/" % REPO
                if path.startswith(tree):
                    data = json.dumps([{"type": "file", "path": name, "size": file.stat().st_size,
                                        "oid": hashlib.sha1(file.read_bytes()).hexdigest()}
                                       for name, file in mirror.files.items()])
                    self._send(200, data.encode(), {"content-type": "application/json"}, body)
                elif path.startswith(info):
                    data = json.dumps({"id": REPO, "modelId": REPO, "sha": COMMIT,
                                       "private": False, "siblings": [
                                           {"rfilename": name} for name in mirror.files]})
                    self._send(200, data.encode(), {"content-type": "application/json"}, body)
                elif path.startswith(resolve):
                    _rev, _, name = path[len(resolve):].partition("/")
                    if name not in mirror.files:
                        self._send(404, b"", {"x-error-code": "EntryNotFound"}, body)
                        return
                    blob = mirror.files[name].read_bytes()
                    self._send(200, blob, {"x-repo-commit": COMMIT,
                                           "etag": '"%s"' % hashlib.sha1(blob).hexdigest(),
                                           "content-type": "application/octet-stream"}, body)
                else:
                    self._send(404, b"", {"x-error-code": "RepoNotFound"}, body)

            def _send(self, status: int, data: bytes, headers: Dict[str, str],
                      body: bool) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                if body:
                    self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = "http://127.0.0.1:%d" % self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def downloaded(self) -> List[str]:
        """The files fetched with a GET, in order."""
        prefix = "/%s/resolve/" % REPO
        return [path[len(prefix):].partition("/")[2] for method, path in self.requests
                if method == "GET" and path.startswith(prefix)]

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
