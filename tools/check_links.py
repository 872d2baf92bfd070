#!/usr/bin/env python3
"""Checks that kiln's documents point at what exists:

- every relative link of a Markdown file names a file or folder of the repository, and a link into a
  Markdown file with #fragment names one of its headings (by the anchor GitHub gives it); links to
  other sites are not followed, and code blocks are left out, as the renderer leaves them out;
- every repository path a Markdown file names in a code span (`kernels/cuda/tile.cuh`) exists, but
  for paths with a placeholder in capitals (`core/ops/NAME.cpp`);
- every docs/*.md page the other tracked files name (a source's comment: "docs/simt.md") exists,
  with the heading of its #fragment where one is given.

  usage: python3 tools/check_links.py [--root DIR] [FILE ...]

With no files: every file under the root that git tracks or would track (outside a git checkout,
every file below it but build/ and hidden folders). A file whose first lines say "check_links: not a
document" is passed over (the checker's own test, whose pages are made up). Prints each problem as
FILE:LINE: and exits 1 when there is one; the CTest test docs_links runs it.
"""
import argparse
import os
import re
import subprocess
import sys
import unicodedata
from urllib.parse import unquote

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
# [text](target) and ![alt](target); the target may be <bracketed> and may carry a "title".
INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(\S+)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
HTML_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
# A path into the repository's own folders, as the documents name files in code spans.
REPO_PATH = re.compile(r"`((?:\.ci|bench|cmake|core|data|dist|docs|examples|fuzz|kernels|nn|tests|tools)/[\w./+-]*)`")
PLACEHOLDER = re.compile(r"(?<![a-z])[A-Z]{1,}(?![a-z])")  # NAME, N: a pattern, not a file
DOC_MENTION = re.compile(r"(?<![\w/.-])(docs/[\w./-]+?\.md)(#[\w-]+)?")
TEXT_SUFFIXES = (".cpp", ".h", ".cu", ".cuh", ".py", ".sh", ".cmake", ".txt", ".json", ".supp")
OPT_OUT = "check_links: not a document"
EXTERNAL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")  # http:, https:, mailto:, ...


def prose_lines(text, spans=False):
    """The file's lines, with fenced code blocks blanked and, unless `spans`, code spans removed (line
    numbers kept)."""
    lines = text.split("\n")
    out = []
    fence = None
    for line in lines:
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)[0] * len(m.group(1))
            out.append("")
            continue
        if fence is not None:
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                fence = None
            out.append("")
            continue
        out.append(line)
    if spans:
        return out
    # Code spans may run over a line break within a paragraph: remove them from the joined text.
    joined = "\n".join(out)
    joined = CODE_SPAN.sub(lambda m: "\n" * m.group(0).count("\n"), joined)
    return joined.split("\n")


def github_anchor(heading):
    """The id GitHub gives a heading: its text lowercased, without markup and punctuation but for
    hyphens and underscores, spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text only
    text = text.replace("`", "")
    text = re.sub(r"<[^>]+>", "", text)
    text = text.lower()
    kept = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in "-_ " or cat[0] in "LN" or cat == "Mn":
            kept.append(ch)
    return "".join(kept).replace(" ", "-")


def anchors_of(path, cache):
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        lines = prose_lines(f.read(), spans=True)  # a heading's code is part of its anchor
    seen = {}
    found = set()
    for line in lines:
        for a in HTML_ANCHOR.findall(line):
            found.add(a)
        m = HEADING.match(line)
        if not m:
            continue
        base = github_anchor(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    cache[path] = found
    return found


def links_of(lines):
    """(line number, target) of every inline link and reference definition."""
    for i, line in enumerate(lines, 1):
        m = REFERENCE_DEF.match(line)
        if m:
            yield i, m.group(2)
            continue
        for m in INLINE.finditer(line):
            target = m.group(1)
            if target.startswith("<") and target.endswith(">"):
                target = target[1:-1]
            yield i, target


def check_fragment(where, shown, dest, fragment, root, cache):
    if fragment and dest.endswith(".md") and os.path.isfile(dest):
        if unquote(fragment) not in anchors_of(dest, cache):
            return [f"{where}: link '{shown}': {os.path.relpath(dest, root)} has no heading with the anchor "
                    f"#{fragment}"]
    return []


def check_source(path, root, cache):
    """A tracked file other than Markdown: the docs pages it names."""
    problems = []
    rel = os.path.relpath(path, root)
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError:
        return problems
    for i, line in enumerate(lines, 1):
        for m in DOC_MENTION.finditer(line):
            dest = os.path.join(root, m.group(1))
            if not os.path.isfile(dest):
                problems.append(f"{rel}:{i}: names {m.group(1)}, which does not exist")
                continue
            problems += check_fragment(f"{rel}:{i}", m.group(0), dest, (m.group(2) or "#")[1:], root, cache)
    return problems


def check_file(md, root, cache):
    problems = []
    with open(md, encoding="utf-8") as f:
        text = f.read()
    lines = prose_lines(text)
    here = os.path.dirname(md)
    rel_md = os.path.relpath(md, root)
    for i, line in enumerate(prose_lines(text, spans=True), 1):
        for m in REPO_PATH.finditer(line):
            named = m.group(1).rstrip(".")
            if not PLACEHOLDER.search(named) and not os.path.exists(os.path.join(root, named)):
                problems.append(f"{rel_md}:{i}: names `{named}`, which does not exist")
    for line_no, target in links_of(lines):
        if not target or EXTERNAL.match(target):
            continue
        path_part, _, fragment = target.partition("#")
        path_part = unquote(path_part)
        if path_part.startswith("/"):
            problems.append(f"{rel_md}:{line_no}: link '{target}' is absolute; links in kiln are relative")
            continue
        dest = os.path.normpath(os.path.join(here, path_part)) if path_part else md
        if os.path.relpath(dest, root).startswith(".."):
            problems.append(f"{rel_md}:{line_no}: link '{target}' leaves the repository")
            continue
        if not os.path.exists(dest):
            problems.append(f"{rel_md}:{line_no}: link '{target}': no such file {os.path.relpath(dest, root)}")
            continue
        problems += check_fragment(f"{rel_md}:{line_no}", target, dest, fragment, root, cache)
    return problems


def tracked_files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard"], check=True, capture_output=True).stdout.decode()
        files = [os.path.join(root, p) for p in out.split("\0") if p]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    found = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not (d.startswith(".") and d != ".ci") and d != "build"]
        found += [os.path.join(dirpath, n) for n in filenames]
    return sorted(found)


def is_source(path):
    name = os.path.basename(path)
    return name.endswith(TEXT_SUFFIXES) or name == "CMakeLists.txt" or path.endswith(os.path.join(".ci", "run"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    files = [os.path.abspath(f) for f in args.files] or tracked_files(root)
    cache = {}
    problems = []
    links = 0
    pages = sources = 0
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                if OPT_OUT in "".join(f.readline() for _ in range(5)):
                    continue
        except (OSError, UnicodeDecodeError):
            continue
        if path.endswith(".md"):
            pages += 1
            with open(path, encoding="utf-8") as f:
                links += sum(1 for _ in links_of(prose_lines(f.read())))
            problems += check_file(path, root, cache)
        elif is_source(path) and os.path.isfile(path):
            sources += 1
            problems += check_source(path, root, cache)
    for p in problems:
        print(p)
    print(f"check_links: {pages} Markdown files ({links} links), {sources} other files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
