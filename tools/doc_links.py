#!/usr/bin/env python3
"""Checks the links of README.md and docs/*.md: every relative link names a
file or folder of the repository (and, into a Markdown file, one of its
headings), and none leaves the repository (no path above its top folder,
none to the shared folder beside the checkout, no http).

usage: doc_links.py [ROOT]   (default: the folder above tools/)
Prints each broken link as FILE:LINE: TARGET: why; exit 1 if any. With
GTEST_OUTPUT=xml:DIR/ (as tools/test.sh sets) it also writes a one-case
report there, so the run counts this check with the GoogleTest cases.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from case_report import report_case  # noqa: E402

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*```")


def slug(heading):
    """A heading's anchor as GitHub makes it: lower case, markup and
    punctuation gone, spaces to hyphens."""
    text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", lambda m: m.group(1) or "", heading)
    text = text.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path):
    seen, out = {}, set()
    in_code = False
    for line in open(path, encoding="utf-8"):
        if FENCE.match(line):
            in_code = not in_code
            continue
        m = None if in_code else HEADING.match(line)
        if m:
            s = slug(m.group(2))
            n = seen.get(s, 0)
            seen[s] = n + 1
            out.add(s if n == 0 else "%s-%d" % (s, n))
    return out


def check(root):
    root = os.path.realpath(root)
    pages = [os.path.join(root, "README.md")]
    docs = os.path.join(root, "docs")
    pages += sorted(os.path.join(docs, f) for f in os.listdir(docs) if f.endswith(".md"))
    errors = []
    for page in pages:
        rel = os.path.relpath(page, root)
        in_code = False
        for n, line in enumerate(open(page, encoding="utf-8"), 1):
            if FENCE.match(line):
                in_code = not in_code
                continue
            if in_code:
                continue
            if re.search(r"\.\./shared", line):
                errors.append("%s:%d: names the shared folder outside the repository" % (rel, n))
            for target in LINK.findall(line):
                where = "%s:%d: %s" % (rel, n, target)
                if re.match(r"^[a-z]+:", target):
                    errors.append(where + ": leaves the repository")
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.realpath(os.path.join(os.path.dirname(page), path)) if path else page
                if full != root and not full.startswith(root + os.sep):
                    errors.append(where + ": outside the repository")
                elif not os.path.exists(full):
                    errors.append(where + ": no such file")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    errors.append(where + ": no such heading")
    return len(pages), errors


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    pages, errors = check(root)
    for e in errors:
        print(e)
    print("doc_links: %d pages, %d broken link(s)" % (pages, len(errors)))
    report_case("Docs", "LinksResolve", errors)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
