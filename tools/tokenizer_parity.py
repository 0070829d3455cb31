#!/usr/bin/env python3
"""Tokenizer parity: bitnet.h's encoder against tiktoken (LLaMA 3 pattern and ranks).

Generates varied texts (the repository's own files, sentences in many scripts, digits, runs of
white space, contractions, random code points, special tokens, long pieces), encodes them with
tiktoken and with `build/bitnet tokenize --tiktoken FILE --hex-lines F --no-bos`, and compares
the ids. Special tokens in the text are parsed on both sides (allowed_special="all").

tiktoken: the Python package when it imports; otherwise the npm package `tiktoken` (the same Rust
core compiled to WebAssembly) through node, found with --node-modules DIR (npm install tiktoken).

  python3 tools/tokenizer_parity.py [--tiktoken FILE] [--bitnet build/bitnet] [--count 12000] [--sweep]
--sweep also checks the character classes of every code point: with a probe vocabulary (the 256
bytes plus "a", "1" and "!" each joined to every UTF-8 lead byte) the texts "aX", "1X" and "!X" show
whether X is a letter, a number, white space or other, on both sides (3.3 million texts).
Exit status 0 only when every text matches.
"""
import argparse
import base64
import json
import os
import random
import subprocess
import sys
import tempfile

PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
       r"\s*[\r\n]+|\s+(?!\S)|\s+")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def special_names(n=256):
    fixed = ["begin_of_text", "end_of_text", "reserved_special_token_0", "reserved_special_token_1",
             "finetune_right_pad_id", "reserved_special_token_2", "start_header_id", "end_header_id",
             "eom_id", "eot_id", "python_tag"]
    return ["<|%s|>" % (fixed[i] if i < len(fixed) else "reserved_special_token_%d" % (i - 8)) for i in range(n)]


# ---- texts -------------------------------------------------------------------------------------

WORDS = {
    "en": "the quick brown fox jumps over lazy dog while we're testing tokenizers it's don't I'll they've "
          "you'd can't won't HELLO World CamelCase snake_case kebab-case x86 GPU CPU tokenizer",
    "fr": "élève déjà où garçon naïve cœur œuvre Noël forêt à côté être hôtel français l'été qu'il",
    "de": "Straße Größe übermäßig Fußgänger Äpfel Öl Übung schön Mädchen heißt",
    "es": "niño señor mañana corazón ¿qué? ¡hola! pingüino acción",
    "pl": "zażółć gęślą jaźń Łódź Kraków źdźbło",
    "tr": "İstanbul ılık ığdır şeker çiçek DİYARBAKIR",
    "vi": "Tiếng Việt người được không những ở đây Nguyễn",
    "el": "καλημέρα κόσμε Ελλάδα ψυχή ΑΘΗΝΑ ἀρχή ὁδός",
    "ru": "привет мир Москва ЁЛКА съешь же ещё этих мягких французских булок",
    "uk": "Україна їжак ґанок пісня",
    "ar": "مرحبا بالعالم العربية كتاب مدرسة ٱلْعَرَبِيَّة",
    "he": "שלום עולם עברית סֵפֶר",
    "fa": "سلام دنیا فارسی کتاب‌ها",
    "hi": "नमस्ते दुनिया हिन्दी क्षत्रिय प्रौद्योगिकी",
    "bn": "বাংলা ভাষা আমার সোনার",
    "ta": "தமிழ் வணக்கம் கணினி",
    "th": "สวัสดีครับ ภาษาไทย คอมพิวเตอร์",
    "ka": "გამარჯობა საქართველო",
    "hy": "Բարեւ Հայաստան",
    "am": "ሰላም ኢትዮጵያ",
    "zh": "你好世界 中文分词 机器学习 模型 天气很好。",
    "ja": "こんにちは世界 カタカナ ひらがな 漢字 東京都 ｶﾀｶﾅ",
    "ko": "안녕하세요 세계 한국어 토크나이저",
    "my": "မင်္ဂလာပါ",
    "km": "សួស្តី",
    "si": "ආයුබෝවන්",
    "emoji": "😀 👍🏽 👩‍👩‍👧‍👦 🇫🇷 🇯🇵 1️⃣ ❤️ 🧑🏿‍🚀 ✈️ 🏳️‍🌈",
    "sym": "∀x∈ℝ: x²≥0 ∑ ∫ √ ≠ ≤ ≥ → ⇒ € £ ¥ ₿ © ® ™ ° ± ½ ¼ ¾ — – … « » ‘ ’ “ ” † ‡ • ¶ § ¬",
    "box": "┌─┐ │ └─┘ ╔═╗ ║ ╚═╝ ▁▂▃▄▅▆▇█ ░▒▓",
    "combining": "e\u0301 a\u0308 n\u0303 Z\u0335\u0321a\u0362\u0358l\u0327g\u031co\u0308 \u0915\u094d\u0937 x\u20dd",
    "nums": "٠١٢٣٤٥٦٧٨٩ ۰۱۲۳ १२३४ ０１２３４５ Ⅻ ⅷ ² ³ ¹ ⁴ ½ ⑳ ㊿ 𝟘𝟙𝟚",
}
SEPS = [" ", " ", " ", "  ", "   ", "\t", "\n", "\n\n", "\r\n", " \n", "\n ", "\u00a0", "\u3000", ", ", ". ",
        "! ", "? ", ": ", "; ", " - ", "...", "\u2028", "\u000b", "\u000c", "\u0085", " \t "]


