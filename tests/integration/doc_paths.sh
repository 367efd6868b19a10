#!/usr/bin/env bash
# The docs name files that exist: every path under src/, include/, tools/, tests/, bench/, docs/,
# examples/ or scripts/ written in README.md and docs/**/*.md (in backticks, or a file name with an
# extension in prose) exists, brace lists and globs expanded; and every `Note [Title]` they cite
# appears in the code.
# usage: doc_paths.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 2
docs=(README.md docs/*.md docs/lessons/*.md)
bad=0
checked=0
while IFS= read -r ref; do
  file=${ref%%:*}
  path=${ref#*:}
  path=${path%%[.,:;)]}       # sentence punctuation after the path
  path=${path%%[.,:;)]}
  # Brace lists and globs: every expansion must match something.
  expanded=$(eval "printf '%s\n' $path" 2>/dev/null) || expanded=$path
  while IFS= read -r p; do
    checked=$((checked + 1))
    if [[ $p == *'*'* ]]; then
      compgen -G "$p" > /dev/null || { echo "$file: no file matches $p"; bad=1; }
    elif [[ ! -e $p ]]; then
      echo "$file: $p does not exist"
      bad=1
    fi
  done <<< "$expanded"
done < <(grep -oE '(^|[^A-Za-z0-9_./-])(src|include|tools|tests|bench|docs|examples|scripts)/[A-Za-z0-9_./{},*+-]+' "${docs[@]}" \
           | grep -E ':`|\.[A-Za-z0-9*]+[.,:;)]*$' \
           | sed -E 's/^([^:]*):[^A-Za-z]?/\1:/' | sort -u)

while IFS= read -r ref; do
  file=${ref%%:*}
  note=${ref#*:}
  checked=$((checked + 1))
  grep -rqF -- "$note" src include tools bench examples || { echo "$file: $note is cited but not in the code"; bad=1; }
done < <(grep -oE 'Note \[[^]]+\]' "${docs[@]}" | sort -u)

echo "checked $checked paths and notes in ${#docs[@]} documents"
[[ $bad == 0 ]] && echo "every path and note exists"
exit $bad
