"""Storm's published multilang adapters: `storm.js`, `storm.py`, `storm.rb`.

Apache Storm publishes them on Maven Central as `org.apache.storm:multilang-javascript`,
`multilang-python` and `multilang-ruby` (each jar holds `resources/storm.<ext>`). Squall does not
copy them into its repository: `fetch` downloads the jars straight from Maven Central, checks
each against the SHA-1 Central publishes beside it (no Maven needed) and copies the three files
out. `scripts/setup` runs it once per version into `~/.cache/squall-multilang/<version>/`
(`SQUALL_MULTILANG_DIR` overrides the place; the worker image sets it to
/opt/squall-multilang, where its Dockerfile ran `fetch`). `extract` takes them from a local
Maven repository instead, for a machine that has them there. A shell component's working
directory gets a copy of every adapter found there, as Storm's `resources/` directory holds them
beside the component's own files.

    python -m squall.multilang.adapters            # where they are, or what to run
    python -m squall.multilang.adapters extract    # from ~/.m2 after `mvn dependency:get`
    python -m squall.multilang.adapters fetch      # from Maven Central itself
"""

from __future__ import annotations

import hashlib
import io
import os
import sys
import urllib.request
import zipfile
from pathlib import Path
from typing import Final

__all__ = ["ADAPTERS", "CENTRAL", "ENV", "MISSING_HINT", "STORM_VERSION", "adapters_dir", "extract", "fetch", "find",
           "require"]

STORM_VERSION: Final = "2.8.3"  # bench/storm's Storm
ENV: Final = "SQUALL_MULTILANG_DIR"
# artifact -> the file its jar holds under resources/
ADAPTERS: Final = {"multilang-javascript": "storm.js", "multilang-python": "storm.py", "multilang-ruby": "storm.rb"}
CENTRAL: Final = "https://repo1.maven.org/maven2"
MAX_JAR_BYTES: Final = 1 << 20  # each jar is about 10 KB
MISSING_HINT: Final = (f"run scripts/setup: it fetches org.apache.storm:multilang-* {STORM_VERSION} from "
                       f"Maven Central into ~/.cache/squall-multilang/{STORM_VERSION} (or set {ENV} "
                       "to a directory holding storm.js, storm.py and storm.rb)")


def adapters_dir() -> Path:
    env = os.environ.get(ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "squall-multilang" / STORM_VERSION


def find(directory: Path | None = None) -> dict[str, Path]:
    """The adapters present: file name (storm.js, ...) -> path."""
    d = directory if directory is not None else adapters_dir()
    return {name: d / name for name in ADAPTERS.values() if (d / name).is_file()}


def require(name: str, directory: Path | None = None) -> Path:
    """The path of one adapter (`storm.js`); FileNotFoundError saying what to run."""
    d = directory if directory is not None else adapters_dir()
    path = d / name
    if not path.is_file():
        raise FileNotFoundError(f"Storm's multilang adapter {name} is not in {d}; {MISSING_HINT}")
    return path


def extract(m2: Path, out: Path, version: str = STORM_VERSION) -> list[Path]:
    """Copy `resources/storm.*` out of the jars Maven put in `m2` (a local repository) into
    `out`. FileNotFoundError naming the first jar that is missing."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for artifact, name in ADAPTERS.items():
        jar = m2 / "org" / "apache" / "storm" / artifact / version / f"{artifact}-{version}.jar"
        if not jar.is_file():
            raise FileNotFoundError(f"{jar} is missing: mvn -B dependency:get "
                                    f"-Dartifact=org.apache.storm:{artifact}:{version}")
        with zipfile.ZipFile(jar) as z:
            written.append(_write(out, name, z.read(f"resources/{name}")))
    return written


def _write(out: Path, name: str, data: bytes) -> Path:
    tmp = out / f".{name}.tmp"
    tmp.write_bytes(data)
    tmp.replace(out / name)
    return out / name


def fetch(out: Path, version: str = STORM_VERSION, base: str = CENTRAL, timeout: float = 60.0) -> list[Path]:
    """Download the three jars from Maven Central (`base`), check each against the SHA-1 that
    Central publishes beside it, and copy their `resources/storm.*` into `out`. OSError (a
    `urllib.error.URLError` included) naming the jar that could not be fetched, ValueError for
    one whose digest does not match."""
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for artifact, name in ADAPTERS.items():
        url = f"{base}/org/apache/storm/{artifact}/{version}/{artifact}-{version}.jar"
        with urllib.request.urlopen(url, timeout=timeout) as r:
            jar = r.read(MAX_JAR_BYTES + 1)
        with urllib.request.urlopen(url + ".sha1", timeout=timeout) as r:
            want = r.read(200).decode("ascii", "replace").split()[0].lower()
        if len(jar) > MAX_JAR_BYTES:
            raise ValueError(f"{url} is over {MAX_JAR_BYTES} bytes: not Storm's adapter jar")
        got = hashlib.sha1(jar).hexdigest()  # noqa: S324 - Maven Central's published digest
        if got != want:
            raise ValueError(f"{url} has SHA-1 {got}, Maven Central publishes {want}")
        with zipfile.ZipFile(io.BytesIO(jar)) as z:
            written.append(_write(out, name, z.read(f"resources/{name}")))
    return written


def main(argv: list[str]) -> int:
    if argv[:1] == ["extract"]:
        m2 = Path(argv[1]) if len(argv) > 1 else Path.home() / ".m2" / "repository"
        try:
            for path in extract(m2, adapters_dir()):
                print(path)
        except FileNotFoundError as exc:
            print(f"squall.multilang.adapters: {exc}", file=sys.stderr)
            return 1
        return 0
    if argv[:1] == ["fetch"]:
        try:
            for path in fetch(adapters_dir()):
                print(path)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            print(f"squall.multilang.adapters: fetching Storm's adapters from {CENTRAL} failed: {exc}",
                  file=sys.stderr)
            return 1
        return 0
    found = find()
    missing = sorted(set(ADAPTERS.values()) - set(found))
    for path in found.values():
        print(path)
    if missing:
        print(f"missing: {', '.join(missing)}; {MISSING_HINT}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
