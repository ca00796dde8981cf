#!/bin/sh
# A text tool in shell: reads the input JSON line from stdin, greets it.
read -r input
printf 'hello from sh, you sent %s\n' "$input"
echo "(working in $(pwd))"
