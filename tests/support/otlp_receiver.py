#!/usr/bin/env python3
"""A small real OTLP/HTTP trace receiver for voxgate's telemetry tests (Jaeger stand-in).

Usage: otlp_receiver.py PORT OUT_JSONL      (PORT 0 picks a free port)

Listens on 127.0.0.1. The first stdout line is `PORT <n>`. Appends JSON lines to OUT_JSONL:
- {"kind": "span", trace_id, span_id, parent_span_id (hex, "" for a root), name, span_kind,
   attributes {}, resource {}, scope, status {code, message}, events [{name, attributes}]}
  for every span of every POST /v1/traces (application/x-protobuf, or OTLP/JSON
  application/json; gzip bodies accepted);
- {"kind": "request", method, path, headers {lower-case name: value}} for every request, so a test
  can also point a tool's outgoing HTTP call here and check the `traceparent` it carried. A GET of
  `.../esearch.fcgi` or `.../efetch.fcgi` answers with NCBI's recorded E-utilities XML from
  tests/fixtures/pubmed (the esearch listing's first PMID is the efetch fixture's first article, so
  a `search_pubmed` call completes with that article); any other GET answers 200 {"ok": true}.

Needs `opentelemetry-proto` and `protobuf` (the test venv `.venv-test`, see scripts/test).
"""

import base64
import gzip
import json
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

WRITE_LOCK = threading.Lock()
ID_FIELDS = ("traceId", "spanId", "parentSpanId")
PUBMED_FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "pubmed"
# esearch1's first PMID, and the first article of the efetch fixture (pubmed1): voxgate keeps only
# the articles esearch listed, so the listing is made to name that article.
ESEARCH_FIRST_PMID = b"<Id>41282813</Id>"
EFETCH_PMID = b"<Id>12091962</Id>"


def eutils_answer(path):
    """NCBI's recorded XML for an E-utilities path, or None for any other path."""
    endpoint = urlsplit(path).path.rsplit("/", 1)[-1]
    if endpoint == "esearch.fcgi":
        listing = (PUBMED_FIXTURES / "biopython_esearch1.xml").read_bytes()
        return listing.replace(ESEARCH_FIRST_PMID, EFETCH_PMID, 1)
    if endpoint == "efetch.fcgi":
        return (PUBMED_FIXTURES / "biopython_pubmed1.xml").read_bytes()
    return None


def any_value(value):
    """An OTLP AnyValue as plain JSON."""
    which = value.WhichOneof("value")
    if which is None:
        return None
    if which == "array_value":
        return [any_value(v) for v in value.array_value.values]
    if which == "kvlist_value":
        return {kv.key: any_value(kv.value) for kv in value.kvlist_value.values}
    if which == "bytes_value":
        return value.bytes_value.hex()
    return getattr(value, which)


def attributes(key_values):
    return {kv.key: any_value(kv.value) for kv in key_values}


def hex_ids_to_base64(node):
    """OTLP/JSON writes trace and span ids as hex; protobuf's JSON parser expects base64 bytes."""
    if isinstance(node, dict):
        for key, val in node.items():
            if key in ID_FIELDS and isinstance(val, str):
                node[key] = base64.b64encode(bytes.fromhex(val)).decode()
            else:
                hex_ids_to_base64(val)
    elif isinstance(node, list):
        for item in node:
            hex_ids_to_base64(item)
    return node


def span_lines(request):
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "kind": "span",
                    "trace_id": span.trace_id.hex(),
                    "span_id": span.span_id.hex(),
                    "parent_span_id": span.parent_span_id.hex(),
                    "name": span.name,
                    "span_kind": Span.SpanKind.Name(span.kind),
                    "attributes": attributes(span.attributes),
                    "resource": resource,
                    "scope": scope_spans.scope.name,
                    "status": {
                        "code": Status.StatusCode.Name(span.status.code),
                        "message": span.status.message,
                    },
                    "events": [
                        {"name": event.name, "attributes": attributes(event.attributes)}
                        for event in span.events
                    ],
                }


class Handler(BaseHTTPRequestHandler):
    out_path = None

    def record(self, lines):
        with WRITE_LOCK, open(self.out_path, "a", encoding="utf-8") as out:
            for line in lines:
                out.write(json.dumps(line, sort_keys=True) + "\n")
            out.flush()

    def request_line(self):
        headers = {name.lower(): value for name, value in self.headers.items()}
        return {"kind": "request", "method": self.command, "path": self.path, "headers": headers}

    def reply(self, status, content_type, body):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self.record([self.request_line()])
        xml = eutils_answer(self.path)
        if xml is not None:
            self.reply(200, "text/xml", xml)
        else:
            self.reply(200, "application/json", b'{"ok": true}')

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if self.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip().lower()
        lines = [self.request_line()]
        if self.path.rstrip("/") != "/v1/traces":
            self.record(lines)
            self.reply(404, "text/plain", b"only /v1/traces")
            return
        request = ExportTraceServiceRequest()
        try:
            if content_type == "application/json":
                json_format.ParseDict(hex_ids_to_base64(json.loads(body)), request)
            else:
                request.ParseFromString(body)
        except Exception as err:  # a malformed export is recorded and refused, never fatal
            lines.append({"kind": "error", "error": str(err)})
            self.record(lines)
            self.reply(400, "text/plain", b"bad export request")
            return
        lines.extend(span_lines(request))
        self.record(lines)
        if content_type == "application/json":
            self.reply(200, "application/json", b"{}")
        else:
            response = ExportTraceServiceResponse().SerializeToString()
            self.reply(200, "application/x-protobuf", response)

    def log_message(self, format, *args):  # keep the test's stderr quiet
        pass


def main(argv):
    if len(argv) != 3:
        sys.stderr.write("usage: otlp_receiver.py PORT OUT_JSONL\n")
        return 2
    Handler.out_path = argv[2]
    open(Handler.out_path, "a", encoding="utf-8").close()
    server = ThreadingHTTPServer(("127.0.0.1", int(argv[1])), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
