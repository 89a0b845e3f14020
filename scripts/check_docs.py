#!/usr/bin/env python3
"""Checks that the repository's references resolve inside the repository (part of `make test`).

1. Every `Note [Name]` cited in a source file or document has a definition: a comment line that
   begins with it (`// Note [Name]` or `# Note [Name]`). A citation that names the file
   ("Note [Name] in vm/device_worker.h") must find the definition in that file.
2. Every repository path a file cites (`design/vm.md`, `adapters/torch/fallback.cc`,
   `tests/torch/...py`) exists.
3. Nothing points outside the repository: no sibling folder of briefs, no absolute paths into a work tree, no
   briefing documents the repository does not have.

Prints each finding as FILE:LINE: message and exits 1 when there is any; 0 and a one-line
summary otherwise. Run from anywhere: `python3 scripts/check_docs.py`; `--self-test` checks the
checker on a scratch repository.
"""
import bisect
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".h", ".cc", ".md", ".py", ".cmake", ".txt", ".in", ".sh", ".toml", ".oclvm"}
TEXT_NAMES = {"Makefile", "CMakeLists.txt", "run"}
# Top-level folders a cited path may start with.
TOP_DIRS = ("adapters", "bench", "cmake", "design", "examples", "fuzz", "include", "instructions",
            "python", "sanitizers", "scripts", "storage", "tests", "vm", ".ci")
PATH_RE = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*[\w-])" % "|".join(re.escape(d) for d in TOP_DIRS))
NOTE_RE = re.compile(r"Note \[([^\]]+)\]")
NOTE_IN_RE = re.compile(r"Note \[([^\]]+)\] in ([\w./-]+\.\w+)")
DEFINITION_RE = re.compile(r"^\s*(?://|#)\s*Note \[([^\]]+)\]")
# The names are assembled from parts so that this file, which must name them, is not itself a
# reference outside the repository to the scans that look for them.
OUTSIDE = ["../" + "shared", "/" + "work/"] + [name + ".md" for name in ("DESIGN", "REFERENCE", "STYLE")]
OUTSIDE_RE = re.compile("|".join(re.escape(name) for name in OUTSIDE))
# Paths that name build outputs or patterns rather than files in the repository.
GENERATED = re.compile(r"(^|/)(build[\w-]*|\.venv)(/|$)|\*|\{|<|\.\.\.|/$")


def is_file_path(cited: str) -> bool:
    """Whether `cited` names a file: its last part has an extension (not a rate such as
    "instructions/s", a file pair's stem or a prefix), and no part is a placeholder in capitals."""
    parts = cited.split("/")
    if any(part.split(".")[0].isupper() for part in parts):
        return False
    return "." in parts[-1].strip(".")


def resolves(cited: str, citing_dir: pathlib.Path) -> bool:
    """A path resolves from the repository's root, from the citing file's folder (a CMake list
    naming its own sources) or from tests/ (the test tables name tests relative to it); a
    generated file, from the template it is made from."""
    for base in (ROOT, citing_dir, ROOT / "tests"):
        if (base / cited).exists() or (base / (cited + ".in")).exists():
            return True
    return False


def tracked_files() -> list:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True)
    files = []
    for name in out.stdout.splitlines():
        path = ROOT / name
        if not path.is_file():
            continue
        if path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES:
            files.append(path)
    return files


FOLD_RE = re.compile(r"\n[ \t]*(?://+|#+|\*)?[ \t]*")


def folded(text: str):
    """The text with line breaks inside comments folded to spaces, so that a citation wrapped
    over two comment lines reads as one, and a function from an offset in it to a line number."""
    pieces, starts, position = [], [0], 0  # starts[i]: offset in the folded text of line i + 1
    for match in FOLD_RE.finditer(text):
        pieces.append(text[position:match.start()])
        pieces.append(" ")
        starts.append(sum(len(piece) for piece in pieces))
        position = match.end()
    pieces.append(text[position:])
    return "".join(pieces), lambda offset: bisect.bisect_right(starts, offset)


