"""Storm's published multilang adapters: `storm.js`, `storm.py`, `storm.rb`.

Apache Storm publishes them on Maven Central as `org.apache.storm:multilang-javascript`,
`multilang-python` and `multilang-ruby` (each jar holds `resources/storm.<ext>`). Squall does not
copy them into its repository: `scripts/setup` fetches the jars with Maven once per version and
extracts the three files into `~/.cache/squall-multilang/<version>/` (`SQUALL_MULTILANG_DIR`
overrides the place; a worker image sets it to where its Dockerfile put them). A shell
component's working directory gets a copy of every adapter found there, as Storm's
`resources/` directory holds them beside the component's own files.

    python -m squall.multilang.adapters            # where they are, or what to run
    python -m squall.multilang.adapters extract    # from ~/.m2 after `mvn dependency:get`
"""

from __future__ import annotations

import os
import sys
import zipfile
from pathlib import Path
from typing import Final

__all__ = ["ADAPTERS", "ENV", "MISSING_HINT", "STORM_VERSION", "adapters_dir", "extract", "find", "require"]

STORM_VERSION: Final = "2.8.3"  # bench/storm's Storm
ENV: Final = "SQUALL_MULTILANG_DIR"
# artifact -> the file its jar holds under resources/
ADAPTERS: Final = {"multilang-javascript": "storm.js", "multilang-python": "storm.py", "multilang-ruby": "storm.rb"}
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
            data = z.read(f"resources/{name}")
        tmp = out / f".{name}.tmp"
        tmp.write_bytes(data)
        tmp.replace(out / name)
        written.append(out / name)
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
