import sys, collections
tot = collections.Counter(); self_ = collections.Counter(); n = 0
for line in open(sys.argv[1]):
    stack, _, c = line.rstrip().rpartition(" ")
    c = int(c); n += c
    frames = stack.split(";")
    seen = set()
    for f in frames:
        key = f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0] + ")" if " (" in f else f
        if key not in seen:
            tot[key] += c; seen.add(key)
    self_[frames[-1]] += c
print("samples", n)
for k, v in tot.most_common(int(sys.argv[2]) if len(sys.argv) > 2 else 60): print(f"{100*v/n:5.1f} {k}")
print("--- self")
for k, v in self_.most_common(30): print(f"{100*v/n:5.1f} {k}")
