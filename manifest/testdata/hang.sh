#!/bin/sh
# Records its process group id (its own pid: it leads the group) in $PIDFILE, then
# waits on a background child forever. With IGNORE_TERM set it ignores SIGTERM, and
# so does its child.
if [ -n "$IGNORE_TERM" ]; then trap '' TERM; fi
echo $$ > "$PIDFILE"
sleep 300 &
wait
