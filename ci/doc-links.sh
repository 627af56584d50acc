#!/usr/bin/env bash
# Every relative link in the Markdown files (tracked, or new and not ignored) resolves, and every docs/<name>.md that
# code under crates/ names exists.
#   ./ci/doc-links.sh            # exit 0: all resolve; 1: each broken link listed as FILE:LINE
# A link resolves when its file or directory exists (relative to the Markdown file; a leading
# / means the repository root) and, when it has a #fragment into a Markdown file, that file has
# a heading with that GitHub-style anchor (lower case, punctuation dropped, spaces to '-',
# repeats suffixed -1, -2, ...) or an explicit <a name|id="...">. Links inside code blocks and
# inline code are not links; http(s), mailto and other schemes are not checked.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 - "$@" <<'PY'
import os
import re
import subprocess
import sys
import urllib.parse

ROOT = os.getcwd()

def tracked(pattern):
    out = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", pattern], check=True,
                         capture_output=True).stdout.decode()
    return sorted(p for p in out.split("\0") if p)

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+[^>]*(?:name|id)\s*=\s*\"([^\"]+)\"", re.I)
INLINE_CODE = re.compile(r"(`+)(.+?)\1")
# [text](target) and ![alt](target); target without spaces, optional "title".
INLINE_LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s+<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$")

def prose_lines(path):
    """(line number, text) of the lines outside fenced code blocks."""
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    fence = None
    for n, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None:
            if m:
                fence = m.group(1)
                continue
            yield n, line
        elif m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                and line.strip() == m.group(1):
            fence = None

def slug(text):
    text = INLINE_CODE.sub(lambda m: m.group(2), text)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)   # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text)                       # HTML tags
    text = text.strip().lower()
    text = "".join(c for c in text if c.isalnum() or c in " -_")
    return text.replace(" ", "-")

_anchors = {}
def anchors(path):
    if path not in _anchors:
        seen = {}
        found = set()
        for _, line in prose_lines(path):
            for a in EXPLICIT_ANCHOR.findall(line):
                found.add(a)
            m = HEADING.match(line)
            if not m:
                continue
            s = slug(m.group(2))
            if s in seen:
                seen[s] += 1
                found.add(f"{s}-{seen[s]}")
            else:
                seen[s] = 0
                found.add(s)
        _anchors[path] = found
    return _anchors[path]

def check_target(src, target):
    """None when target (relative to the file src) resolves, else the reason."""
    if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("//"):
        return None
    path, _, frag = target.partition("#")
    path = urllib.parse.unquote(path)
    frag = urllib.parse.unquote(frag)
    if path == "":
        dest = os.path.join(ROOT, src)
    elif path.startswith("/"):
        dest = os.path.normpath(os.path.join(ROOT, path.lstrip("/")))
    else:
        dest = os.path.normpath(os.path.join(os.path.dirname(os.path.join(ROOT, src)), path))
    if not (dest + os.sep).startswith(ROOT + os.sep) and dest != ROOT:
        return f"{path} points outside the repository"
    if not os.path.exists(dest):
        return f"{os.path.relpath(dest, ROOT)} does not exist"
    if frag and dest.endswith(".md") and os.path.isfile(dest):
        if frag.startswith("L") and frag[1:].split("-")[0].isdigit():
            return None
        if frag not in anchors(dest):
            return f"{os.path.relpath(dest, ROOT)} has no heading with anchor #{frag}"
    return None

errors = []
md_files = tracked("*.md")
for md in md_files:
    for n, line in prose_lines(md):
        text = INLINE_CODE.sub("", line)
        targets = INLINE_LINK.findall(text)
        m = REF_DEF.match(text)
        if m:
            targets.append(m.group(1))
        for t in targets:
            why = check_target(md, t)
            if why:
                errors.append(f"{md}:{n}: broken link ({t}): {why}")

# docs/<name>.md (optionally #anchor) named anywhere in the code under crates/
DOC_REF = re.compile(r"docs/([A-Za-z0-9_.-]+\.md)(#[A-Za-z0-9_-]+)?")
for src in tracked("crates"):
    if src.endswith(".md") or os.path.islink(src):
        continue
    try:
        with open(src, encoding="utf-8") as f:
            content = f.read()
    except (UnicodeDecodeError, OSError):
        continue
    for n, line in enumerate(content.split("\n"), 1):
        for name, frag in DOC_REF.findall(line):
            why = check_target("README.md", f"docs/{name}{frag}")
            if why:
                errors.append(f"{src}:{n}: names docs/{name}{frag}: {why}")

for e in errors:
    print(e)
checked = len(md_files)
if errors:
    print(f"doc-links: {len(errors)} broken link(s) in {checked} Markdown files and crates/")
    sys.exit(1)
print(f"doc-links: every relative link in {checked} Markdown files and every docs/*.md named under crates/ resolves")
PY
