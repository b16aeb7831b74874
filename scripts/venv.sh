# Sourced by scripts/run and scripts/test: make sure .venv holds an up-to-date install.
VENV="${SUANLI_VENV:-.venv}"
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
stamp="$VENV/.suanli-installed"
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  "$VENV/bin/python" -m pip install -q --upgrade pip
  "$VENV/bin/python" -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
