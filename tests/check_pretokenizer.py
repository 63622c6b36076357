"""forge's byte-level BPE tokenization against an independent model of llama.cpp's, on a generated
corpus the shared test vectors do not cover: chat markup typed as plain text, TeX, code, mixed
scripts, emoji, Unicode spaces and digits, long runs of punctuation and whitespace.

The model reads llama.cpp's own pre-tokenizer expressions and its Unicode whitespace and category
tables out of the peer source archive (nothing is copied here), and follows what llama.cpp does with
them: user-defined tokens split the text first; each expression in turn splits every piece into its
matches and the text between them, with ECMAScript semantics (\\s is ASCII whitespace after every
other Unicode space became \\x0b, $ is the end of the piece, \\p{N} is llama.cpp's NUMBER category);
the GPT-2 and Llama 3 expressions, which llama.cpp matches with its own code, see the real code
points with its category and whitespace tables; then GPT-2 byte encoding and BPE merges by rank.
Where llama.cpp's shared vectors exist the model must reproduce them first; then its ids must equal
`forge tokenize --no-bos` on every generated text. Vocabularies: the fixtures' deepseek-llm,
deepseek-coder, gpt-2, falcon and starcoder, and the real SmolLM2 (smollm) and Qwen2.5-Coder (qwen2)
models where the test suite has fetched them.
usage: check_pretokenizer.py --forge build/forge --fixtures ../shared/fixtures --peer ../shared/peer/llama.cpp-d32676d.tar.gz"""
import argparse
import bisect
import mmap
import os
import random
import re
import subprocess
import sys
import struct
import tarfile

passed = failed = 0


def check(good, text):
    global passed, failed
    if good:
        passed += 1
        print("ok   " + text, flush=True)
    else:
        failed += 1
        print("FAIL " + text, flush=True)


def c_string_literals(text):
    """The concatenated value of the C string literals in text (escapes \\\\, \\", \\r, \\n, \\t)."""
    out = []
    for lit in re.findall(r'"((?:[^"\\]|\\.)*)"', text, re.S):
        i = 0
        while i < len(lit):
            if lit[i] == "\\":
                nxt = lit[i + 1]
                out.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\", '"': '"'}[nxt])
                i += 2
            else:
                out.append(lit[i])
                i += 1
    return "".join(out)


def peer_sources(path):
    with tarfile.open(path) as tar:
        def read(name):
            member = [m for m in tar.getmembers() if m.name.endswith(name)][0]
            return tar.extractfile(member).read().decode("utf-8")
        return read("src/llama-vocab.cpp"), read("src/unicode-data.cpp"), read("src/unicode.h")


def peer_expressions(vocab_cpp, pre_type):
    """The regex_exprs llama.cpp lists for the LLAMA_VOCAB_PRE_TYPE_<pre_type> case."""
    at = vocab_cpp.index("case LLAMA_VOCAB_PRE_TYPE_%s:" % pre_type)
    start = vocab_cpp.index("regex_exprs = {", at) + len("regex_exprs = {")
    end = vocab_cpp.index("};", start)
    body = vocab_cpp[start:end]
    exprs = []
    for item in re.findall(r'((?:\s*"(?:[^"\\]|\\.)*")+)\s*,', body + ","):
        exprs.append(c_string_literals(item))
    return exprs


def peer_unicode(data_cpp, unicode_h):
    """llama.cpp's whitespace set and, per code point range, its category flags."""
    ws_block = data_cpp[data_cpp.index("unicode_set_whitespace = {"):]
    ws_block = ws_block[:ws_block.index("};")]
    whitespace = {int(x, 16) for x in re.findall(r"0x[0-9A-Fa-f]+", ws_block)}
    rng = data_cpp[data_cpp.index("unicode_ranges_flags = {"):]
    rng = rng[:rng.index("};")]
    starts, flags = [], []
    for a, b in re.findall(r"\{(0x[0-9A-Fa-f]+),\s*(0x[0-9A-Fa-f]+)\}", rng):
        starts.append(int(a, 16))
        flags.append(int(b, 16))
    def flag(name):
        return int(re.search(name + r"\s*=\s*(0x[0-9A-Fa-f]+)", unicode_h).group(1), 16)
    flag_of = {"N": flag("NUMBER"), "L": flag("LETTER"), "P": flag("PUNCTUATION"), "M": flag("ACCENT_MARK"), "S": flag("SYMBOL")}
    return whitespace, starts, flags, flag_of, flag("MASK_CATEGORIES")


