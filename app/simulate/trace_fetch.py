"""Put the public traces the evaluation scenarios read into ``eval/traces/``.

Why a fetch and not files in the repository: neither upstream grants a redistribution
licence (the Alibaba trace is offered "for study or research purposes", the processed
Philly file comes from a repository without a licence; ``eval/traces/README.md``). So
``make traces`` downloads each file from its upstream repository at a pinned commit, or
copies it from a folder that already holds it (``--from DIR``), and keeps it only when
its SHA-256 is the one in ``eval/traces/sources.csv``: every figure in docs/evaluation.md
was measured on exactly these bytes.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import shutil
import sys
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

TRACES_DIR = Path(__file__).resolve().parents[2] / "eval" / "traces"
SOURCES = "sources.csv"


@dataclass(frozen=True)
class TraceSource:
    """One file of ``sources.csv``: where it goes, where it comes from, its digest."""

    path: str
    url: str
    sha256: str
    bytes: int


def read_sources(folder: Path = TRACES_DIR) -> list[TraceSource]:
    """The manifest beside the traces (path, url, sha256, bytes)."""
    with (folder / SOURCES).open(newline="") as f:
        return [TraceSource(r["path"], r["url"], r["sha256"], int(r["bytes"]))
                for r in csv.DictReader(f)]


def sha256_of(p: Path) -> str:
    """Hex SHA-256 of a file, read in blocks (the Philly file is 3.4 MB)."""
    h = hashlib.sha256()
    with p.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _candidates(src: TraceSource, from_dir: Path) -> list[Path]:
    """``DIR/path``, then the path with its leading folders dropped (``DIR/name.csv``)."""
    parts = Path(src.path).parts
    return [from_dir / Path(*parts[i:]) for i in range(len(parts))]


def _obtain(src: TraceSource, tmp: Path, from_dir: Path | None) -> str:
    """Copy or download ``src`` into ``tmp``; returns where it came from."""
    if from_dir is not None:
        for c in _candidates(src, from_dir):
            if c.is_file():
                shutil.copyfile(c, tmp)
                return str(c)
        raise FileNotFoundError(f"{src.path} is not under {from_dir}")
    with urllib.request.urlopen(src.url, timeout=60) as r, tmp.open("wb") as f:  # noqa: S310 (pinned https URLs of the manifest)
        shutil.copyfileobj(r, f)
    return src.url


def fetch(dest: Path = TRACES_DIR, from_dir: Path | None = None,
          log=print) -> list[str]:
    """Make every manifest file present and verified under ``dest``; returns the
    problems (empty when all is well). A file already there with the right digest is
    kept; a wrong one is replaced; nothing unverified is ever left at the final path."""
    problems: list[str] = []
    for src in read_sources(dest if (dest / SOURCES).is_file() else TRACES_DIR):
        final = dest / src.path
        if final.is_file() and sha256_of(final) == src.sha256:
            log(f"ok       {src.path}")
            continue
        final.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=final.parent) as td:
            tmp = Path(td) / final.name
            try:
                origin = _obtain(src, tmp, from_dir)
            except OSError as e:
                problems.append(f"{src.path}: cannot get it ({e}); download it from "
                                f"{src.url} into {final}, or run "
                                "`make traces TRACES_FROM=DIR` with a folder holding it")
                continue
            got = sha256_of(tmp)
            if got != src.sha256:
                problems.append(f"{src.path}: SHA-256 {got} from {origin} is not the pinned "
                                f"{src.sha256} (a different version of the file): not kept")
                continue
            tmp.replace(final)
            log(f"fetched  {src.path} ({src.bytes:,} bytes) from {origin}")
    return problems


def main(argv: list[str] | None = None) -> int:
    """``python -m app.simulate.trace_fetch [--from DIR] [--dest DIR]`` (``make traces``)."""
    ap = argparse.ArgumentParser(
        prog="python -m app.simulate.trace_fetch",
        description="Download (or copy with --from) the public traces of eval/ and check "
                    "their SHA-256 against eval/traces/sources.csv.")
    ap.add_argument("--from", dest="from_dir", metavar="DIR", type=Path,
                    help="copy from this folder instead of downloading")
    ap.add_argument("--dest", metavar="DIR", type=Path, default=TRACES_DIR,
                    help=f"where the traces go (default {TRACES_DIR})")
    a = ap.parse_args(argv)
    problems = fetch(a.dest, a.from_dir)
    for p in problems:
        print(f"error: {p}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
