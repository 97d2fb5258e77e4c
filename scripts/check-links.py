#!/usr/bin/env python3
"""Checks that every relative link of the given Markdown files names a file or folder.

    scripts/check-links.py README.md docs/benchmarks/README.md

Links with a scheme (https:, mailto:) and links to an anchor of the same page are not
checked; a link's own anchor (`file.md#part`) is dropped before the check. Exits 1 and
names each broken link (file, line, target) when there is one.
"""

import re
import sys
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
# [text](target "title") and ![alt](target), and <img src="target">.
INLINE = re.compile(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
IMAGE = re.compile(r"<img\s[^>]*src=\"([^\"]+)\"")
# [label]: target
DEFINITION = re.compile(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s.*)?$")
FENCE = re.compile(r"^\s*(```|~~~)")


def targets(line):
    yield from INLINE.findall(line)
    yield from IMAGE.findall(line)
    match = DEFINITION.match(line)
    if match:
        yield match.group(1)


def check(path):
    problems = []
    in_code = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            in_code = not in_code
            continue
        if in_code:
            continue
        # Code spans are text, not links.
        line = re.sub(r"`[^`]*`", "", line)
        for target in targets(line):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target) or target.startswith("#"):
                continue
            file_part = unquote(target.split("#", 1)[0])
            resolved = (ROOT / file_part.lstrip("/")) if file_part.startswith("/") else (path.parent / file_part)
            if not resolved.exists():
                problems.append(f"{path.relative_to(ROOT)}:{number}: {target} does not exist")
    return problems


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    problems = []
    for name in sys.argv[1:]:
        path = (Path.cwd() / name).resolve()
        if not path.is_file():
            sys.exit(f"check-links: no file {name}")
        problems += check(path)
    if problems:
        print("\n".join(problems))
        sys.exit(f"check-links: {len(problems)} broken relative link(s)")
    print(f"check-links: every relative link of {', '.join(sys.argv[1:])} resolves")


if __name__ == "__main__":
    main()