def sentences(rng, n):
    pools = {k: v.split(" ") for k, v in WORDS.items()}
    keys = list(pools)
    out = []
    for _ in range(n):
        k = rng.choice(keys)
        words = []
        for _ in range(rng.randint(1, 14)):
            kk = k if rng.random() < 0.8 else rng.choice(keys)
            words.append(rng.choice(pools[kk]))
            words.append(rng.choice(SEPS))
        out.append("".join(words[:-1] if rng.random() < 0.5 else words))
    return out


def digit_texts(rng, n):
    out = []
    for _ in range(n):
        parts = []
        for _ in range(rng.randint(1, 6)):
            r = rng.random()
            if r < 0.6:
                parts.append("".join(rng.choice("0123456789") for _ in range(rng.randint(1, 20))))
            elif r < 0.8:
                parts.append("%.*f" % (rng.randint(0, 6), rng.uniform(-1e6, 1e6)))
            else:
                parts.append(rng.choice(["1,234,567", "3.14159", "v1.2.3", "0x1F", "1e-5", "2024-05-01",
                                         "12:30:45", "+1 (555) 123-4567", "١٢٣٤٥", "１２３４５６７", "Ⅷ", "x²"]))
            parts.append(rng.choice(["", " ", "  ", ",", ".", "-", "\n", "abc", "\t"]))
        out.append("".join(parts))
    return out


def whitespace_texts(rng, n):
    alphabet = [" ", " ", " ", "\t", "\n", "\r", "\r\n", "\u00a0", "\u3000", "\u2028", "\u2029", "\u000b",
                "\u000c", "\u0085", "\u2009", "x", "ab", "!", "1", "'", ".", "é", "中"]
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 24))) for _ in range(n)]


def contraction_texts(rng, n):
    heads = ["'s", "'S", "'t", "'T", "'re", "'RE", "'rE", "'Re", "'ve", "'VE", "'vE", "'m", "'M", "'ll", "'LL",
             "'lL", "'Ll", "'d", "'D", "'\u017f", "'", "''", "'x", "'r", "'l", "'v", "’s"]
    fill = ["I", "you", "HE", "it", "we", " they", " ", "", "1", "\n", "!", "é", "Straße", "中"]
    return ["".join(rng.choice(heads if i % 2 else fill) for i in range(rng.randint(1, 10))) for _ in range(n)]


def random_unicode(rng, n):
    out = []
    for _ in range(n):
        cs = []
        for _ in range(rng.randint(1, 30)):
            r = rng.random()
            if r < 0.35:
                c = rng.randint(0x20, 0x7E)
            elif r < 0.6:
                c = rng.randint(0x80, 0x2FFF)
            elif r < 0.8:
                c = rng.randint(0x3000, 0xFFFF)
            else:
                c = rng.randint(0x10000, 0x10FFFF)
            if 0xD800 <= c <= 0xDFFF:
                c = 0xFFFD
            cs.append(chr(c))
        out.append("".join(cs))
    return out


