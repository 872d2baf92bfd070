#!/usr/bin/env python3
# check_links: not a document (the pages and paths below are made up for the test)
"""CTest check of tools/check_links.py: runs it on a small tree written here (into --work) whose
pages hold good and broken links, file names in code spans, a source comment naming docs pages and
a file that opts out, and asserts exactly the problems it must report (and none for the good ones),
then that it passes once the broken ones are gone. Exits 1 naming what differs.

  usage: check_links_check.py --tool tools/check_links.py --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

PAGE = """# Tiles: `mma.sync` and more
## Why? (a question) & an answer
Good: [b](b.md), [b's part](b.md#a-part), [self](#tiles-mmasync-and-more), [q](#why-a-question--an-answer),
[the second](#why-a-question--an-answer-1), [folder](../kernels), ![picture](img/p.png), [site](https://example.com/x).
Broken: [gone](gone.md), [b, no such part](b.md#no-part), [here, no such part](#nothing),
[outside](../../etc), [absolute](/etc/passwd).
Code is left alone: `[not a link](nowhere.md)` and
```
[fenced](nowhere.md)
```
Files: `kernels/tile.h` is there, `kernels/gone.h` is not, `core/ops/NAME.cpp` is a pattern.
[ref]: missing.md
## Why? (a question) & an answer
"""

SOURCE = """// See docs/a.md#why-a-question--an-answer and docs/a.md#gone-section.
// And docs/missing.md, and docs/b.md.
"""

EXPECTED = {
    "docs/a.md:5: link 'gone.md': no such file docs/gone.md",
    "docs/a.md:5: link 'b.md#no-part': docs/b.md has no heading with the anchor #no-part",
    "docs/a.md:5: link '#nothing': docs/a.md has no heading with the anchor #nothing",
    "docs/a.md:6: link '../../etc' leaves the repository",
    "docs/a.md:6: link '/etc/passwd' is absolute; links in kiln are relative",
    "docs/a.md:11: names `kernels/gone.h`, which does not exist",
    "docs/a.md:12: link 'missing.md': no such file docs/missing.md",
    "kernels/tile.h:1: link 'docs/a.md#gone-section': docs/a.md has no heading with the anchor #gone-section",
    "kernels/tile.h:2: names docs/missing.md, which does not exist",
}


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def run(tool, root):
    r = subprocess.run([sys.executable, tool, "--root", root], capture_output=True, text=True)
    lines = [l for l in r.stdout.splitlines() if not l.startswith("check_links:")]
    return r.returncode, set(lines), r.stdout + r.stderr


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tool", required=True)
    p.add_argument("--work", required=True)
    args = p.parse_args()
    root = os.path.join(args.work, "tree")
    shutil.rmtree(root, ignore_errors=True)
    write(os.path.join(root, "docs", "a.md"), PAGE)
    write(os.path.join(root, "docs", "b.md"), "# B\n## A part\n")
    write(os.path.join(root, "docs", "img", "p.png"), "")
    write(os.path.join(root, "kernels", "tile.h"), SOURCE)
    # A file that opts out is passed over, its mention of a page that does not exist included.
    write(os.path.join(root, "tests", "made_up.py"), "# check_links: not a document\n# docs/nothere.md\n")

    failures = []
    rc, found, out = run(args.tool, root)
    if rc != 1:
        failures.append(f"exit status {rc} with broken links, expected 1")
    for missing in sorted(EXPECTED - found):
        failures.append(f"not reported: {missing}")
    for extra in sorted(found - EXPECTED):
        failures.append(f"reported, but the link is good: {extra}")

    # The same tree with the broken links taken out passes.
    good = PAGE.split("Broken:")[0] + "## Why? (a question) & an answer\n"
    write(os.path.join(root, "docs", "a.md"), good)
    write(os.path.join(root, "kernels", "tile.h"), "// docs/a.md#why-a-question--an-answer, docs/b.md#a-part\n")
    rc, found, out2 = run(args.tool, root)
    if rc != 0 or found:
        failures.append(f"the good tree: exit status {rc}, reported {sorted(found)}")

    if failures:
        print("check_links_check: FAILED\n  " + "\n  ".join(failures) + "\n--- output:\n" + out + out2)
        return 1
    print(f"check_links_check: {len(EXPECTED)} problems reported as expected; the good tree passes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
