#!/usr/bin/env python3
"""README's command examples against the real binary.

Every fenced block line `$ ringmaster ...` whose command is whole (no `...`) is run, in
README order, in one scratch folder (so `-o plan.yaml` then `simulate --plan plan.yaml`
works, as a reader would type them); each output line the README shows under it must be
a line of what the command prints (stdout and stderr, spaces collapsed). The README shows
excerpts, so lines it leaves out do not matter; lines holding `...` are elisions and are
skipped. Usage: readme_examples.py <ringmaster> <source-dir> [--all]. Exit 0 all match,
1 some differ (each named with the README line), 77 skipped.
"""
import os
import re
import shlex
import subprocess
import sys
import tempfile

# Replays too slow for every CI run (20-50 s each here, far more under the sanitizers);
# `readme_examples.py BIN SRC --all` runs them too.
SLOW = ("simulate --plan big.yaml", "simulate --plan pp4.yaml")


def examples(readme):
    """(README line number, command, [expected lines]) for each whole `$ ringmaster` line."""
    out, fenced, cur = [], False, None
    lines = open(readme, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        line = lines[i]
        bare = line.lstrip()  # fences and commands may be indented (inside a list item)
        if bare.startswith("```"):
            fenced = not fenced
            cur = None
        elif fenced and bare.startswith("$ "):
            cmd, first = bare[2:], i + 1
            while cmd.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd = cmd.rstrip()[:-1] + " " + lines[i].strip()
            cmd = re.sub(r"\s+#.*$", "", cmd).strip()  # a trailing comment
            cur = None
            if cmd.startswith("ringmaster ") and "..." not in cmd:
                cur = (first, cmd, [])
                out.append(cur)
        elif fenced and cur is not None and line.strip() and "..." not in line:
            cur[2].append(line)
        i += 1
    return out


def norm(line):
    return " ".join(line.split())


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    binary, src = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    run_all = "--all" in sys.argv[3:]
    found = examples(os.path.join(src, "README.md"))
    if not found:
        print("skipped: no `$ ringmaster` examples in README.md")
        return 77
    failures = checked = 0
    with tempfile.TemporaryDirectory() as tmp:
        # Paths in the examples are relative to a clone's root.
        for name in ("tests", "examples", "models", "topologies", "validation", "data"):
            if os.path.exists(os.path.join(src, name)):
                os.symlink(os.path.join(src, name), os.path.join(tmp, name))
        for line_no, cmd, expected in found:
            if not run_all and any(s in cmd for s in SLOW):
                print(f"README.md:{line_no}: skipped (slow): {cmd}")
                continue
            args = shlex.split(cmd)[1:]
            try:
                r = subprocess.run([binary] + args, cwd=tmp, capture_output=True, text=True, timeout=240)
            except subprocess.TimeoutExpired:
                print(f"FAIL README.md:{line_no}: {cmd}: timed out")
                failures += 1
                continue
            got = {norm(l) for l in (r.stdout + "\n" + r.stderr).split("\n")}
            missing = [e for e in expected if norm(e) not in got]
            checked += 1
            if missing:
                failures += 1
                print(f"FAIL README.md:{line_no}: {cmd}")
                for m in missing:
                    print(f"  shown, not printed: {m.strip()}")
    print(f"README examples: {checked} commands run, {failures} differ")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
