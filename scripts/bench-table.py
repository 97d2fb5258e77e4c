#!/usr/bin/env python3
"""The README's table of performance verdicts, made from the benchmark records.

Every folder under docs/benchmarks/ that holds a results.json is one run of depot-bench
(`make bench`, `make bench-postgres`; a debug build's folder is skipped). For each target those runs checked, the table
takes the latest three runs that checked it (by the date in results.json) and says in how
many the target was met. The table lives in README.md between the two marker comments.

    scripts/bench-table.py           print the table
    scripts/bench-table.py --write   rewrite README.md's table in place (make bench-table)
    scripts/bench-table.py --check   exit 1 when README.md's table is not this one (CI)
"""

import argparse
import difflib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "benchmarks"
README = ROOT / "README.md"
BEGIN = "<!-- bench-table:begin (made by scripts/bench-table.py: run `make bench-table`, do not edit) -->"
END = "<!-- bench-table:end -->"
RUNS = 3


def load_records():
    records = []
    for path in sorted(RECORDS.glob("*/results.json")):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            sys.exit(f"bench-table: {path.relative_to(ROOT)} is not readable JSON: {error}")
        if not isinstance(data.get("date"), str) or not isinstance(data.get("targets"), list):
            sys.exit(f"bench-table: {path.relative_to(ROOT)} has no date or targets: not a depot-bench record")
        # A debug build's figures say nothing about speed: such a folder is never a record.
        if data.get("build") != "release":
            print(f"bench-table: skipping {path.parent.relative_to(ROOT)}, a {data.get('build')} build", file=sys.stderr)
            continue
        records.append((data["date"], path.parent, data))
    # Newest first; the folder name breaks ties, so the order never depends on the file system.
    records.sort(key=lambda record: (record[0], record[1].name), reverse=True)
    return records


def short(measured):
    """A measured figure without the detail its target already says:
    `1.10× (179394 vs 163336 reads/s)` -> `1.10×`, `1.69 µs above raw (3.98 vs 2.29 µs)` -> `1.69 µs`."""
    text = re.sub(r"\s*\(.*\)$", "", measured)
    return re.sub(r" (above raw|objects/s)$", "", text)


def table(records):
    keys = []
    runs = {}
    for _, folder, data in records:
        # A run lists every target, also those of backends it did not run (a PostgreSQL run
        # has no memory store): only its own backends' targets are its checks.
        ran = {result["backend"] for result in data.get("results", [])}
        for target in data["targets"]:
            if target["backend"] not in ran:
                continue
            key = (target["workload"], target["backend"], target["target"])
            if key not in runs:
                keys.append(key)
                runs[key] = []
            if len(runs[key]) < RUNS:
                runs[key].append((folder, target))
    used = []
    for key in keys:
        for folder, _ in runs[key]:
            if folder not in used:
                used.append(folder)
    used.sort(key=lambda folder: folder.name)
    links = ", ".join(f"[{folder.name}]({folder.relative_to(ROOT).as_posix()}/report.md)" for folder in used)
    lines = [
        BEGIN,
        f"Targets met in the latest {RUNS} runs that checked them (figures newest first), from {links}.",
        "",
        "| target | latest runs | verdict |",
        "|---|---|---|",
    ]
    for key in keys:
        workload, backend, target = key
        checked = runs[key]
        met = sum(1 for _, t in checked if t.get("met") is True)
        figures = ", ".join(short(t["measured"]) for _, t in checked)
        # A target a run could not measure (no raw counterpart, no probe) says so.
        measured = sum(1 for _, t in checked if t.get("met") is not None)
        verdict = f"met in {met} of {len(checked)}" if measured else "not measured"
        lines.append(f"| {workload} {backend} {target} | {figures} | {verdict} |")
    # A blank line ends the table before the marker, so no renderer reads it as a row.
    lines += ["", END]
    return "\n".join(lines) + "\n"


def split_readme(text):
    start = text.find(BEGIN)
    end = text.find(END)
    if start < 0 or end < start:
        sys.exit(f"bench-table: README.md has no table between the markers\n  {BEGIN}\n  {END}")
    return text[:start], text[start:end + len(END) + 1], text[end + len(END) + 1:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--write", action="store_true", help="rewrite README.md's table in place")
    mode.add_argument("--check", action="store_true", help="exit 1 when README.md's table differs")
    args = parser.parse_args()

    records = load_records()
    if not records:
        sys.exit(f"bench-table: no records (*/results.json) under {RECORDS.relative_to(ROOT)}")
    made = table(records)
    if not (args.write or args.check):
        sys.stdout.write(made)
        return
    text = README.read_text(encoding="utf-8")
    before, current, after = split_readme(text)
    if args.write:
        if current != made:
            README.write_text(before + made + after, encoding="utf-8")
            print("bench-table: README.md's table rewritten")
        else:
            print("bench-table: README.md's table is up to date")
        return
    if current != made:
        sys.stdout.writelines(difflib.unified_diff(
            current.splitlines(keepends=True), made.splitlines(keepends=True),
            "README.md", "README.md (made from docs/benchmarks)"))
        sys.exit("bench-table: README.md's performance table is not the one the records make: run `make bench-table`")
    print(f"bench-table: README.md's table matches the latest records ({len(records)} under docs/benchmarks)")


if __name__ == "__main__":
    main()
