#!/usr/bin/env python3
"""Writes the WEFT_* table of docs/parameters.md from src/util/params.def, the rows param.c
expands too, between <!-- params:begin --> and <!-- params:end -->; the prose around stays.

usage: gen_params.py PARAMS_DEF PARAMETERS_MD          rewrite the table in place
       gen_params.py --check PARAMS_DEF PARAMETERS_MD  regenerate into a temporary file and
                                                       exit 1, with a diff, where they differ
`ninja -C build params-doc` runs the first (docs/meson.build), test_param_doc the second.
"""
import ast
import difflib
import os
import re
import sys
import tempfile

BEGIN, END = "<!-- params:begin -->", "<!-- params:end -->"
INT64_MAX = (1 << 63) - 1
FIELDS = ("id", "name", "kind", "dflt", "min", "max", "words", "agree", "help")
KINDS = ("INT", "STR", "WORD", "WORD_ANYCASE", "WORD_OR_INT")
WORD_KINDS = ("WORD", "WORD_ANYCASE", "WORD_OR_INT")
INT_KINDS = ("INT", "WORD_OR_INT")


class DefError(Exception):
    pass


def strip_comments(text):
    """C comments out, string literals kept whole (a comment may hold a quote, a string a '/*')."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            if j < 0:
                raise DefError("unterminated comment")
            out.append(" ")
            i = j + 2
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def split_args(text, start):
    """The arguments of the call whose '(' is at start, split at top-level commas."""
    args, cur, depth, i = [], [], 0, start + 1
    while i < len(text):
        c = text[i]
        if c == '"':
            j = i + 1
            while text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            cur.append(text[i:j + 1])
            i = j + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            if depth == 0:
                args.append("".join(cur).strip())
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append("".join(cur).strip())
            cur = []
            i += 1
            continue
        cur.append(c)
        i += 1
    raise DefError("unterminated WEFT_PARAM(")


def c_string(arg):
    """Adjacent C string literals, joined and unescaped."""
    parts = re.findall(r'"((?:[^"\\]|\\.)*)"', arg)
    if not parts or re.sub(r'"(?:[^"\\]|\\.)*"', "", arg).strip():
        raise DefError("expected a string literal, got " + arg[:40])
    s = "".join(parts)
    return re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m.group(1), m.group(1)), s)


def c_int(arg):
    """An integer constant expression as params.def writes them: literals (suffixes dropped),
    INT64_MAX, + - * / << and parentheses."""
    expr = re.sub(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]+\b", r"\1", arg)
    expr = expr.replace("INT64_MAX", str(INT64_MAX))
    ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b,
           ast.Mult: lambda a, b: a * b, ast.Div: lambda a, b: a // b,
           ast.LShift: lambda a, b: a << b}

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        raise DefError("not an integer constant: " + arg)

    try:
        return ev(ast.parse(expr, mode="eval"))
    except SyntaxError:
        raise DefError("not an integer constant: " + arg)


def strtoll(s):
    """C's strtoll(s, &end, 0) over the whole text, as param.c parses; None where it fails."""
    m = re.fullmatch(r"\s*([+-]?)(0[xX][0-9a-fA-F]+|0[0-7]*|[1-9][0-9]*)", s)
    if not m:
        return None
    digits = m.group(2)
    base = 16 if digits[:2].lower() == "0x" else 8 if digits[0] == "0" else 10
    v = int(digits, base)
    v = -v if m.group(1) == "-" else v
    return v if -(1 << 63) <= v <= INT64_MAX else None


def allows(p, text):
    """param.c's rule (refusal()): empty text is unset."""
    if not text or p["kind"] == "STR":
        return True
    words = p["words"].split()
    if p["kind"] in WORD_KINDS:
        fold = str.lower if p["kind"] == "WORD_ANYCASE" else str
        if fold(text) in [fold(w) for w in words]:
            return True
        if p["kind"] != "WORD_OR_INT":
            return False
    v = strtoll(text)
    return v is not None and p["min"] <= v <= p["max"]


