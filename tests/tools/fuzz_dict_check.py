#!/usr/bin/env python3
"""CTest check that fuzz/cli.dict names every flag the training programs take, so that fuzz_cli
(which parses exactly what they parse) reaches a new flag's checks instead of having to guess its
name: the flags are read from each program's --help; a flag missing from the dictionary fails, named.

  usage: fuzz_dict_check.py --dict fuzz/cli.dict --exe PROGRAM [--exe PROGRAM...]
"""
import argparse
import re
import subprocess
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dict", required=True)
    p.add_argument("--exe", action="append", required=True)
    a = p.parse_args()
    words = set()
    with open(a.dict, encoding="utf-8") as f:
        for line in f:
            m = re.match(r'^"(.*)"\s*$', line.strip())
            if m:
                words.add(m.group(1))
    missing = []
    for exe in a.exe:
        out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
        flags = sorted(set(re.findall(r"^\s+(--[a-z0-9][a-z0-9-]*)", out, re.M)))
        if len(flags) < 10:
            missing.append(f"{exe} --help listed only {len(flags)} flags: the help's format changed?")
        missing += [f"{exe}: {flag}" for flag in flags if flag not in words]
    for m in missing:
        print("fuzz_dict_check: not in " + a.dict + ": " + m)
    if missing:
        return 1
    print(f"fuzz_dict_check: every flag of {len(a.exe)} programs is in {a.dict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
