#!/bin/sh
# The container image's build steps (config/deploy/Dockerfile runs them), also fit to
# install pzq on a host for config/deploy/pzq.service. The test suite runs them in a
# temporary prefix.
#
#   config/deploy/build-steps.sh SOURCE PREFIX DATA ETC [USER]
#
# SOURCE  a copy of this repository
# PREFIX  where pzq's virtual environment goes (the image: /opt/pzq)
# DATA    the node's data directory (the image: /var/lib/pzq, a volume)
# ETC     where its options go, as pzq.toml (the image: /etc/pzq); one there is kept
# USER    the dedicated user to make and give DATA to (as root; none: no user made)
#
# PYTHON (environment) the interpreter to build on, python3 by default: the node runs
# on it as USER, so USER must be able to run it (not one under /root).
set -eu
if [ $# -lt 4 ]; then
    echo "usage: build-steps.sh SOURCE PREFIX DATA ETC [USER]" >&2
    exit 2
fi
source=$1 prefix=$2 data=$3 etc=$4 user=${5:-}
"${PYTHON:-python3}" -m venv "$prefix"
# with the monitoring extra: pzq-exporter runs beside each node (docs/deploying.rst)
"$prefix/bin/pip" install --quiet --disable-pip-version-check "$source[monitoring]"
# Compiled once here: a read-only installation is not compiled at every start.
"$prefix/bin/python" -m compileall -q "$prefix/lib"
mkdir -p "$data" "$etc"
# An options file there is the operator's (a new release built beside the old one
# for an upgrade gives the same ETC): kept as it is, never overwritten.
if [ -e "$etc/pzq.toml" ]; then
    echo "build-steps.sh: $etc/pzq.toml is there already: kept as it is" >&2
else
    sed "s|/var/lib/pzq|$data|g" "$source/config/deploy/pzq.toml" > "$etc/pzq.toml"
fi
if [ -n "$user" ]; then
    id "$user" >/dev/null 2>&1 || \
        useradd --system --user-group --home-dir "$data" --shell /usr/sbin/nologin "$user"
    chown "$user:" "$data"
    chmod 0750 "$data"
    # The unit and the image run the node as USER: an interpreter it may not run (one
    # of root's own, under /root) failed only at the service's start.
    if ! runuser -u "$user" -- "$prefix/bin/python" -c "" 2>/dev/null; then
        echo "build-steps.sh: the user $user cannot run $prefix/bin/python (it runs" \
             "$(readlink -f "$prefix/bin/python")): build on an interpreter it may" \
             "run, e.g. PYTHON=/usr/bin/python3" >&2
        exit 1
    fi
fi
"$prefix/bin/pzq" --version