def read_def(path):
    with open(path) as f:
        text = strip_comments(f.read())
    rows, seen = [], set()
    for m in re.finditer(r"\bWEFT_PARAM\s*\(", text):
        args, _ = split_args(text, m.end() - 1)
        if len(args) != len(FIELDS):
            raise DefError("row %d: %d fields, not %d" % (len(rows) + 1, len(args), len(FIELDS)))
        p = dict(zip(FIELDS, args))
        where = "row %d (%s)" % (len(rows) + 1, p["id"])
        try:
            for k in ("name", "dflt", "words", "help"):
                p[k] = c_string(p[k])
            p["min"], p["max"] = c_int(p["min"]), c_int(p["max"])
        except DefError as e:
            raise DefError("%s: %s" % (where, e))
        if p["name"] != "WEFT_" + p["id"]:
            raise DefError("%s: the name must be WEFT_%s" % (where, p["id"]))
        if p["name"] in seen:
            raise DefError("%s: %s twice" % (where, p["name"]))
        if p["kind"] not in KINDS or p["agree"] not in ("AGREED", "LOCAL"):
            raise DefError("%s: kind %s, agree %s" % (where, p["kind"], p["agree"]))
        if (p["kind"] in WORD_KINDS) != bool(p["words"].split()):
            raise DefError("%s: words go with the WORD kinds, and only there" % where)
        if p["kind"] in INT_KINDS and not -(1 << 63) <= p["min"] <= p["max"] <= INT64_MAX:
            raise DefError("%s: range [%d, %d]" % (where, p["min"], p["max"]))
        if not allows(p, p["dflt"]):
            raise DefError("%s: the default %r breaks its own rule" % (where, p["dflt"]))
        if len(p["help"]) <= 10 or "|" in p["help"]:
            raise DefError("%s: help must say something, and without '|'" % where)
        seen.add(p["name"])
        rows.append(p)
    if not rows:
        raise DefError("no WEFT_PARAM rows")
    return rows


def allowed_cell(p):
    words = ", ".join("`%s`" % w for w in p["words"].split())
    if p["kind"] == "STR":
        return "any text"
    if p["kind"] == "WORD_ANYCASE":
        words += " (any case)"
    if p["kind"] not in INT_KINDS:
        return words
    lo, hi = p["min"], p["max"]
    ints = ("%d or more" % lo if hi == INT64_MAX else
            "`%d` or `%d`" % (lo, hi) if hi == lo + 1 else "%d-%d" % (lo, hi))
    return words + ", or " + ints if words else ints


def linkify(help_text):
    """bench/results/X.txt and docs/Y.md#z, written plainly in params.def (collbench prints the
    same text), become links relative to docs/."""
    s = re.sub(r"\bbench/results/([\w.-]+\.txt)", r"[\1](../bench/results/\1)", help_text)
    return re.sub(r"\bdocs/([\w-]+\.md)(#[\w-]+)?", lambda m: "[%s](%s%s)" % (
        m.group(1), m.group(1), m.group(2) or ""), s)


def table(rows):
    lines = ["| variable | default | allowed | alike on all ranks | meaning |",
             "| --- | --- | --- | --- | --- |"]
    for p in rows:
        dflt = "`%s`" % p["dflt"] if p["dflt"] else "(unset)"
        agreed = "yes" if p["agree"] == "AGREED" else ""
        lines.append("| `%s` | %s | %s | %s | %s |" % (p["name"], dflt, allowed_cell(p), agreed,
                                                      linkify(p["help"])))
    return "\n".join(lines) + "\n"


def render(doc, rows):
    b, e = doc.find(BEGIN), doc.find(END)
    if b < 0 or e < b:
        raise DefError("the markdown has no %s ... %s" % (BEGIN, END))
    return doc[:b] + BEGIN + "\n\n" + table(rows) + "\n" + doc[e:]


def main(argv):
    check = argv[1:2] == ["--check"]
    args = argv[2:] if check else argv[1:]
    if len(args) != 2:
        sys.stderr.write(__doc__)
        return 2
    def_path, md_path = args
    try:
        rows = read_def(def_path)
        with open(md_path) as f:
            doc = f.read()
        new = render(doc, rows)
    except (DefError, OSError) as e:
        sys.stderr.write("gen_params.py: %s\n" % e)
        return 2
    if check:
        with tempfile.NamedTemporaryFile("w", suffix=".md", delete=False) as t:
            t.write(new)
        try:
            with open(t.name) as f:
                regenerated = f.read()
        finally:
            os.unlink(t.name)
        if regenerated == doc:
            print("%s: the table matches %s (%d variables)" % (md_path, def_path, len(rows)))
            return 0
        sys.stdout.writelines(difflib.unified_diff(
            doc.splitlines(True), regenerated.splitlines(True), md_path + " (committed)",
            md_path + " (from params.def)"))
        print("\n%s is stale: run `ninja -C <build> params-doc` and commit it" % md_path)
        return 1
    if new != doc:
        with open(md_path, "w") as f:
            f.write(new)
        print("rewrote the table of %s (%d variables)" % (md_path, len(rows)))
    else:
        print("%s: table up to date" % md_path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
