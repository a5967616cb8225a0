#!/usr/bin/env bash
# Clone this checkout into a new, empty temporary directory, as a user's fresh clone: tracked files only (no venv,
# no caches, no local databases, no untracked or ignored file), and nothing beside it (no sibling folder such as
# the shared corpora). Edits to tracked files that are not committed yet are applied on top, so a developer tests
# what they are about to commit; a new file must be `git add`ed to be part of the run. Prints the clone's path.
set -euo pipefail
cd "$(dirname "$0")/.."
fresh="$(mktemp -d)/rubric-monitor"
git clone --quiet --no-hardlinks . "$fresh" >&2
changes="$(mktemp)"
git diff HEAD --binary > "$changes"
if [[ -s "$changes" ]]; then
  git -C "$fresh" apply --whitespace=nowarn "$changes"
fi
rm -f "$changes"
echo "$fresh"
