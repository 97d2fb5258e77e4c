#!/usr/bin/env python3
"""Fails when a public symbol of the documented modules has no summary line.

Reads the symbol graphs `make docs` extracts (.build/<triple>/extracted-symbols/<package>/
<Module>/*.symbols.json) and lists every public or open symbol declared in that module
whose doc comment is missing or empty. DocC's own --warnings-as-errors does not catch
these: an undocumented symbol is not a warning. Symbols the compiler synthesizes or
inherits from another module's protocol (`!=`, the `Equatable`, `AsyncSequence` or `Store`
default implementations, the protocol requirements `@Record` expands to) are left out:
their documentation is that protocol's, which DocC does not show in this module's archive
(see the Makefile's `docs` target on --enable-inherited-docs).

Usage: scripts/doc-summaries.py [--build-path .build] Module...
"""

import argparse
import glob
import json
import os
import sys


def graphs(build_path, module):
    """The newest extraction's symbol graph files of `module`."""
    folders = glob.glob(os.path.join(build_path, "*", "extracted-symbols", "*", module))
    if not folders:
        return []
    newest = max(folders, key=os.path.getmtime)
    return sorted(glob.glob(os.path.join(newest, "*.symbols.json")))


def documented(symbol):
    return any(line["text"].strip() for line in (symbol.get("docComment") or {}).get("lines", []))


def undocumented(path, module):
    with open(path, encoding="utf-8") as file:
        graph = json.load(file)
    # An extended type's page takes its summary from any documented extension of it, so
    # `extension Int64: PrimaryKeyValue {}` needs none beside a documented one.
    extended = {tuple(s["pathComponents"]) for s in graph["symbols"] if s["kind"]["identifier"] == "swift.extension" and documented(s)}
    for symbol in graph["symbols"]:
        if symbol["kind"]["identifier"] == "swift.extension" and tuple(symbol["pathComponents"]) in extended:
            continue
        if symbol.get("accessLevel") not in ("public", "open"):
            continue
        if "::SYNTHESIZED::" in symbol["identifier"]["precise"] or "sourceOrigin" in symbol:
            continue
        comment = symbol.get("docComment")
        # A comment the compiler took from a requirement in another module.
        if comment and comment.get("module") not in (None, module):
            continue
        if documented(symbol):
            continue
        location = symbol.get("location", {})
        file = location.get("uri", "").removeprefix("file://")
        line = location.get("position", {}).get("line", -1) + 1
        yield f"{os.path.relpath(file) if file else path}:{line}: {'.'.join(symbol['pathComponents'])} ({symbol['kind']['displayName']})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build-path", default=".build")
    parser.add_argument("modules", nargs="+")
    arguments = parser.parse_args()
    problems = []
    for module in arguments.modules:
        files = graphs(arguments.build_path, module)
        if not files:
            problems.append(f"{module}: no symbol graph under {arguments.build_path} (run `make docs`)")
            continue
        for path in files:
            problems.extend(undocumented(path, module))
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems:
        print(f"{len(problems)} public symbols without a summary line", file=sys.stderr)
        return 1
    print(f"Every public symbol of {', '.join(arguments.modules)} has a summary line.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
