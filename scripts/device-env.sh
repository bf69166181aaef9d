# Sourced by the scripts that run on a device machine (no package registry there): installs the wheels carried
# in .whl/ (specmon's own, built here with `.venv/bin/pip wheel --no-deps -w .whl .`, and any dependency the
# machine lacks) into /tmp/site, so `python3 -m specmon` imports the installed package, never the checkout.
if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH="/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! python3 -c "import specmon.cli" 2>/dev/null; then
    echo "specmon is not installed here: build its wheel first (.venv/bin/pip wheel --no-deps -w .whl .)" >&2
    exit 2
fi
