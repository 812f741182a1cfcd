#!/bin/sh
# Makes the package's venv with exactly the commands README.md's Python
# section gives (the venv named VENV instead of venv), with a python3 first
# on PATH that is not Debian's, as a pyenv or conda shell has: the README's
# lines must name Debian's interpreter, whose venv sees Debian's numpy.
# usage: readme_venv.sh VENV (QEM_CMAKE_BUILD_DIR passes through to pip)
set -eu
VENV=$1
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
fake=$(mktemp -d)
trap 'rm -rf "$fake"' EXIT
printf '#!/bin/sh\necho "not Debian'"'"'s python3 (a pyenv or conda one): no Debian numpy" >&2\nexit 1\n' \
    >"$fake/python3"
chmod +x "$fake/python3"
# The indented command lines between '## Python' and the next heading that
# make and fill the venv.
commands=$(awk '/^## Python/ {on = 1; next} /^## / {on = 0} on && /^    [^ ]/' "$ROOT/README.md" |
    sed -n 's/^    //; /-m venv\|venv\/bin\/pip install/p')
[ "$(printf '%s\n' "$commands" | wc -l)" -eq 2 ] ||
    { echo "readme_venv: README.md's Python section lacks its two venv commands" >&2; exit 1; }
rm -rf "$VENV"
cd "$ROOT"
printf '%s\n' "$commands" | sed "s#--system-site-packages venv\$#--system-site-packages $VENV#; s#^venv/bin/#$VENV/bin/#" |
    while IFS= read -r line; do
        echo "+ $line"
        PATH="$fake:$PATH" sh -c "$line" || { echo "readme_venv: README.md's '$line' failed" >&2; exit 1; }
    done
