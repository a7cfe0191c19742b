"""A process that adds messages to a chat memory (tests/chat/test_memory_store.py): ``python
memory_writer.py WHERE TAG N SESSION [SESSION ...] [--window W]`` adds N user messages
``TAG-i`` to each session in turn (i = 0..N-1), one write each. It prints ``open`` once
imported and opens the memory after a line on stdin, so that the writers start together."""

from __future__ import annotations

import argparse
import sys

from fastrag.chat import ChatMemory, MessageWindowChatMemory

p = argparse.ArgumentParser()
p.add_argument("where")
p.add_argument("tag")
p.add_argument("n", type=int)
p.add_argument("sessions", nargs="+")
p.add_argument("--window", type=int, default=0)
args = p.parse_args()
print("open", flush=True)
sys.stdin.readline()
memory = (  # opened by every writer at once: a new database is created under contention
    MessageWindowChatMemory(max_messages=args.window, path=args.where)
    if args.window
    else ChatMemory(path=args.where)
)
for i in range(args.n):
    for sid in args.sessions:
        memory.add(sid, "user", f"{args.tag}-{i}")
memory.close()
print("done", flush=True)
