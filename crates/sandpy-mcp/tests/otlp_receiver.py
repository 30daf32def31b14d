"""A small OTLP trace receiver for the tests: decodes each export
(`ExportTraceServiceRequest`, protobuf) with the official `opentelemetry-proto` package and
appends one JSON line per span to a file. Over HTTP (`POST /v1/traces`) by default, over
gRPC (the `TraceService` of the same package, served by `grpcio`) with `--grpc`.

    otlp_receiver.py SPANS_FILE [--grpc]   # prints the port it listens on, then serves

Each line: {"name", "trace_id", "span_id", "parent_span_id" (hex, "" for a root),
"kind", "attributes" (a dict), "service"}.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def record(request):
    with open(sys.argv[1], "a") as out:
        for resource_spans in request.resource_spans:
            resource = {a.key: value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    out.write(json.dumps({
                        "name": span.name,
                        "trace_id": span.trace_id.hex(),
                        "span_id": span.span_id.hex(),
                        "parent_span_id": span.parent_span_id.hex(),
                        "kind": span.kind,
                        "attributes": {a.key: value(a.value) for a in span.attributes},
                        "service": resource.get("service.name"),
                    }) + "\n")


class Receiver(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the name http.server calls
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)
        record(request)
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


if "--grpc" in sys.argv[2:]:
    from concurrent import futures

    import grpc
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2_grpc

    class Service(trace_service_pb2_grpc.TraceServiceServicer):
        def Export(self, request, context):  # noqa: N802 - the name gRPC calls
            record(request)
            return ExportTraceServiceResponse()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Service(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    print(port, flush=True)
    server.wait_for_termination()
else:
    server = HTTPServer(("127.0.0.1", 0), Receiver)
    print(server.server_address[1], flush=True)
    server.serve_forever()
