"""CPU of every thread of a process tree over a while, from /proc: JVM threads by name (numbers
folded), each Python process by pid. Usage: threads.py ROOT_PID SECONDS"""

import collections
import os
import re
import sys
import time


def children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = collections.defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent = int(f.read().rsplit(")", 1)[1].split()[1])
            except OSError:
                continue
            kids[parent].append(int(entry))
    return kids


def tree(root: int) -> list[int]:
    kids, found, todo = children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += kids[pid]
    return found


def ticks(pids: list[int]) -> dict[tuple[int, str], tuple[str, int]]:
    """(pid, tid) -> (thread name, user + system ticks)."""
    out = {}
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            name = stat[stat.index("(") + 1 : stat.rindex(")")]
            out[(pid, tid)] = (name, int(fields[11]) + int(fields[12]))
    return out


def command(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return "?"


root, seconds = int(sys.argv[1]), float(sys.argv[2])
pids = tree(root)
before = ticks(pids)
time.sleep(seconds)
after = ticks(pids)
hz = os.sysconf("SC_CLK_TCK")
used: collections.Counter[tuple[str, str]] = collections.Counter()
for key, (name, total) in after.items():
    exe = command(key[0])
    who = exe + (str(key[0]) if exe == "python" else "")
    used[(who, re.sub(r"\d+", "N", name))] += total - before.get(key, (name, 0))[1]
print(f"total {sum(used.values()) / hz / seconds:.3f} cores over {seconds}s")
for (who, name), spent in used.most_common(25):
    print(f"  {spent / hz / seconds:.3f}  {who:10s} {name}")
