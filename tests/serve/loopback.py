"""`kime serve`'s app under uvicorn on a free loopback port, in a thread of this process: the
server the robustness and schemathesis tests talk to."""
from __future__ import annotations

import json
import socket
import threading
import time
import urllib.error
import urllib.request
from typing import Any, Tuple

import kime

from .. import paths

TINY = str(paths.TINY)


class LoopbackServer:
    """`kime serve`'s app under uvicorn on a free loopback port, in a thread of this process."""

    def __init__(self, engine: kime.Kime, **settings: Any):
        import uvicorn

        from kime.serve import Settings, create_app
        from kime.serve.protocol import with_header_deadline

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        settings_ = Settings(model=engine.model_id, workers=4, **settings)
        config = uvicorn.Config(create_app(engine, settings_), host="127.0.0.1", port=self.port,
                                log_level="error", lifespan="on",
                                http=with_header_deadline(settings_.header_read_timeout))
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        end = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > end:
                raise AssertionError("kime serve did not start")
            time.sleep(0.01)

    def post(self, path: str, raw: bytes) -> Tuple[int, Any]:
        req = urllib.request.Request("http://127.0.0.1:%d%s" % (self.port, path), data=raw,
                                     method="POST", headers={"content-type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
