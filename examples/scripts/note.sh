#!/bin/sh
# Appends one line to .tickwork/out/LOG.log (inside the project, which git ignores), so
# each example leaves a record of which tasks ran, in which order and how often.
# usage: sh scripts/note.sh LOG TEXT...
set -eu
log="$1"
shift
mkdir -p .tickwork/out
echo "$*" >>".tickwork/out/$log.log"