def self_test() -> int:
    """Runs the check on a scratch repository with one reference of each kind that must fail and
    one that must pass; exits 1 unless exactly the failing ones are reported."""
    import tempfile
    global ROOT
    with tempfile.TemporaryDirectory() as scratch:
        ROOT = pathlib.Path(scratch)
        (ROOT / "vm").mkdir()
        (ROOT / "design").mkdir()
        (ROOT / "vm" / "a.cc").write_text(
            "// Note [Defined here]\n// ~~~~~~~~~~~~~~~~~~~\n// Text.\n"
            "// See Note [Defined\n// here] and Note [Nowhere] and Note [Defined here] in b.cc.\n")
        (ROOT / "design" / "x.md").write_text(
            f"Read vm/a.cc and vm/missing.h; 5 instructions/s is a rate; {OUTSIDE[0]} is outside.\n")
        subprocess.run(["git", "init", "-q"], cwd=ROOT, check=True)
        subprocess.run(["git", "add", "."], cwd=ROOT, check=True)
        findings = check()
    expected = [
        "design/x.md:1: cites vm/missing.h, which does not exist",
        f"design/x.md:1: points outside the repository ({OUTSIDE[0]})",
        "vm/a.cc:5: Note [Defined here] is said to be in b.cc, but is defined in vm/a.cc",
        "vm/a.cc:5: Note [Nowhere] is cited but defined nowhere",
    ]
    if sorted(findings) != expected:
        print("check_docs self-test: expected\n  " + "\n  ".join(expected) +
              "\nbut got\n  " + "\n  ".join(sorted(findings)))
        return 1
    print(f"check_docs self-test: the {len(expected)} planted references were found, nothing else")
    return 0


def main() -> int:
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    findings = check()
    for finding in findings:
        print(finding)
    if findings:
        print(f"check_docs: {len(findings)} reference(s) that do not resolve")
        return 1
    print("check_docs: every Note and path cited resolves")
    return 0


def check() -> list:
    files = tracked_files()
    texts = {path: path.read_text(encoding="utf-8", errors="replace") for path in files}
    definitions = {}  # note name -> set of relative paths defining it
    for path, text in texts.items():
        for line in text.splitlines():
            match = DEFINITION_RE.match(line)
            if match:
                definitions.setdefault(match.group(1), set()).add(str(path.relative_to(ROOT)))

    findings = []
    for path, text in texts.items():
        relative = str(path.relative_to(ROOT))
        if relative == "scripts/check_docs.py":
            continue  # its own patterns and examples
        flat, line_at = folded(text)
        for match in NOTE_RE.finditer(flat):
            if match.group(1) not in definitions:
                findings.append(f"{relative}:{line_at(match.start())}: "
                                f"Note [{match.group(1)}] is cited but defined nowhere")
        for match in NOTE_IN_RE.finditer(flat):
            name, where = match.groups()
            defined_in = definitions.get(name, set())
            if defined_in and not any(d == where or d.endswith("/" + where) for d in defined_in):
                findings.append(f"{relative}:{line_at(match.start())}: Note [{name}] "
                                f"is said to be in {where}, but is defined in "
                                f"{', '.join(sorted(defined_in))}")
        for number, line in enumerate(text.splitlines(), 1):
            for cited in PATH_RE.findall(line):
                cited = cited.rstrip(".")
                if GENERATED.search(cited) or not is_file_path(cited):
                    continue
                if not resolves(cited, path.parent):
                    findings.append(f"{relative}:{number}: cites {cited}, which does not exist")
            match = OUTSIDE_RE.search(line)
            if match:
                findings.append(f"{relative}:{number}: points outside the repository "
                                f"({match.group(0)})")

    return findings


if __name__ == "__main__":
    sys.exit(main())
