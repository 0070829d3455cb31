#!/usr/bin/env python3
"""Markdown table of benchmark receipts (bitnet bench --receipt), for BENCHMARKS.md.

    tools/receipts_table.py benchmarks/receipts/*.json            # print the table
    tools/receipts_table.py --update BENCHMARKS.md benchmarks/receipts/*.json

--update replaces what lies between the <!-- receipts:begin --> and <!-- receipts:end --> lines.
Each receipt should pass `build/bitnet verify-receipt` first: this script only formats, it does
not check (files that are not schema 1.0 receipts are refused).
"""
import json
import os
import sys

BEGIN, END = "<!-- receipts:begin -->", "<!-- receipts:end -->"


def rows(paths, base):
    out = []
    for path in paths:
        with open(path, encoding="utf-8") as f:
            r = json.load(f)
        if not isinstance(r, dict) or r.get("schema_version") != "1.0":
            sys.exit(f"{path}: not a schema 1.0 receipt")
        gpu = r.get("gpu")
        where = gpu["name"] if r["backend"]["used"] == "cuda" and gpu else r["host"]["cpu"]
        cfg = r["model"]["config"]
        model = f"{cfg['arch']} {cfg['n_layers']}x{cfg['dim']} ({r['model']['sha256'][:8]})"
        threads = r["host"]["threads"] if r["backend"]["used"] == "cpu" else "-"
        load = r["host"].get("load_avg_1m", -1)  # absent in receipts written before it existed
        dev_mb = r["memory"]["peak_device_bytes"] / 1e6
        for x in r["results"]:
            out.append([
                where, r["backend"]["used"], str(threads), f"{load:.2f}" if load >= 0 else "not recorded", model, str(x["prompt_tokens"]), str(x["gen_tokens"]),
                f"{x['prompt_tps']:.1f}", f"{x['gen_tps']:.1f}", f"{x['ttft_ms']:.2f}",
                f"{x['latency_ms']['p50']:.3f} / {x['latency_ms']['p95']:.3f} / {x['latency_ms']['p99']:.3f}",
                f"{r['memory']['peak_host_rss_bytes'] / 1e6:.0f}", f"{dev_mb:.0f}" if dev_mb else "-",
                r["library"]["git_commit"], f"[{os.path.basename(path)}]({os.path.relpath(path, base)})",
            ])
    return out


def table(paths, base="."):
    head = ["machine", "backend", "threads", "host load", "model", "prompt", "gen", "prompt tok/s", "gen tok/s", "TTFT ms",
            "token ms p50 / p95 / p99", "peak RSS MB", "peak GPU MB", "commit", "receipt"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(paths, base)]
    return "\n".join(lines)


def main(argv):
    if len(argv) >= 2 and argv[0] == "--update":
        doc, paths = argv[1], argv[2:]
        text = open(doc, encoding="utf-8").read()
        if BEGIN not in text or END not in text:
            sys.exit(f"{doc}: no {BEGIN} ... {END} block")
        a, b = text.index(BEGIN) + len(BEGIN), text.index(END)
        body = table(paths, os.path.dirname(os.path.abspath(doc))) if paths else "(no receipts yet)"
        with open(doc, "w", encoding="utf-8") as f:
            f.write(text[:a] + "\n" + body + "\n" + text[b:])
        return 0
    print(table(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
