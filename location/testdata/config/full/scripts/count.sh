#!/bin/sh
# Counts the words of the "text" field of its JSON input.
exec wc -w
