#!/bin/sh
# Writes 10 000 numbered lines to stderr, then fails with status 3.
i=0
while [ $i -lt 10000 ]; do
  echo "diagnostic line $i" >&2
  i=$((i + 1))
done
echo "fatal: the input was not acceptable" >&2
exit 3