def gguf_metadata(path, wanted):
    """The metadata values named in `wanted`, read straight from the header (the gguf package's reader
    takes a minute over a 150,000-token vocabulary; this takes a fraction of a second)."""
    scalar = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        assert data[:4] == b"GGUF", path
        _, n_tensors, n_kv = struct.unpack_from("<IQQ", data, 4)
        at, out = 24, {}

        def text(at):
            n = struct.unpack_from("<Q", data, at)[0]
            return data[at + 8:at + 8 + n].decode("utf-8"), at + 8 + n

        def value(kind, at):
            if kind == 8:
                return text(at)
            fmt = scalar[kind]
            return struct.unpack_from(fmt, data, at)[0], at + struct.calcsize(fmt)
        for _ in range(n_kv):
            key, at = text(at)
            kind = struct.unpack_from("<I", data, at)[0]
            at += 4
            if kind == 9:
                elem, count = struct.unpack_from("<IQ", data, at)
                at += 12
                if elem == 8:
                    items = []
                    for _ in range(count):
                        item, at = text(at)
                        items.append(item)
                else:
                    size = struct.calcsize(scalar[elem])
                    items = list(struct.unpack_from("<%d%s" % (count, scalar[elem][1]), data, at)) if key in wanted else None
                    at += size * count
                result = items
            else:
                result, at = value(kind, at)
            if key in wanted:
                out[key] = result
    return out


