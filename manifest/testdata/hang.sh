#!/bin/sh
# Waits on a background child forever, having recorded its process group id (its
# own pid: it leads the group) in $PIDFILE once that child exists: contained, the
# script is the init of a PID namespace, which a SIGTERM from the host does not
# reach (no handler), so a test that signals the group as soon as the file is there
# ends the child, and with it the wait. With IGNORE_TERM set it ignores SIGTERM, and
# so does its child.
if [ -n "$IGNORE_TERM" ]; then trap '' TERM; fi
sleep 300 &
echo $$ > "$PIDFILE"
wait
