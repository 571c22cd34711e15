"""Parses a Prometheus exposition from standard input with the
prometheus_client library's own parsers and prints what it found as one
JSON object: {family name: {"type": ..., "samples": [[name, labels, value]]}}.

Usage: prom_parse.py openmetrics|text < exposition

The tests of --prometheus and --textfile use it as an independent reader:
a parse error exits 1 with the parser's message on standard error.
"""

import json
import sys

from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as parse_openmetrics,
)
from prometheus_client.parser import text_string_to_metric_families as parse_text


def main():
    fmt = sys.argv[1]
    data = sys.stdin.read()
    parse = parse_openmetrics if fmt == "openmetrics" else parse_text
    out = {}
    try:
        for fam in parse(data):
            out[fam.name] = {
                "type": fam.type,
                "samples": [[s.name, s.labels, s.value] for s in fam.samples],
            }
    except Exception as e:  # the parsers raise ValueError and others
        print(f"{fmt} parse error: {e}", file=sys.stderr)
        sys.exit(1)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
