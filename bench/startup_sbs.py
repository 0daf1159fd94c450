#!/usr/bin/env python3
"""Launch and warm memory of several builds (cobble's, or Pebble's), taking turns so that all
see the same load.

    python3 bench/startup_sbs.py ROUNDS MEMROUNDS NAME=BINARY... (the last is the reference)

Each round runs every build in turn (the order reversed every other round) as `run --hold` on
a fresh temporary $PEBBLE with no layers, timed from just before the spawn until the first
GET /v1/system-info answered (polled every 0.2 ms, as the harness does). In the first
MEMROUNDS rounds the daemon then serves the harness's warm-up (400 requests a charm
typically sends) and is read 1 s later: VmRSS, RssAnon, RssFile and threads from
/proc/PID/status, Pss from /proc/PID/smaps_rollup, and its CPU time over the 400 requests
(10 ms ticks). Prints each build's medians and its ratios to the last build's.
"""
import os, sys, shutil, statistics, tempfile, time
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "lib"))
from daemon import Daemon
def kib(text):
    d = {}
    for line in text.splitlines():
        k, _, r = line.partition(":"); p = r.split()
        if len(p) == 2 and p[1] == "kB": d[k] = int(p[0])
    return d
def ticks(pid):
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(st[11]) + int(st[12])
rounds, memrounds = int(sys.argv[1]), int(sys.argv[2])
builds = [a.split("=", 1) for a in sys.argv[3:]]
tmp = tempfile.mkdtemp(prefix="cobble-sbs-")
copies = {}
for name, b in builds:
    c = os.path.join(tmp, name); shutil.copy(b, c); copies[name] = c
res = {n: {"launch": [], "rss": [], "pss": [], "anon": [], "file": [], "cpu": [], "threads": []} for n, _ in builds}
load0 = os.getloadavg()
for r in range(rounds):
    order = builds if r % 2 == 0 else builds[::-1]
    for name, _ in order:
        pebble = tempfile.mkdtemp(prefix="p-", dir=tmp); os.makedirs(os.path.join(pebble, "layers"))
        d = Daemon(copies[name], pebble, log=os.devnull)
        try:
            res[name]["launch"].append(d.wait_answer() * 1000)
            if r < memrounds:
                t0 = ticks(d.pid); d.warm_up(); t1 = ticks(d.pid); time.sleep(1)
                s = kib(open(f"/proc/{d.pid}/status").read()); ro = kib(open(f"/proc/{d.pid}/smaps_rollup").read())
                thr = [l for l in open(f"/proc/{d.pid}/status").read().splitlines() if l.startswith("Threads")][0].split()[1]
                res[name]["rss"].append(s["VmRSS"]); res[name]["pss"].append(ro["Pss"]); res[name]["anon"].append(s["RssAnon"])
                res[name]["file"].append(s["RssFile"]); res[name]["cpu"].append((t1 - t0) * 10.0 / 400); res[name]["threads"].append(int(thr))
        finally:
            d.stop(); shutil.rmtree(pebble, ignore_errors=True)
load1 = os.getloadavg()
print(f"load average before {load0}, after {load1}; rounds {rounds}, memory rounds {memrounds}")
ref = builds[-1][0]
med = {n: {k: (statistics.median(v) if v else None) for k, v in res[n].items()} for n, _ in builds}
for n, _ in builds:
    m = med[n]; q = sorted(res[n]["launch"])
    line = f"{n:>10}: launch median {m['launch']:.3f} ms (p10 {q[len(q)//10]:.3f}, p90 {q[len(q)*9//10]:.3f})"
    if m["rss"]:
        line += f"; warm VmRSS {m['rss']/1024:.2f} MiB, Pss {m['pss']/1024:.2f}, anon {m['anon']/1024:.2f}, file {m['file']/1024:.2f}, threads {m['threads']:.0f}, CPU/request {m['cpu']:.3f} ms"
    print(line)
for n, _ in builds[:-1]:
    a, b = med[n], med[ref]
    out = f"{n:>10} / {ref}: launch {a['launch']/b['launch']:.2f}x"
    if a["rss"] and b["rss"]:
        out += f", VmRSS {a['rss']/b['rss']:.3f}x, Pss {a['pss']/b['pss']:.3f}x, anon {a['anon']/b['anon']:.3f}x, CPU {a['cpu']/b['cpu'] if b['cpu'] else float('nan'):.2f}x"
    print(out)
shutil.rmtree(tmp, ignore_errors=True)
