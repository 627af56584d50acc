#!/usr/bin/env python3
"""Checks for fabperf report's outputs (used by ci/report-check.sh).

  check.py openmetrics FILE         FILE parses with prometheus_client's strict OpenMetrics parser
  check.py prometheus FILE          FILE parses with prometheus_client's text-format (0.0.4) parser
  check.py dashboard JSON EXPO      the Grafana dashboard only queries metric families EXPO has
  check.py gateway PORTFILE BODY CODE   a one-request fake Pushgateway on 127.0.0.1: writes its
                                    port to PORTFILE, stores the PUT body in BODY, answers CODE

Exit 0 when the check holds, 1 with the reason otherwise.
"""
import http.server
import json
import re
import sys

EXPECTED = {
    "fabperf_bandwidth_bytes_per_second",
    "fabperf_latency_seconds",
    "fabperf_cpu_ratio",
    "fabperf_udp_loss_ratio",
    "fabperf_duration_seconds",
    "fabperf_http_requests_per_second",
    "fabperf_http_failed_requests",
    "fabperf_path_mtu_bytes",
    "fabperf_port_rate_bytes_per_second",
    "fabperf_run_cells",
}
LABELS = {"run", "test", "kind", "size", "path", "src_node", "dst_node"}


def fail(msg):
    print(f"check.py: {msg}", file=sys.stderr)
    sys.exit(1)


def families(text, parser):
    fams = list(parser(text))
    names = {f.name for f in fams}
    samples = [s for f in fams for s in f.samples]
    return fams, names, samples


def check_exposition(path, strict):
    text = open(path, encoding="utf-8").read()
    if strict:
        from prometheus_client.openmetrics.parser import text_string_to_metric_families
    else:
        from prometheus_client.parser import text_string_to_metric_families
    try:
        fams, names, samples = families(text, text_string_to_metric_families)
    except Exception as e:  # the parser's own error names the line
        fail(f"{path}: rejected by the parser: {e}")
    # The OpenMetrics parser strips the unit suffix rules into family names.
    names = {n if n.startswith("fabperf_") else n for n in names}
    missing = {e for e in EXPECTED if not any(n == e or e.startswith(n) for n in names)}
    if missing:
        fail(f"{path}: families missing: {sorted(missing)}; got {sorted(names)}")
    bw = [s for s in samples if s.name.startswith("fabperf_bandwidth")]
    if not bw:
        fail(f"{path}: no bandwidth sample")
    lacking = LABELS - set(bw[0].labels)
    if lacking:
        fail(f"{path}: bandwidth samples lack labels {sorted(lacking)}")
    lat = [s for s in samples if s.name.startswith("fabperf_latency")]
    if not lat or any(s.labels.get("latency_kind") not in ("half_rtt", "rtt") for s in lat):
        fail(f"{path}: latency samples without latency_kind=half_rtt|rtt")
    per = {"cell", "repeat", "stream"} & {k for s in samples for k in s.labels}
    if per:
        fail(f"{path}: per-measurement labels {sorted(per)} in a default export")
    keys = [(s.name, tuple(sorted(s.labels.items()))) for s in samples]
    if len(keys) != len(set(keys)):
        fail(f"{path}: duplicate series")
    print(f"{path}: {len(fams)} families, {len(samples)} samples accepted by the "
          f"{'OpenMetrics' if strict else 'Prometheus text'} parser")


def check_dashboard(path, expo):
    d = json.load(open(path, encoding="utf-8"))
    known = set(re.findall(r"^# TYPE (\S+) ", open(expo, encoding="utf-8").read(), re.M))
    if not 13 <= d.get("schemaVersion", 0) <= 42:
        fail(f"{path}: schemaVersion {d.get('schemaVersion')} outside what Grafana migrates (13..42)")
    ids = [p["id"] for p in d["panels"]]
    if len(ids) != len(set(ids)):
        fail(f"{path}: duplicate panel ids")
    used = set()
    for p in d["panels"]:
        if p.get("datasource", {}).get("uid") != "${datasource}":
            fail(f"{path}: panel {p['title']!r} does not use the $datasource variable")
        for t in p["targets"]:
            for m in re.findall(r"\b(fabperf_[a-z_]+)\b", t["expr"]):
                used.add(m)
                if m not in known:
                    fail(f"{path}: panel {p['title']!r} queries {m}, which fabperf does not export")
    for v in d["templating"]["list"]:
        for m in re.findall(r"\b(fabperf_[a-z_]+)\b", json.dumps(v.get("query", ""))):
            if m not in known:
                fail(f"{path}: variable {v['name']!r} queries {m}, which fabperf does not export")
    print(f"{path}: {len(d['panels'])} panels over {len(used)} exported families")


def gateway(portfile, bodyfile, code):
    class H(http.server.BaseHTTPRequestHandler):
        def do_PUT(self):
            n = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(n)
            with open(bodyfile, "wb") as f:
                f.write(body)
            with open(bodyfile + ".path", "w") as f:
                f.write(self.path + "\n" + self.headers.get("Content-Type", "") + "\n")
            msg = b"" if code < 300 else b"pushed metrics are invalid or inconsistent with existing metrics"
            self.send_response(code)
            self.send_header("Content-Length", str(len(msg)))
            self.end_headers()
            self.wfile.write(msg)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), H)
    srv.timeout = 60
    with open(portfile, "w") as f:
        f.write(str(srv.server_address[1]))
    srv.handle_request()


def main():
    a = sys.argv[1:]
    if len(a) == 2 and a[0] == "openmetrics":
        check_exposition(a[1], True)
    elif len(a) == 2 and a[0] == "prometheus":
        check_exposition(a[1], False)
    elif len(a) == 3 and a[0] == "dashboard":
        check_dashboard(a[1], a[2])
    elif len(a) == 4 and a[0] == "gateway":
        gateway(a[1], a[2], int(a[3]))
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