def special_texts(rng, n):
    specials = special_names()
    bits = specials[:12] + ["<|eot_id", "<|", "|>", "<|foo|>", "<|begin_of_text|", "User: ", "Assistant: ",
                            "hello", " world", "\n", " "]
    return ["".join(rng.choice(bits) for _ in range(rng.randint(1, 8))) for _ in range(n)]


def long_texts(rng):
    return ["a" * 5000, "ab" * 3000, " " * 3000 + "x", "1" * 4000, "!" * 4000 + "\n" * 100,
            "\n" * 2000, "中" * 2000, "😀" * 1000, "x" + " \t" * 1500 + "y",
            "".join(rng.choice("abcdefghij") for _ in range(8000)),
            "".join(rng.choice(" etaoinshrdlu") for _ in range(8000))]


def repo_texts(rng, n_windows):
    paths = []
    for base, _, files in os.walk(ROOT):
        if any(p in base for p in ("/.git", "/build", "node_modules", "/.devsync", "/corpus")):
            continue
        for f in files:
            if f.endswith((".c", ".h", ".py", ".md", ".mjs", ".sh")) or f in ("Makefile", "run"):
                paths.append(os.path.join(base, f))
    lines = []
    for p in sorted(paths):
        try:
            with open(p, encoding="utf-8") as fh:
                lines.extend(fh.read().split("\n"))
        except (UnicodeDecodeError, OSError):
            pass
    out = [l for l in lines if l.strip()]
    for _ in range(n_windows):
        i = rng.randrange(max(1, len(lines) - 8))
        out.append("\n".join(lines[i:i + rng.randint(2, 8)]) + "\n")
    return out


