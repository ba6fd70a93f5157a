"""bench_meta.py - what every bench/ result records about where it ran: the
CPU model and its SIMD flags (from /proc/cpuinfo) and the git commit (with
"-dirty" when tracked files differ from it). Imported by the scripts'
inline Python (sys.path gets bench/ first)."""
import subprocess


def cpu_model_and_flags():
    """("AMD EPYC ...", ["avx", "avx2", ...]); ("unknown", []) off Linux."""
    cpu, flags = "unknown", []
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name") and cpu == "unknown":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = [f for f in line.split(":", 1)[1].split() if f.startswith(("avx", "fma", "f16c", "amx"))]
    except OSError:
        pass
    return cpu, flags


def write_result(kind, fields, out=None):
    """Writes fields plus the date, CPU, its flags and the commit as JSON to
    out, or to bench/results/<date>-<machine>-<kind>.json; returns the path."""
    import datetime
    import json
    import platform
    cpu, flags = cpu_model_and_flags()
    date = datetime.date.today().isoformat()
    out = out or f"bench/results/{date}-{platform.node()}-{kind}.json"
    with open(out, "w") as f:
        json.dump({"date": date, "cpu": cpu, "cpu_flags": flags, "commit": git_commit(),
                   **fields}, f, indent=1)
    return out


def git_commit(default="unknown"):
    """HEAD's full hash, "-dirty" added when tracked files are changed."""
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        if subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                          capture_output=True, text=True).stdout.strip():
            commit += "-dirty"
        return commit
    except (OSError, subprocess.CalledProcessError):
        return default
