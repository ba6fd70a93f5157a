"""bench_server.py - what the bench scripts that start their own brisk servers
share: a free port, and the server's /metrics as a dict (imported with
bench/ first on sys.path, like bench_meta)."""
import socket
import urllib.request


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metrics(port):
    """Sample name (with its labels) -> value, from the server's /metrics."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def pick(m, name, label=""):
    """The value of the first sample called name whose labels include label (0.0: none)."""
    for k, v in m.items():
        if k.split("{", 1)[0] == name and label in k:
            return v
    return 0.0
