"""`helm test`: the operator's metrics Service answers /metrics with Baton's metrics.

Runs in the operator image (its Python, standard library only). METRICS_URL is the Service's
/metrics URL. Exit 0 when a GET returns 200 and the text exposition declares at least one
baton_* metric; 1 otherwise, saying what it got. tests/integration/test_chart_values.py runs
this file against a real metrics endpoint (and a wrong one).
"""
import os
import sys
import time
import urllib.request

URL = os.environ["METRICS_URL"]
DEADLINE = time.monotonic() + float(os.environ.get("CHECK_SECONDS", "30"))
MAX_BYTES = 4 << 20


def fetch() -> tuple[int, str]:
    with urllib.request.urlopen(URL, timeout=5) as resp:
        return resp.status, resp.read(MAX_BYTES).decode("utf-8", "replace")


def main() -> int:
    problem = "no attempt"
    while True:
        try:
            status, body = fetch()
        except OSError as exc:  # connection refused, timeout, HTTP error status
            problem = f"GET {URL}: {exc}"
        else:
            declared = sorted({line.split()[2] for line in body.splitlines()
                               if line.startswith("# TYPE baton_")})
            if status == 200 and declared:
                print(f"ok: GET {URL} -> 200, {len(declared)} baton metrics (e.g. {declared[0]})")
                return 0
            problem = f"GET {URL} -> {status}, no baton_* metric in {len(body)} bytes"
        if time.monotonic() >= DEADLINE:
            print(f"FAIL: {problem}", file=sys.stderr)
            return 1
        time.sleep(1)


if __name__ == "__main__":
    sys.exit(main())
