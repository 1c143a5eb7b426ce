#!/bin/sh
# Every service's entrypoint in docker-compose.yml: refuse to start while one of this container's
# secrets (/run/secrets, or $KAFKALAKE_SECRETS_DIR) is empty or still holds a `change-me-`
# placeholder, naming the file and never its value; otherwise run the image's own entrypoint ("$@").
# POSIX sh: the postgres, Kafka and S3 images have no bash in common.
set -eu
dir="${KAFKALAKE_SECRETS_DIR:-/run/secrets}"
refused=0
for file in "$dir"/*; do
    [ -e "$file" ] || continue
    if [ ! -f "$file" ] || [ ! -r "$file" ]; then
        echo "kafkalake: secret $file cannot be read by uid $(id -u): see docs/security.md" >&2
        refused=1
    elif ! grep -q '[^[:space:]]' "$file"; then
        echo "kafkalake: secret $file is empty: python -m kafkalake.dev.compose_secrets writes one" >&2
        refused=1
    elif grep -q 'change-me-' "$file"; then
        echo "kafkalake: secret $file still holds a change-me- placeholder: set a random value" >&2
        refused=1
    fi
done
if [ "$refused" -ne 0 ]; then
    echo "kafkalake: not starting $*" >&2
    exit 78  # EX_CONFIG
fi
exec "$@"
