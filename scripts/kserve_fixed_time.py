#!/usr/bin/env python3
"""A KServe v2 HTTP server on 127.0.0.1 whose one model answers every request after a fixed time.

A test double for `capsim replay --endpoint` (the real server to check the queue and batcher
against is Triton): it serves `GET /v2/health/ready`, `GET /v2/models/NAME` (one INT64 input of
shape [-1, -1]) and `POST /v2/models/NAME/infer`, which sleeps `--time-ms` and answers. Every
request is served in its own thread, so requests never wait for each other. It picks a free port,
writes it to `--port-file` once listening, and runs until killed.

    python3 scripts/kserve_fixed_time.py --model fixed --time-ms 5 --port-file /tmp/port
"""
import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="fixed")
    parser.add_argument("--time-ms", type=float, default=5.0)
    parser.add_argument("--port-file", required=True)
    args = parser.parse_args()
    metadata = json.dumps({
        "name": args.model,
        "versions": ["1"],
        "platform": "capsim-fixed-time",
        "inputs": [{"name": "input_ids", "datatype": "INT64", "shape": [-1, -1]}],
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [-1, 2]}],
    }).encode()
    answer = json.dumps({
        "model_name": args.model,
        "outputs": [{"name": "logits", "datatype": "FP32", "shape": [1, 2], "data": [0.0, 1.0]}],
    }).encode()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def reply(self, status: int, body: bytes) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (the standard library's name)
            if self.path == "/v2/health/ready":
                self.reply(200, b"")
            elif self.path == f"/v2/models/{args.model}":
                self.reply(200, metadata)
            else:
                self.reply(404, json.dumps({"error": f"unknown path {self.path}"}).encode())

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length", 0))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path != f"/v2/models/{args.model}/infer":
                self.reply(404, json.dumps({"error": f"unknown model path {self.path}"}).encode())
                return
            if not body.get("inputs"):
                self.reply(400, json.dumps({"error": "no inputs"}).encode())
                return
            time.sleep(args.time_ms / 1000.0)
            self.reply(200, answer)

        def log_message(self, *_: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(args.port_file, "w", encoding="utf-8") as f:
        f.write(str(server.server_address[1]))
    server.serve_forever()


if __name__ == "__main__":
    main()