def make_texts(seed, count):
    rng = random.Random(seed)
    per = max(1, count // 10)
    texts = repo_texts(rng, per)
    texts += sentences(rng, 3 * per) + digit_texts(rng, per) + whitespace_texts(rng, per)
    texts += contraction_texts(rng, per) + random_unicode(rng, 2 * per) + special_texts(rng, per // 2)
    texts += long_texts(rng)
    return texts


# ---- encoders ----------------------------------------------------------------------------------

def load_ranks(path):
    ranks = {}
    with open(path, "rb") as fh:
        for line in fh:
            if line.strip():
                tok, rank = line.split()
                ranks[base64.b64decode(tok)] = int(rank)
    return ranks


NODE_SCRIPT = r"""
const { Tiktoken } = require("tiktoken/lite");
const fs = require("fs");
const [ranksPath, specialsPath, textsPath, outPath, pat] = process.argv.slice(2);
const enc = new Tiktoken(fs.readFileSync(ranksPath, "utf8"), JSON.parse(fs.readFileSync(specialsPath, "utf8")), pat);
const texts = JSON.parse(fs.readFileSync(textsPath, "utf8"));
fs.writeFileSync(outPath, JSON.stringify(texts.map((t) => Array.from(enc.encode(t, "all")))));
const pkg = require("path").join(process.env.NODE_PATH, "tiktoken", "package.json");
console.log("tiktoken (npm) " + JSON.parse(fs.readFileSync(pkg, "utf8")).version);
"""


def tiktoken_encode(texts, ranks_path, n_base, node_modules, tmp):
    specials = {name: n_base + i for i, name in enumerate(special_names())}
    try:
        import tiktoken
        enc = tiktoken.Encoding(name="llama3", pat_str=PAT, mergeable_ranks=load_ranks(ranks_path),
                                special_tokens=specials)
        return [enc.encode(t, allowed_special="all") for t in texts], "tiktoken (python) " + tiktoken.__version__
    except ImportError:
        pass
    if not node_modules:
        sys.exit("tokenizer_parity: no Python tiktoken; give --node-modules DIR with the npm package tiktoken")
    for name, data in (("ref.cjs", NODE_SCRIPT), ("specials.json", json.dumps(specials)),
                       ("texts.json", json.dumps(texts))):
        with open(os.path.join(tmp, name), "w") as fh:
            fh.write(data)
    env = dict(os.environ, NODE_PATH=os.path.abspath(node_modules))
    out = subprocess.run(["node", os.path.join(tmp, "ref.cjs"), ranks_path, os.path.join(tmp, "specials.json"),
                          os.path.join(tmp, "texts.json"), os.path.join(tmp, "ref.json"), PAT],
                         env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit("tokenizer_parity: node failed:\n" + out.stderr[-2000:])
    with open(os.path.join(tmp, "ref.json")) as fh:
        return json.load(fh), out.stdout.strip()


def bitnet_encode(texts, bitnet, ranks_path, tmp):
    path = os.path.join(tmp, "texts.hex")
    with open(path, "w") as fh:
        for t in texts:
            fh.write(t.encode("utf-8").hex() + "\n")
    out = subprocess.run([bitnet, "tokenize", "--tiktoken", ranks_path, "--hex-lines", path, "--no-bos"],
                         check=True, capture_output=True, text=True).stdout
    rows = out.split("\n")[:len(texts)]
    return [[int(x) for x in r.split(",")] if r else [] for r in rows]


def default_tiktoken():
    """$BITNET_TIKTOKEN, else shared/data/llama3-tokenizer.tiktoken beside the checkout (or a level up, for worktrees)."""
    if os.environ.get("BITNET_TIKTOKEN"):
        return os.environ["BITNET_TIKTOKEN"]
    for up in ("..", os.path.join("..", ".."), "."):
        p = os.path.join(ROOT, up, "shared", "data", "llama3-tokenizer.tiktoken")
        if os.path.exists(p):
            return os.path.normpath(p)
    return os.path.join(ROOT, "..", "shared", "data", "llama3-tokenizer.tiktoken")


def write_probe_vocab(path):
    """Bytes 0..255 (rank = byte), then "a", "1" and "!" joined to each lead byte 0xC0..0xFF."""
    with open(path, "w") as fh:
        rank = 0
        for b in range(256):
            fh.write("%s %d\n" % (base64.b64encode(bytes([b])).decode(), rank))
            rank += 1
        for p in b"a1!":
            for lead in range(0xC0, 0x100):
                fh.write("%s %d\n" % (base64.b64encode(bytes([p, lead])).decode(), rank))
                rank += 1


def sweep_texts():
    return [p + chr(c) for c in range(0x80, 0x110000) if not 0xD800 <= c <= 0xDFFF for p in "a1!"]


def compare(name, texts, ranks_path, a, tmp):
    n_base = len(load_ranks(ranks_path))
    ref, which = tiktoken_encode(texts, ranks_path, n_base, a.node_modules, tmp)
    ours = bitnet_encode(texts, a.bitnet, ranks_path, tmp)
    bad = [i for i in range(len(texts)) if i >= len(ours) or ours[i] != ref[i]]
    for i in bad[:20]:
        print("MISMATCH %r\n  tiktoken %s\n  bitnet   %s" % (texts[i][:200], ref[i][:40], ours[i][:40] if i < len(ours) else None))
    if a.log:
        with open(a.log, "a") as fh:
            for i in bad:
                fh.write(json.dumps({"set": name, "text": texts[i], "tiktoken": ref[i],
                                     "bitnet": ours[i] if i < len(ours) else None}) + "\n")
    n_chars = sum(len(t) for t in texts)
    n_tok = sum(len(r) for r in ref)
    print("tokenizer parity (%s) vs %s: %d texts (%d characters, %d tokens), %d mismatches" %
          (name, which, len(texts), n_chars, n_tok, len(bad)))
    sys.stdout.flush()
    return len(bad)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tiktoken", default=default_tiktoken())
    ap.add_argument("--bitnet", default=os.path.join(ROOT, "build", "bitnet"))
    ap.add_argument("--count", type=int, default=12000, help="about this many texts (plus the repository's lines)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--node-modules", default=None)
    ap.add_argument("--log", default=None, help="write the mismatches (all of them) as JSON lines here")
    ap.add_argument("--sweep", action="store_true", help="also compare the classes of all code points")
    a = ap.parse_args()
    if a.log and os.path.exists(a.log):
        os.remove(a.log)
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        bad += compare("llama3", make_texts(a.seed, a.count), a.tiktoken, a, tmp)
        if a.sweep:
            probe = os.path.join(tmp, "probe.tiktoken")
            write_probe_vocab(probe)
            bad += compare("class sweep", sweep_texts(), probe, a, tmp)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
