#!/usr/bin/env python3
"""Tokenizer parity against llama.cpp's (bitnet.cpp's copy): SentencePiece vocabularies and Falcon 3's
pre-tokenizer, where llama.cpp (not tiktoken) is the reference.

For each GGUF given (e.g. `bitnet gen-model --preset 2b4t --vocab spm`: 128k SentencePiece tokens
made from LLaMA 3's; `--preset 2b4t --pre falcon3`: LLaMA 3's byte-level vocabulary under Falcon 3's
pre-tokenizer), encodes the texts of tools/tokenizer_parity.py (the repository's lines, sentences in
many scripts, digits, runs of white space, contractions, random code points, special tokens, long
pieces) plus texts of invalid UTF-8 (not with --valid-utf8: llama.cpp's byte-level BPE aborts on
them), with `build/bitnet tokenize -m FILE --hex-lines F` and with tools/bitnetcpp_tokenize.cpp built
against a fetched bitnet.cpp, with BOS and without, and compares the ids. Exit status 0 only when
every text matches.

  python3 tools/llamacpp_tokenizer_parity.py --ref /path/to/bitnetcpp_tokenize [--count 12000] [--valid-utf8] FILE.gguf ...
"""
import argparse
import os
import random
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizer_parity import make_texts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def invalid_utf8(rng, n):
    bits = [b"\xff", b"\x80", b"\xc3", b"\xe2\x96", b"\xf0\x9f", b" ", b"a", b"\xc3\xa9", b"\xe2\x96\x81", b"\n"]
    return [b"".join(rng.choice(bits) for _ in range(rng.randint(1, 20))) for _ in range(n)]


def encode(cmd, texts, tmp):
    path = os.path.join(tmp, "texts.hex")
    with open(path, "w") as fh:
        for t in texts:
            fh.write(t.hex() + "\n")
    out = subprocess.run(cmd + [path] if cmd[-1] == "--hex-lines" else cmd[:2] + [path] + cmd[2:], check=True,
                         capture_output=True, text=True).stdout
    return out.split("\n")[:len(texts)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ref", required=True, help="bitnetcpp_tokenize built against bitnet.cpp")
    ap.add_argument("--bitnet", default=os.path.join(ROOT, "build", "bitnet"))
    ap.add_argument("--count", type=int, default=12000)
    ap.add_argument("--valid-utf8", action="store_true", help="leave out the texts of invalid UTF-8")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    texts = [t.encode("utf-8") for t in make_texts(7, a.count)]
    if not a.valid_utf8:
        texts += invalid_utf8(random.Random(8), a.count // 10)
    bad_all = 0
    with tempfile.TemporaryDirectory() as tmp:
        for m in a.models:
            for bos in (False, True):
                ours = encode([a.bitnet, "tokenize", "-m", m] + ([] if bos else ["--no-bos"]) + ["--hex-lines"], texts, tmp)
                ref = encode([a.ref, m] + (["--bos"] if bos else []), texts, tmp)
                bad = [i for i in range(len(texts)) if ours[i] != ref[i]]
                bad_all += len(bad)
                print("%s, %s: %d texts (%d bytes), %d differ" % (os.path.basename(m), "BOS" if bos else "no BOS", len(texts),
                                                                  sum(map(len, texts)), len(bad)))
                for i in bad[:5]:
                    print("  text %r\n    ours %s\n    llama.cpp %s" % (texts[i][:80], ours[i][:200], ref[i][:200]))
    print("VERDICT: %s" % ("PASS" if bad_all == 0 else "MISMATCH"))
    return 0 if bad_all == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
