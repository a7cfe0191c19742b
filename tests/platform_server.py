"""An embedding service of its own shape for tests (stdlib HTTP on 127.0.0.1): the example
platform of the LazyLLM seed's ``OnlineEmbeddingModuleBase`` block, answering
``{"embeddings": [{"embedding": v}]}`` to ``{"input": [text], ...}`` with
:meth:`OpenAIServer.embedding`'s vectors."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from openai_server import OpenAIServer


class PlatformServer:
    """A service answering ``{"embeddings": [{"embedding": v}]}`` for ``{"input": [text]}``
    (the seed's example platform); ``bodies`` logs what it received."""

    def __init__(self, dim: int = 6) -> None:
        owner = self
        self.dim = dim
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # quiet
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.bodies.append(body)
                owner.auth.append(self.headers.get("Authorization"))
                vec = OpenAIServer.embedding(body["input"][0], owner.dim).tolist()
                out = json.dumps({"embeddings": [{"embedding": vec}]}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/embed"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> PlatformServer:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
