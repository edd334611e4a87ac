# Sourced by bench/device/run and bench/device/ab on the lent machine (repository root as the
# working directory, .devrun carried): the wheels into /tmp/site, the jlinked JRE on PATH, and
# `pp TREE`, the PYTHONPATH that runs Squall from a source tree (SKIP_WHL=1: dependencies are
# already importable, as in a dry run here with PY=.venv/bin/python).
REPO=$(pwd); OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
PY=${PY:-python3}
t0=$(date +%s)
echo "== $(date -u) $(nproc) cpus; $(uname -r); $($PY --version)"; cat /proc/loadavg
if [ -z "${SKIP_WHL:-}" ]; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .devrun/whl/*.whl || exit 3
fi
mkdir -p /tmp/jre && tar -C /tmp/jre -xJf .devrun/jre.tar.xz && export PATH=/tmp/jre/jre/bin:$PATH JAVA_HOME=/tmp/jre/jre
java -version 2>&1 | head -1
pp() { echo "$1:$1/worker_image:$1/operator:$REPO/.devrun/zk:/tmp/site"; }
