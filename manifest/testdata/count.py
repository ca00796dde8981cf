#!/usr/bin/env python3
"""A JSON tool in Python: counts the words and characters of {"text": ...}."""
import json
import sys

data = json.load(sys.stdin)
text = data["text"]
json.dump({"words": len(text.split()), "chars": len(text)}, sys.stdout)