class Model:
    def __init__(self, exprs, unicode_tables, vocab_path):
        self.whitespace, self.starts, self.flags, self.flag_of, self.mask = unicode_tables
        self.passes = [self.compile(e) for e in exprs]
        meta = gguf_metadata(vocab_path, ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.merges"))
        tokens = meta["tokenizer.ggml.tokens"]
        types = meta["tokenizer.ggml.token_type"]
        merges = meta["tokenizer.ggml.merges"]
        self.ids = {}
        for i, t in enumerate(tokens):
            self.ids[t] = i  # the highest id of a duplicate wins
        self.ranks = {tuple(m.split(" ", 1)): r for r, m in enumerate(merges)}
        # user-defined tokens split plain text (control tokens only when special tokens are parsed)
        user = [(tokens[i], i) for i, t in enumerate(types) if t == 4]
        self.user = sorted(user, key=lambda item: -len(item[0].encode("utf-8")))
        self.byte_char = self.gpt2_bytes()

    @staticmethod
    def gpt2_bytes():
        printable = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
        table, extra = {}, 0
        for b in range(256):
            if b in printable:
                table[b] = chr(b)
            else:
                table[b] = chr(256 + extra)
                extra += 1
        return table

    def category(self, cp):
        return self.flags[bisect.bisect_right(self.starts, cp) - 1] & self.mask

    # A non-ASCII code point of category X stands in the collapsed text as private code point
    # U+F0000 + X's number (0: none of them), as llama.cpp collapses it into one byte.
    CATEGORIES = {"N": 1, "L": 2, "P": 3, "M": 4, "S": 5}

    def category_class(self, name):
        """The members of \\p{name} as the inside of a bracket expression: ASCII ones, and the stand-in."""
        flag = self.flag_of[name]
        ascii_members = "".join("\\x%02x" % cp for cp in range(128) if self.category(cp) == flag and cp not in self.whitespace)
        return ascii_members + "\\U%08x" % (0xF0000 + self.CATEGORIES[name])

    def full_class(self, name):
        """Every code point of \\p{name} by llama.cpp's table, as the inside of a bracket expression
        (the expressions llama.cpp matches with its own code see the real code points)."""
        if name == "s":
            return "".join("\\U%08x" % cp for cp in sorted(self.whitespace))
        flag = self.flag_of[name]
        parts = []
        for k, start in enumerate(self.starts):
            if self.flags[k] & self.mask == flag:
                last = (self.starts[k + 1] if k + 1 < len(self.starts) else 0x110000) - 1
                parts.append("\\U%08x-\\U%08x" % (start, last))
        return "".join(parts)

    def compile(self, expr):
        """An expression in the regex module's syntax with llama.cpp's meaning. The GPT-2 and Llama 3
        expressions (with (?!\\S)) llama.cpp matches with hand-written code over its own tables;
        the others through std::regex, on the collapsed text when they name a category."""
        custom = "(?!\\S)" in expr
        uses_category = "\\p{" in expr and not custom
        out, inside, i = [], False, 0
        while i < len(expr):
            ch = expr[i]
            if ch == "\\" and expr[i + 1] == "p" and expr[i + 2] == "{":
                name = expr[i + 3:expr.index("}", i)]
                body = self.full_class(name) if custom else self.category_class(name)
                out.append(body if inside else "[" + body + "]")
                i = expr.index("}", i) + 1
                continue
            if ch == "\\":
                nxt = expr[i + 1]
                space = self.full_class("s") if custom else "\\t\\n\\x0b\\x0c\\r "
                if nxt == "s":
                    out.append(space if inside else "[" + space + "]")
                elif nxt == "S":
                    assert not inside, expr
                    out.append("[^" + space + "]")
                else:
                    out.append(expr[i:i + 2])
                i += 2
                continue
            if ch == "[" and not inside:
                inside = True
            elif ch == "]" and inside:
                inside = False
            elif ch == "$" and not inside:
                ch = "\\Z"
            out.append(ch)
            i += 1
        return re.compile("".join(out)), uses_category, custom

    def prepare(self, text, collapsed):
        """The text the expressions see: non-ASCII spaces as \\x0b; with categories, other non-ASCII
        code points as the stand-in of their category."""
        chars = []
        for ch in text:
            cp = ord(ch)
            if cp >= 0x80 and cp in self.whitespace:
                chars.append("\x0b")
            elif collapsed and cp >= 0x80:
                flag = self.category(cp)
                number = next((n for name, n in self.CATEGORIES.items() if self.flag_of[name] == flag), 0)
                chars.append(chr(0xF0000 + number))
            else:
                chars.append(ch)
        return "".join(chars)

    def pretokenize(self, text):
        pieces = [(0, len(text))]
        for pattern, collapsed, custom in self.passes:
            seen = text if custom else self.prepare(text, collapsed)
            split = []
            for start, length in pieces:
                part = seen[start:start + length]
                at = 0
                for m in pattern.finditer(part):
                    if m.start() > at:
                        split.append((start + at, m.start() - at))
                    if m.end() > m.start():
                        split.append((start + m.start(), m.end() - m.start()))
                    at = m.end()
                if at < length:
                    split.append((start + at, length - at))
            pieces = split
        return [text[s:s + n] for s, n in pieces]

    def bpe(self, word):
        symbols = [self.byte_char[b] for b in word.encode("utf-8")]
        while len(symbols) > 1:
            best = None
            for i in range(len(symbols) - 1):
                rank = self.ranks.get((symbols[i], symbols[i + 1]))
                if rank is not None and (best is None or rank < best[0]):
                    best = (rank, i)
            if best is None:
                break
            i = best[1]
            symbols[i:i + 2] = [symbols[i] + symbols[i + 1]]
        out = []
        for s in symbols:
            if s in self.ids:
                out.append(self.ids[s])
            else:
                out.extend(self.ids[c] for c in s if c in self.ids)
        return out

    def tokenize(self, text):
        fragments = [text]
        for token, tid in self.user:  # longest first, each splitting every plain fragment left to right
            split = []
            for frag in fragments:
                if isinstance(frag, int):
                    split.append(frag)
                    continue
                while True:
                    at = frag.find(token)
                    if at < 0:
                        break
                    if at > 0:
                        split.append(frag[:at])
                    split.append(tid)
                    frag = frag[at + len(token):]
                if frag:
                    split.append(frag)
            fragments = split
        ids = []
        for frag in fragments:
            if isinstance(frag, int):
                ids.append(frag)
            else:
                for word in self.pretokenize(frag):
                    ids.extend(self.bpe(word))
        return ids


def corpus(seed, count):
    """Fixed pieces that once parted forge from llama.cpp, then random mixtures of hostile parts."""
    fixed = [
        "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
        "<s>[INST] <<SYS>>\nYou are helpful.\n<</SYS>>\n\nHi [/INST]",
        "$$\\int_0^1 x^2\\,dx = \\frac{1}{3}$$",
        "\\begin{align} a_{i,j} &= \\sum_{k=1}^{n} b_{ik} c_{kj} \\\\ \\end{align}",
        "def f(x):\n\treturn x**2  # square\n\n\n",
        "if (a && b) { return a->c[i++] >>= 2; }",
        "<div class=\"x\">caf\u00e9 &amp; na\u00efve</div>",
        "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u3053\u3093\u306b\u3061\u306f\u3002\uc548\ub155\ud558\uc138\uc694",
        "\u0645\u0631\u062d\u0628\u0627 \u05e9\u05dc\u05d5\u05dd \u0928\u092e\u0938\u094d\u0924\u0947 \u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35",
        "\U0001F600\U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 \u2764\ufe0f",
        "!!!???...---___===+++***&&&|||~~~```",
        "a    b\t\t\tc\n\n\n\nd   \n   e   ",
        "\u3000\u3000indented\u3000text\u00a0nbsp\u2003em\u2009thin ",
        "\u0663\u0664\u0665 \u2460\u2461 \u00bd \u2167 12345678901234567890 1,234.56",
        "x\u0301\u0308 e\u0301 \u1e9b\u0323",
        "   ",
        "\n",
        "\u3001\u3002\u300c\u300d\uff08\uff09\u201c\u201d\u2018\u2019",
    ]
    parts = ["hello", " world", "Hello", "'s", "'ll", " don't", "123", " 4567", "\u0663\u0664", "\u00bd", "\u2460",
             "$$", "\\frac", "{", "}", "^2", "_i", "\\,", "&", "<|im_start|>", "<|im_end|>", "<", ">", "</", "/>",
             "[INST]", "\n", "\r\n", "\t", " ", "  ", "   ", "\u3000", "\u00a0", "\u2003", "\u0085", "\u2028",
             "\u4e2d\u6587", "\u65e5\u672c\u8a9e", "\ud55c\uad6d\uc5b4", "\u0645\u0631\u062d\u0628\u0627", "\u0928\u092e\u0938\u094d\u0924\u0947",
             "\u0416\u0436", "\u03b1\u03b2\u03b3", "\U0001F600", "\U0001F44D\U0001F3FD", "\u2764\ufe0f", "\u200d",
             "caf\u00e9", "na\u00efve", "\u00f8", "\u00e6", "!!!", "???", "...", "---", "***", "==>", "->", "::",
             "#", "@", "%", "`", "~", "|", "\\", "\"", "'", "(", ")", "[", "]", ";", ",", ".", "\uff0c", "\u3002",
             "\uff01", "\u201c", "\u201d", "\u2018", "\u00b7", "\u2014", "\u2026", "x\u0301", "\u0301"]
    rng = random.Random(seed)
    out = list(fixed)
    for _ in range(count):
        out.append("".join(rng.choice(parts) for _ in range(rng.randint(1, 12))))
    return out


def forge_ids(forge, vocab, texts):
    """forge's ids of each text, one process per text (the CLI tokenizes one argument)."""
    results = []
    for text in texts:
        proc = subprocess.run([forge, "tokenize", "-m", vocab, "--no-bos", text], capture_output=True, timeout=60)
        line = proc.stdout.decode().strip()
        results.append(None if proc.returncode else [int(x) for x in line.split()] if line else [])
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--forge", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--peer", required=True, help="llama.cpp's source archive")
    ap.add_argument("--count", type=int, default=60, help="random texts per vocabulary")
    ap.add_argument("--models", default="~/.cache/forge", help="where the test suite's real models are cached")
    args = ap.parse_args()
    vocab_cpp, data_cpp, unicode_h = peer_sources(args.peer)
    tables = peer_unicode(data_cpp, unicode_h)
    texts = corpus(33, args.count)
    tokenizers = os.path.join(args.fixtures, "tokenizer")
    cache = os.path.expanduser(args.models)
    vocabularies = [(name, os.path.join(tokenizers, "ggml-vocab-%s.gguf" % name), pre)
                    for name, pre in (("deepseek-llm", "DEEPSEEK_LLM"), ("deepseek-coder", "DEEPSEEK_CODER"),
                                      ("gpt-2", "GPT2"), ("falcon", "FALCON"), ("starcoder", "STARCODER"))]
    # real models of the test suite, where fetched: SmolLM2 (smollm), Qwen2.5-Coder (qwen2)
    for name, path, pre in (("smollm2", "smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "SMOLLM"),
                            ("qwen25coder", "qwen25coder/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "QWEN2")):
        if os.path.exists(os.path.join(cache, path)):
            vocabularies.append((name, os.path.join(cache, path), pre))
        else:
            print("  (%s not in %s: not compared)" % (name, cache))
    for name, vocab, pre_type in vocabularies:
        exprs = peer_expressions(vocab_cpp, pre_type)
        model = Model(exprs, tables, vocab)
        if os.path.exists(vocab + ".inp"):  # the model itself against llama.cpp's own vectors first
            with open(vocab + ".inp", encoding="utf-8") as f:
                inputs = f.read().split("\n__ggml_vocab_test__\n")
            with open(vocab + ".out") as f:
                outputs = [[int(x) for x in line.split()] for line in f.read().split("\n")]
            agree = sum(model.tokenize(t) == o for t, o in zip(inputs, outputs))
            check(agree == len(outputs) and len(inputs) >= len(outputs),
                  "%s: the model gives llama.cpp's ids on its %d shared vectors (%d agree)" % (name, len(outputs), agree))
        got = forge_ids(args.forge, vocab, texts)
        differ = [(t, g, model.tokenize(t)) for t, g in zip(texts, got) if g != model.tokenize(t)]
        for text, g, want in differ[:8]:
            print("  %s %r\n    forge %s\n    model %s" % (name, text, g, want))
        check(not differ, "%s: forge equals the model on %d generated texts (%d differ)" % (name, len(texts), len(differ)))
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
