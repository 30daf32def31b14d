import os, subprocess, sys, time, statistics
def run(cmd, n=20):
    wall=[]; cpu=[]
    for _ in range(n):
        t=time.perf_counter()
        p=subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall.append((time.perf_counter()-t)*1000); cpu.append((ru.ru_utime+ru.ru_stime)*1000)
    return statistics.median(wall), min(wall), statistics.median(cpu), os.waitstatus_to_exitcode(status)
for cmd in sys.argv[1:]:
    w, lo, c, rc = run(cmd.split())
    print(f"{cmd}: wall p50 {w:.0f} ms (min {lo:.0f}), cpu p50 {c:.0f} ms, rc={rc}")
